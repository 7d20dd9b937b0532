// Adversarial tests of the sequence hash: distinct prefixes never share a
// value. Exhaustive over every prompt up to a small length over a small
// alphabet, under one salt and across salts and extra-key domains, plus the
// shapes that break a symmetric or cancelling chain step (repeated, swapped
// and shifted blocks).

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/hashing.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {
namespace hashing_collision_test {

std::vector<SequenceHash> sequence_of(const std::vector<Token>& tokens, std::uint32_t block_size,
                                      SaltHash salt, const std::vector<ExtraKey>& keys = {}) {
  std::vector<std::uint64_t> block_hashes;
  std::vector<SequenceHash> sequence_hashes;
  hash_blocks(tokens, block_size, salt, std::nullopt, block_hashes, sequence_hashes, keys);
  return sequence_hashes;
}

// Records every prefix's value under a label naming the prefix; fails on the
// first value that two different labels share, or one label given two values.
class PrefixIndex {
 public:
  void add(std::uint64_t value, const std::string& label) {
    auto [it, inserted] = by_value_.try_emplace(value, label);
    if (!inserted && it->second != label) {
      ADD_FAILURE() << "prefixes " << it->second << " and " << label << " share sequence hash "
                    << value;
      ++collisions_;
    }
  }
  [[nodiscard]] std::size_t size() const { return by_value_.size(); }
  [[nodiscard]] std::size_t collisions() const { return collisions_; }

 private:
  std::unordered_map<std::uint64_t, std::string> by_value_;
  std::size_t collisions_ = 0;
};

std::string label_of(const std::string& domain, const std::vector<Token>& tokens,
                     std::size_t blocks, std::uint32_t block_size) {
  std::string label = domain + ":";
  for (std::size_t i = 0; i < blocks * block_size; ++i) label += static_cast<char>('0' + tokens[i]);
  return label;
}

// Every prompt of `max_blocks` blocks over `alphabet` tokens; every prefix of
// each is recorded (prefixes shared between prompts record the same value).
void add_all_prompts(PrefixIndex& index, const std::string& domain, Token alphabet,
                     std::uint32_t block_size, std::size_t max_blocks, SaltHash salt,
                     const std::vector<ExtraKey>& keys = {}) {
  const std::size_t length = block_size * max_blocks;
  std::size_t prompts = 1;
  for (std::size_t i = 0; i < length; ++i) prompts *= alphabet;
  std::vector<Token> tokens(length);
  for (std::size_t p = 0; p < prompts; ++p) {
    std::size_t x = p;
    for (std::size_t i = 0; i < length; ++i, x /= alphabet)
      tokens[i] = static_cast<Token>(x % alphabet);
    const auto hashes = sequence_of(tokens, block_size, salt, keys);
    for (std::size_t b = 0; b < hashes.size(); ++b)
      index.add(hashes[b].value(), label_of(domain, tokens, b + 1, block_size));
  }
}

TEST(HashingCollisionTest, NoTwoPromptsOfTwoTokenBlocksOverTwoTokensShareAHash) {
  // 4 distinct blocks, prompts of up to 8 blocks: 87,380 distinct prefixes.
  PrefixIndex index;
  add_all_prompts(index, "", 2, 2, 8, kNoSalt);
  EXPECT_EQ(index.collisions(), 0U);
  EXPECT_EQ(index.size(), 4U + 16 + 64 + 256 + 1024 + 4096 + 16384 + 65536);
}

TEST(HashingCollisionTest, NoTwoPromptsOfOneTokenBlocksOverThreeTokensShareAHash) {
  // Blocks of one token (XXH3's 4-byte path), up to 10 blocks: 88,572 prefixes.
  PrefixIndex index;
  add_all_prompts(index, "", 3, 1, 10, kNoSalt);
  EXPECT_EQ(index.collisions(), 0U);
  std::size_t expected = 0;
  for (std::size_t k = 1, n = 3; k <= 10; ++k, n *= 3) expected += n;
  EXPECT_EQ(index.size(), expected);
}

TEST(HashingCollisionTest, NoPrefixSharesAHashAcrossSaltsAndKeyDomains) {
  // The same prompts under five salts and with a multimodal key: every
  // (salt, prefix) pair is distinct, so no value may repeat across them.
  PrefixIndex index;
  const std::vector<std::pair<std::string, SaltHash>> salts = {
      {"none", kNoSalt},
      {"salt=a", SaltBuilder().cache_salt("a").build()},
      {"salt=b", SaltBuilder().cache_salt("b").build()},
      {"lora=a", SaltBuilder().lora("a").build()},
      {"lora=a,salt=a", SaltBuilder().lora("a").cache_salt("a").build()},
  };
  for (const auto& [name, salt] : salts) add_all_prompts(index, name, 2, 2, 6, salt);
  // A multimodal key on the first block changes that block and every later one.
  add_all_prompts(index, "mm@0", 2, 2, 6, kNoSalt, {ExtraKey::multimodal(0, std::uint64_t{7})});
  add_all_prompts(index, "mm@1", 2, 2, 6, kNoSalt, {ExtraKey::multimodal(1, std::uint64_t{7})});
  EXPECT_EQ(index.collisions(), 0U);
  EXPECT_EQ(index.size(), 7U * (4 + 16 + 64 + 256 + 1024 + 4096));
}

TEST(HashingCollisionTest, RepeatedBlocksDoNotCancel) {
  // With a chain step of mix(parent ^ block), [A, A] and [B, B] both hash to
  // mix(0) at position 1, under any salt.
  const std::vector<Token> aa = {1, 2, 1, 2};
  const std::vector<Token> bb = {3, 4, 3, 4};
  for (const SaltHash salt : {kNoSalt, SaltBuilder().cache_salt("tenant").build()}) {
    const auto a = sequence_of(aa, 2, salt);
    const auto b = sequence_of(bb, 2, salt);
    EXPECT_NE(a[1].value(), b[1].value());
    EXPECT_NE(a[1].value(), 0U);
  }
  EXPECT_NE(sequence_of(aa, 2, kNoSalt)[1].value(),
            sequence_of(aa, 2, SaltBuilder().cache_salt("tenant").build())[1].value());
}

TEST(HashingCollisionTest, SwappedBlocksDiffer) {
  const auto ab = sequence_of({1, 2, 3, 4}, 2, kNoSalt);
  const auto ba = sequence_of({3, 4, 1, 2}, 2, kNoSalt);
  EXPECT_NE(ab[1].value(), ba[1].value());
  // Swapping the parent's value and the block hash through chain() differs too.
  const SequenceHash p = chain(std::nullopt, 0x1111);
  const SequenceHash q = chain(std::nullopt, 0x2222);
  EXPECT_NE(chain(p, 0x2222).value(), chain(q, 0x1111).value());
}

TEST(HashingCollisionTest, ShiftedAndRepeatedRunsDiffer) {
  // [A, B, C], [X, A, B], [A, A, B], [A, B, B], [B, A, A]: every prefix distinct.
  const std::vector<std::vector<Token>> prompts = {{1, 1, 2, 2, 3, 3},
                                                   {9, 9, 1, 1, 2, 2},
                                                   {1, 1, 1, 1, 2, 2},
                                                   {1, 1, 2, 2, 2, 2},
                                                   {2, 2, 1, 1, 1, 1}};
  PrefixIndex index;
  for (const auto& prompt : prompts) {
    const auto hashes = sequence_of(prompt, 2, kNoSalt);
    for (std::size_t b = 0; b < hashes.size(); ++b)
      index.add(hashes[b].value(), label_of("", prompt, b + 1, 2));
  }
  EXPECT_EQ(index.collisions(), 0U);
}

TEST(HashingCollisionTest, PositionEntersTheChainStep) {
  // The same (parent value, block hash) pair at two positions gives two values.
  const SequenceHash at1(0x5555, 0x1111, 1);
  const SequenceHash at7(0x5555, 0x1111, 7);
  EXPECT_NE(chain(at1, 0x2222).value(), chain(at7, 0x2222).value());
}

TEST(HashingCollisionTest, BatchAndStepwiseHashingAgreeOnAdversarialPrompts) {
  const std::vector<Token> prompt = {5, 5, 5, 5, 5, 5, 6, 6, 5, 5};
  const auto batch = sequence_of(prompt, 2, kNoSalt);
  std::optional<SequenceHash> parent;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const SequenceHash step =
        chain(parent, block_hash(std::span(prompt).subspan(b * 2, 2), kNoSalt));
    EXPECT_EQ(step, batch[b]) << "block " << b;
    parent = step;
  }
}

}  // namespace hashing_collision_test
}  // namespace kvbm
