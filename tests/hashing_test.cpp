// Tests for kvbm/hashing.h: known answers against XXH3 computed directly,
// chaining, salts, domain separation of extra keys, and the batch API.

#include "kvbm/hashing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/token_block.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm {
namespace hashing_test {

// ---- Reference encoders, written from the spec, independent of the library.

void put_le32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_le64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
std::string token_bytes(const std::vector<Token>& tokens) {
  std::string out;
  for (Token t : tokens) put_le32(out, t);
  return out;
}
std::uint64_t xxh3(const std::string& bytes, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}
// The chain step, written out: XXH3-64 seeded with the position of [parent LE64][block LE64].
std::uint64_t ref_chain(std::uint64_t block_hash, std::uint64_t parent_value,
                        std::uint32_t position) {
  std::string bytes;
  put_le64(bytes, parent_value);
  put_le64(bytes, block_hash);
  return xxh3(bytes, position);
}
// [tag][u32 length][bytes]
void put_sequence_key(std::string& out, KeyDomain domain, std::string_view bytes) {
  out.push_back(static_cast<char>(domain));
  put_le32(out, static_cast<std::uint32_t>(bytes.size()));
  out.append(bytes);
}
// [tag][u32 length][u32 offset][bytes], length covering offset and bytes
void put_block_key(std::string& out, std::uint32_t offset, std::string_view bytes) {
  out.push_back(static_cast<char>(KeyDomain::kMultimodal));
  put_le32(out, static_cast<std::uint32_t>(4 + bytes.size()));
  put_le32(out, offset);
  out.append(bytes);
}

std::vector<Token> iota_tokens(std::size_t n, Token first) {
  std::vector<Token> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

template <class F>
std::string usage_error_message(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return {};
}

// ---- Known answers

TEST(HashingTest, BlockHashIsXxh3OfLittleEndianTokenBytes) {
  const std::vector<Token> tokens = {1, 2,  3,  0xDEADBEEF, 0,  70000, 42, 7,
                                     9, 10, 11, 12,         13, 14,    15, 16};
  EXPECT_EQ(block_hash(tokens, kNoSalt), xxh3(token_bytes(tokens), 0));
  EXPECT_EQ(block_hash(tokens, kNoSalt),
            XXH3_64bits(token_bytes(tokens).data(), tokens.size() * 4));
  const SaltHash salt(0x0123456789ABCDEFULL);
  EXPECT_EQ(block_hash(tokens, salt), xxh3(token_bytes(tokens), salt.value()));
}

TEST(HashingTest, GoldenValuesStayStable) {
  // Hashes are persisted (disk tier) and exchanged between processes: the
  // encoding must not change silently. These literals pin it (the chain step
  // changed in format 2 of the disk slot, when it stopped being symmetric).
  const std::vector<Token> tokens = iota_tokens(16, 1);
  EXPECT_EQ(block_hash(tokens, kNoSalt), 0xD2E217905D2BDA1DULL);
  EXPECT_EQ(SaltBuilder().lora("adapter").cache_salt("tenant").build().value(),
            0x2A8485A3F3502490ULL);
  EXPECT_EQ(chain(SequenceHash(5, std::nullopt, 0), 7).value(), 0x86BEC77DD5259513ULL);
  const ExtraKey mm = ExtraKey::multimodal(3, 0xABCDEFULL);
  EXPECT_EQ(block_hash(tokens, kNoSalt, {&mm, 1}), 0x868F0C7DC2D7B04AULL);
}

TEST(HashingTest, SaltIsXxh3OfTaggedKeysInDomainOrder) {
  std::string expected;
  put_sequence_key(expected, KeyDomain::kLoraAdapter, "my-lora");
  put_sequence_key(expected, KeyDomain::kCacheSalt, "tenant-7");
  const SaltHash salt = SaltBuilder().cache_salt("tenant-7").lora("my-lora").build();
  EXPECT_EQ(salt.value(), XXH3_64bits(expected.data(), expected.size()));
  // Order of the builder calls does not matter.
  EXPECT_EQ(salt, SaltBuilder().lora("my-lora").cache_salt("tenant-7").build());
  EXPECT_EQ(
      salt,
      SaltBuilder().add(ExtraKey::cache_salt("tenant-7")).add(ExtraKey::lora("my-lora")).build());
}

TEST(HashingTest, BlockKeysAreAppendedInTaggedEncoding) {
  const std::vector<Token> tokens = iota_tokens(16, 100);
  const std::vector<ExtraKey> keys = {ExtraKey::multimodal(2, 0x1122334455667788ULL),
                                      ExtraKey::multimodal(9, std::string_view("image-b"))};
  std::string expected = token_bytes(tokens);
  std::string h;
  put_le64(h, 0x1122334455667788ULL);
  put_block_key(expected, 2, h);
  put_block_key(expected, 9, "image-b");
  const SaltHash salt(99);
  EXPECT_EQ(block_hash(tokens, salt, keys), xxh3(expected, 99));
}

// ---- Chaining

TEST(HashingTest, FirstBlockSequenceHashIsItsBlockHash) {
  const SequenceHash s = chain(std::nullopt, 0x1234);
  EXPECT_EQ(s.value(), 0x1234U);
  EXPECT_FALSE(s.has_parent());
  EXPECT_EQ(s.position(), 0U);
}

TEST(HashingTest, ChainHashesBlockHashSeededWithParentValue) {
  const SequenceHash first = chain(std::nullopt, 0xAAAA);
  const SequenceHash second = chain(first, 0xBBBB);
  EXPECT_EQ(second.value(), ref_chain(0xBBBB, 0xAAAA, 1));
  EXPECT_TRUE(second.has_parent());
  EXPECT_EQ(second.parent(), first.value());
  EXPECT_EQ(second.position(), 1U);
  const SequenceHash third = chain(second, 0xCCCC);
  EXPECT_EQ(third.value(), ref_chain(0xCCCC, second.value(), 2));
  EXPECT_EQ(third.parent(), second.value());
  EXPECT_EQ(third.position(), 2U);
}

TEST(HashingTest, ChainStepIsXxh3OfParentAndBlock) {
  // src/hashing.cpp spells XXH3's 16-byte path out (and on x86-64 its
  // multiply); it must stay XXH3 bit for bit. Edge words (0, all ones, one
  // bit, equal and swapped pairs), edge positions, then random triples.
  const std::uint64_t words[] = {0, 1, ~0ULL, 1ULL << 63, 0x8000'0000ULL, 0x0123456789ABCDEFULL};
  const std::uint32_t positions[] = {1,   2,     255,
                                     256, 65536, std::numeric_limits<std::uint32_t>::max()};
  for (const std::uint64_t parent : words) {
    for (const std::uint64_t block : words) {
      for (const std::uint32_t position : positions) {
        const SequenceHash p(parent, position == 1 ? std::nullopt : std::optional(parent + 1),
                             position - 1);
        EXPECT_EQ(chain(p, block).value(), ref_chain(block, parent, position))
            << parent << " " << block << " " << position;
      }
    }
  }
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t parent = rng();
    const std::uint64_t block = rng();
    const auto position = static_cast<std::uint32_t>(rng() % 100000 + 1);
    const SequenceHash p(parent, position == 1 ? std::nullopt : std::optional(rng()), position - 1);
    ASSERT_EQ(chain(p, block).value(), ref_chain(block, parent, position));
  }
}

TEST(HashingTest, ChainAtLastPositionThrows) {
  const SequenceHash last(1, 2, std::numeric_limits<std::uint32_t>::max());
  EXPECT_THROW((void)chain(last, 3), UsageError);
}

TEST(HashingTest, SameTokensAfterDifferentPrefixGiveDifferentSequenceHashes) {
  const std::vector<Token> a = iota_tokens(4, 10), b = iota_tokens(4, 20), z = iota_tokens(4, 30);
  const SequenceHash after_a =
      chain(chain(std::nullopt, block_hash(a, kNoSalt)), block_hash(z, kNoSalt));
  const SequenceHash after_b =
      chain(chain(std::nullopt, block_hash(b, kNoSalt)), block_hash(z, kNoSalt));
  EXPECT_NE(after_a.value(), after_b.value());
  EXPECT_EQ(after_a.position(), after_b.position());
  // ...while the same prefix gives the same value.
  const SequenceHash again =
      chain(chain(std::nullopt, block_hash(a, kNoSalt)), block_hash(z, kNoSalt));
  EXPECT_EQ(after_a, again);
}

// ---- Salt

TEST(HashingTest, EmptyBuilderIsNoSalt) {
  EXPECT_EQ(SaltBuilder().build(), kNoSalt);
  EXPECT_EQ(kNoSalt.value(), SaltHash::kNoSaltValue);
  EXPECT_EQ(SaltHash(), kNoSalt);
}

TEST(HashingTest, SaltChangesEveryHash) {
  const std::vector<Token> tokens = iota_tokens(32, 1);
  const SaltHash salted = SaltBuilder().cache_salt("tenant-a").build();
  EXPECT_NE(salted, kNoSalt);
  EXPECT_NE(block_hash(tokens, salted), block_hash(tokens, kNoSalt));
  EXPECT_NE(block_hash(tokens, salted),
            block_hash(tokens, SaltBuilder().cache_salt("tenant-b").build()));

  std::vector<std::uint64_t> bh_plain, bh_salted;
  std::vector<SequenceHash> sh_plain, sh_salted;
  hash_blocks(tokens, 8, kNoSalt, std::nullopt, bh_plain, sh_plain);
  hash_blocks(tokens, 8, salted, std::nullopt, bh_salted, sh_salted);
  for (std::size_t i = 0; i < sh_plain.size(); ++i) {
    EXPECT_NE(bh_plain[i], bh_salted[i]) << i;
    EXPECT_NE(sh_plain[i].value(), sh_salted[i].value()) << i;
  }
}

TEST(HashingTest, EmptyKeyDiffersFromAbsentKey) {
  EXPECT_NE(SaltBuilder().lora("").build(), kNoSalt);
  EXPECT_NE(SaltBuilder().lora("").build(), SaltBuilder().cache_salt("").build());
}

// ---- Domain separation

TEST(HashingTest, LoraNameEqualToCacheSaltGivesDifferentSalt) {
  EXPECT_NE(SaltBuilder().lora("x").build(), SaltBuilder().cache_salt("x").build());
  EXPECT_NE(SaltBuilder().lora("tenant").build(), SaltBuilder().cache_salt("tenant").build());
}

TEST(HashingTest, KeyBoundariesAreUnambiguous) {
  EXPECT_NE(SaltBuilder().lora("ab").cache_salt("c").build(),
            SaltBuilder().lora("a").cache_salt("bc").build());
  EXPECT_NE(SaltBuilder().lora("abc").build(), SaltBuilder().lora("ab").cache_salt("c").build());
  EXPECT_NE(SaltBuilder().lora("").cache_salt("x").build(),
            SaltBuilder().lora("x").cache_salt("").build());

  const std::vector<Token> tokens = iota_tokens(8, 1);
  const std::vector<ExtraKey> ab_c = {ExtraKey::multimodal(0, std::string_view("ab")),
                                      ExtraKey::multimodal(0, std::string_view("c"))};
  const std::vector<ExtraKey> a_bc = {ExtraKey::multimodal(0, std::string_view("a")),
                                      ExtraKey::multimodal(0, std::string_view("bc"))};
  EXPECT_NE(block_hash(tokens, kNoSalt, ab_c), block_hash(tokens, kNoSalt, a_bc));
  // The offset is part of the key.
  const ExtraKey at1 = ExtraKey::multimodal(1, 5), at2 = ExtraKey::multimodal(2, 5);
  EXPECT_NE(block_hash(tokens, kNoSalt, {&at1, 1}), block_hash(tokens, kNoSalt, {&at2, 1}));
  // A key changes the hash of the block it is in.
  EXPECT_NE(block_hash(tokens, kNoSalt, {&at1, 1}), block_hash(tokens, kNoSalt));
}

// ---- Misuse

TEST(HashingTest, SettingADomainTwiceThrows) {
  SaltBuilder b;
  b.lora("a");
  const std::string msg = usage_error_message([&] { b.lora("b"); });
  EXPECT_NE(msg.find("already set"), std::string::npos) << msg;
  EXPECT_THROW(SaltBuilder().cache_salt("a").add(ExtraKey::cache_salt("b")), UsageError);
}

TEST(HashingTest, BlockLevelKeyInSaltBuilderThrows) {
  const std::string msg =
      usage_error_message([] { SaltBuilder().add(ExtraKey::multimodal(0, 1)); });
  EXPECT_NE(msg.find("wrong kind"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multimodal"), std::string::npos) << msg;
}

TEST(HashingTest, SequenceLevelKeyAsBlockKeyThrows) {
  const std::vector<Token> tokens = iota_tokens(4, 1);
  const ExtraKey lora = ExtraKey::lora("x");
  const std::string msg = usage_error_message([&] {
    (void)block_hash(tokens, kNoSalt, {&lora, 1});
  });
  EXPECT_NE(msg.find("wrong kind"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SaltBuilder"), std::string::npos) << msg;

  std::vector<std::uint64_t> bh;
  std::vector<SequenceHash> sh;
  EXPECT_THROW(hash_blocks(tokens, 4, kNoSalt, std::nullopt, bh, sh, {&lora, 1}), UsageError);
}

TEST(HashingTest, BadBlockKeyOffsetsThrow) {
  const std::vector<Token> tokens = iota_tokens(4, 1);
  const ExtraKey outside = ExtraKey::multimodal(4, 1);
  EXPECT_THROW((void)block_hash(tokens, kNoSalt, {&outside, 1}), UsageError);
  const std::vector<ExtraKey> unsorted = {ExtraKey::multimodal(2, 1), ExtraKey::multimodal(1, 1)};
  EXPECT_THROW((void)block_hash(tokens, kNoSalt, unsorted), UsageError);
}

TEST(HashingTest, HashBlocksRejectsBadShapes) {
  const std::vector<Token> tokens = iota_tokens(10, 1);
  std::vector<std::uint64_t> bh;
  std::vector<SequenceHash> sh;
  EXPECT_THROW(hash_blocks(tokens, 0, kNoSalt, std::nullopt, bh, sh), UsageError);
  EXPECT_THROW(hash_blocks(tokens, 4, kNoSalt, std::nullopt, bh, sh), UsageError);
  EXPECT_TRUE(bh.empty());
  EXPECT_TRUE(sh.empty());
}

// ---- Batch API

TEST(HashingTest, HashBlocksEqualsBlockByBlock) {
  // Sizes cover every XXH3 length class: <=16, 17..128, 129..240 and long
  // (> 240 bytes, where a seeded hash uses a derived secret) bytes per block.
  const std::vector<Token> tokens = iota_tokens(600, 1000);
  for (const SaltHash salt : {kNoSalt, SaltBuilder().lora("l").build()}) {
    for (std::uint32_t bs : {1U, 4U, 5U, 16U, 32U, 60U, 61U, 64U, 100U, 300U}) {
      SCOPED_TRACE(testing::Message() << "block size " << bs << ", salt " << salt.value());
      const std::span<const Token> whole(tokens.data(), tokens.size() / bs * bs);
      std::vector<std::uint64_t> bh;
      std::vector<SequenceHash> sh;
      hash_blocks(whole, bs, salt, std::nullopt, bh, sh);
      ASSERT_EQ(bh.size(), tokens.size() / bs);
      ASSERT_EQ(sh.size(), tokens.size() / bs);
      std::optional<SequenceHash> parent;
      for (std::size_t i = 0; i < bh.size(); ++i) {
        const std::span<const Token> block(tokens.data() + i * bs, bs);
        EXPECT_EQ(bh[i], block_hash(block, salt));
        EXPECT_EQ(bh[i], XXH3_64bits_withSeed(block.data(), block.size_bytes(), salt.value()));
        const SequenceHash expected = chain(parent, bh[i]);
        EXPECT_EQ(sh[i], expected);
        EXPECT_EQ(sh[i].position(), i);
        parent = expected;
      }
    }
  }
}

TEST(HashingTest, HashBlocksAppendsAndChainsToParent) {
  const std::vector<Token> tokens = iota_tokens(32, 1);
  std::vector<std::uint64_t> whole_bh, bh;
  std::vector<SequenceHash> whole_sh, sh;
  hash_blocks(tokens, 8, kNoSalt, std::nullopt, whole_bh, whole_sh);
  hash_blocks(std::span<const Token>(tokens).first(16), 8, kNoSalt, std::nullopt, bh, sh);
  hash_blocks(std::span<const Token>(tokens).subspan(16), 8, kNoSalt, sh.back(), bh, sh);
  EXPECT_EQ(bh, whole_bh);
  EXPECT_EQ(sh, whole_sh);
}

TEST(HashingTest, HashBlocksAndCopyCopiesAndHashesLikeHashBlocks) {
  const std::vector<Token> tokens = iota_tokens(2048 * 3, 7);
  const SaltHash salt(0xABCDEF);
  for (std::uint32_t bs : {16U, 24U, 64U, 2048U}) {
    SCOPED_TRACE(bs);
    const std::span<const Token> whole(tokens.data(), tokens.size() / bs * bs);
    std::vector<std::uint64_t> bh, copied_bh;
    std::vector<SequenceHash> sh, copied_sh;
    hash_blocks(whole, bs, salt, std::nullopt, bh, sh);
    std::vector<Token> copy(whole.size() + 1, 0xFFFFFFFF);
    detail::hash_blocks_and_copy(whole, copy.data(), bs, salt, std::nullopt, copied_bh, copied_sh);
    EXPECT_EQ(copied_bh, bh);
    EXPECT_EQ(copied_sh, sh);
    EXPECT_TRUE(std::ranges::equal(std::span<const Token>(copy).first(whole.size()), whole));
    EXPECT_EQ(copy.back(), 0xFFFFFFFFU);  // nothing written past the end
  }
}

TEST(HashingTest, HashBlocksRebasesKeysToTheirBlock) {
  const std::vector<Token> tokens = iota_tokens(32, 1);
  const std::vector<ExtraKey> keys = {ExtraKey::multimodal(3, 11), ExtraKey::multimodal(17, 22),
                                      ExtraKey::multimodal(20, 33)};
  std::vector<std::uint64_t> bh;
  std::vector<SequenceHash> sh;
  hash_blocks(tokens, 8, kNoSalt, std::nullopt, bh, sh, keys);
  const std::span<const Token> t(tokens);
  const std::vector<ExtraKey> block0 = {ExtraKey::multimodal(3, 11)};
  const std::vector<ExtraKey> block2 = {ExtraKey::multimodal(1, 22), ExtraKey::multimodal(4, 33)};
  EXPECT_EQ(bh[0], block_hash(t.subspan(0, 8), kNoSalt, block0));
  EXPECT_EQ(bh[1], block_hash(t.subspan(8, 8), kNoSalt));
  EXPECT_EQ(bh[2], block_hash(t.subspan(16, 8), kNoSalt, block2));
  EXPECT_EQ(bh[3], block_hash(t.subspan(24, 8), kNoSalt));
}

TEST(HashingTest, TokenBlockComputeMatchesFreeFunctions) {
  const std::vector<Token> tokens = iota_tokens(16, 5);
  const SequenceHash parent = chain(std::nullopt, 77);
  const TokenBlock block = TokenBlock::compute(tokens, kNoSalt, parent);
  EXPECT_TRUE(block.valid());
  EXPECT_EQ(block.block_hash(), block_hash(tokens, kNoSalt));
  EXPECT_EQ(block.sequence_hash(), chain(parent, block.block_hash()));
  EXPECT_TRUE(block.holds_tokens(tokens));
  EXPECT_FALSE(block.holds_tokens(iota_tokens(16, 6)));
  EXPECT_THROW((void)TokenBlock::compute({}, kNoSalt, std::nullopt), UsageError);
}

TEST(HashingTest, KeyDomainNames) {
  EXPECT_EQ(to_string(KeyDomain::kLoraAdapter), "lora_adapter");
  EXPECT_EQ(to_string(KeyDomain::kCacheSalt), "cache_salt");
  EXPECT_EQ(to_string(KeyDomain::kMultimodal), "multimodal");
  EXPECT_TRUE(is_sequence_level(KeyDomain::kLoraAdapter));
  EXPECT_TRUE(is_sequence_level(KeyDomain::kCacheSalt));
  EXPECT_TRUE(is_block_level(KeyDomain::kMultimodal));
  EXPECT_FALSE(is_block_level(KeyDomain::kCacheSalt));
}

}  // namespace hashing_test
}  // namespace kvbm
