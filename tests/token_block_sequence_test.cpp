// Tests for kvbm/token_block_sequence.h: block boundaries of extend, append and
// truncate, equality with a fresh sequence, and block-level extra keys.

#include "kvbm/token_block_sequence.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "test_util.h"

namespace kvbm {
namespace token_block_sequence_test {

std::vector<Token> iota_tokens(std::size_t n, Token first) {
  std::vector<Token> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::uint64_t test_seed() {
  const std::uint64_t seed = test::env_test_seed().value_or(20240611ULL);
  std::cout << "[ seed     ] KVBM_TEST_SEED=" << seed << "\n";
  return seed;
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

// Everything observable about the hashed state must match.
void expect_same(const TokenBlockSequence& a, const TokenBlockSequence& b) {
  ASSERT_EQ(a.total_tokens(), b.total_tokens());
  ASSERT_EQ(a.num_blocks(), b.num_blocks());
  EXPECT_TRUE(std::ranges::equal(a.tokens(), b.tokens()));
  EXPECT_TRUE(std::ranges::equal(a.tail_tokens(), b.tail_tokens()));
  EXPECT_TRUE(std::ranges::equal(a.block_hashes(), b.block_hashes()));
  EXPECT_TRUE(std::ranges::equal(a.sequence_hashes(), b.sequence_hashes()));
}

TokenBlockSequence fresh(std::span<const Token> tokens, std::uint32_t bs, SaltHash salt = kNoSalt) {
  TokenBlockSequence s(bs, salt);
  s.extend(tokens);
  return s;
}

TEST(TokenBlockSequenceTest, ZeroBlockSizeThrows) {
  EXPECT_THROW(TokenBlockSequence(0), UsageError);
}

TEST(TokenBlockSequenceTest, ExtendReturnsExactlyTheBlocksCompleted) {
  TokenBlockSequence s(4);
  EXPECT_EQ(s.extend({}), 0U);
  const std::vector<Token> t = iota_tokens(20, 1);
  const std::span<const Token> all(t);
  EXPECT_EQ(s.extend(all.subspan(0, 3)), 0U);
  EXPECT_EQ(s.num_blocks(), 0U);
  EXPECT_EQ(s.tail_tokens().size(), 3U);
  EXPECT_EQ(s.extend(all.subspan(3, 1)), 1U);  // exactly fills block 0
  EXPECT_EQ(s.num_blocks(), 1U);
  EXPECT_TRUE(s.tail_tokens().empty());
  EXPECT_EQ(s.extend(all.subspan(4, 9)), 2U);  // 13 tokens: 3 blocks + 1
  EXPECT_EQ(s.num_blocks(), 3U);
  EXPECT_EQ(s.tail_tokens().size(), 1U);
  EXPECT_EQ(s.tail_tokens()[0], 13U);
  EXPECT_EQ(s.extend(all.subspan(13, 7)), 2U);  // 20 tokens: 5 blocks
  EXPECT_EQ(s.num_blocks(), 5U);
  EXPECT_EQ(s.total_tokens(), 20U);
  EXPECT_TRUE(s.tail_tokens().empty());
}

TEST(TokenBlockSequenceTest, ExtendWithItsOwnTokens) {
  const std::vector<Token> t = iota_tokens(10, 1);
  TokenBlockSequence s = fresh(t, 4);
  s.extend(s.tokens());  // the source may move when the storage grows
  std::vector<Token> twice = t;
  twice.insert(twice.end(), t.begin(), t.end());
  expect_same(s, fresh(twice, 4));
}

TEST(TokenBlockSequenceTest, HashesMatchTheFreeFunctions) {
  const SaltHash salt = SaltBuilder().cache_salt("t").build();
  const std::vector<Token> t = iota_tokens(37, 500);
  const TokenBlockSequence s = fresh(t, 8, salt);
  ASSERT_EQ(s.num_blocks(), 4U);
  std::optional<SequenceHash> parent;
  for (std::size_t i = 0; i < s.num_blocks(); ++i) {
    const std::span<const Token> block(t.data() + i * 8, 8);
    const std::uint64_t h = block_hash(block, salt);
    EXPECT_EQ(s.block_hashes()[i], h);
    const SequenceHash expected = chain(parent, h);
    EXPECT_EQ(s.sequence_hashes()[i], expected);
    const TokenBlockView v = s.block(i);
    EXPECT_TRUE(std::ranges::equal(v.tokens(), block));
    EXPECT_TRUE(std::ranges::equal(s.block_tokens(i), block));
    EXPECT_EQ(v.block_hash(), h);
    EXPECT_EQ(v.sequence_hash(), expected);
    const TokenBlock owned = s.to_token_block(i);
    EXPECT_EQ(owned, TokenBlock::compute({block.begin(), block.end()}, salt, parent));
    parent = expected;
  }
  EXPECT_EQ(s.last_sequence_hash(), parent);
  EXPECT_THROW((void)s.block(4), UsageError);
  EXPECT_THROW((void)s.block_tokens(4), UsageError);
  EXPECT_THROW((void)s.to_token_block(4), UsageError);
}

TEST(TokenBlockSequenceTest, AppendCompletesABlockExactlyAtEachBoundary) {
  TokenBlockSequence s(4);
  for (Token t = 0; t < 17; ++t) {
    const std::size_t completed = s.append(t);
    EXPECT_EQ(completed, (t + 1) % 4 == 0 ? 1U : 0U) << "token " << t;
    EXPECT_EQ(s.num_blocks(), (t + 1) / 4);
  }
  EXPECT_EQ(s.tail_tokens().size(), 1U);
}

TEST(TokenBlockSequenceTest, IncrementalAppendsEqualOneExtend) {
  // Block sizes cover the batch loop's fixed sizes (16, 32, 64), other sizes,
  // blocks over 240 bytes (seeded XXH3 with a reused secret) and blocks over
  // 2 KiB (copied in pieces); append hashes block by block with block_hash().
  std::mt19937_64 rng(test_seed());
  const SaltHash salt = SaltBuilder().cache_salt("tenant").build();
  for (std::uint32_t bs : {1U, 3U, 16U, 32U, 64U, 100U, 1024U}) {
    SCOPED_TRACE(bs);
    std::vector<Token> t(bs == 1024 ? 5000 : 700);
    for (Token& x : t) x = static_cast<Token>(rng());
    const TokenBlockSequence whole = fresh(t, bs, salt);
    TokenBlockSequence by_token(bs, salt);
    for (Token x : t) by_token.append(x);
    expect_same(whole, by_token);
    std::optional<SequenceHash> parent;
    for (std::size_t i = 0; i < whole.num_blocks(); ++i) {
      parent = chain(parent, block_hash(std::span<const Token>(t).subspan(i * bs, bs), salt));
      ASSERT_EQ(whole.sequence_hashes()[i], *parent) << i;
    }
    // Random chunks mixed with appends.
    TokenBlockSequence mixed(bs, salt);
    std::size_t pos = 0;
    while (pos < t.size()) {
      if (rng() % 3 == 0) {
        mixed.append(t[pos++]);
      } else {
        const std::size_t n = std::min<std::size_t>(t.size() - pos, rng() % (3 * bs + 50));
        mixed.extend(std::span<const Token>(t).subspan(pos, n));
        pos += n;
      }
    }
    expect_same(whole, mixed);
  }
}

TEST(TokenBlockSequenceTest, TruncateInsideABlockMakesItTheTail) {
  const std::vector<Token> t = iota_tokens(20, 1);
  TokenBlockSequence s = fresh(t, 4);
  ASSERT_EQ(s.num_blocks(), 5U);
  EXPECT_EQ(s.truncate(10), 3U);  // blocks 0,1 stay; block 2 is cut
  EXPECT_EQ(s.num_blocks(), 2U);
  EXPECT_EQ(s.total_tokens(), 10U);
  EXPECT_EQ(s.tail_tokens().size(), 2U);
  expect_same(s, fresh(std::span<const Token>(t).first(10), 4));
  // Refilling with other tokens gives the hashes of a fresh sequence.
  const std::vector<Token> other = {900, 901, 902, 903, 904, 905};
  EXPECT_EQ(s.extend(other), 2U);
  std::vector<Token> expected(t.begin(), t.begin() + 10);
  expected.insert(expected.end(), other.begin(), other.end());
  expect_same(s, fresh(expected, 4));
  EXPECT_NE(s.sequence_hashes()[2], fresh(t, 4).sequence_hashes()[2]);
}

TEST(TokenBlockSequenceTest, TruncateAtBoundariesAndEnds) {
  const std::vector<Token> t = iota_tokens(18, 1);
  TokenBlockSequence s = fresh(t, 4);  // 4 blocks + 2 tail
  EXPECT_EQ(s.truncate(18), 0U);       // no-op
  EXPECT_EQ(s.total_tokens(), 18U);
  EXPECT_EQ(s.truncate(16), 0U);  // only the tail goes
  EXPECT_EQ(s.num_blocks(), 4U);
  EXPECT_TRUE(s.tail_tokens().empty());
  EXPECT_EQ(s.truncate(12), 1U);  // exactly one block
  EXPECT_EQ(s.num_blocks(), 3U);
  EXPECT_TRUE(s.tail_tokens().empty());
  expect_same(s, fresh(std::span<const Token>(t).first(12), 4));
  EXPECT_EQ(s.truncate(11), 1U);
  EXPECT_EQ(s.num_blocks(), 2U);
  EXPECT_EQ(s.tail_tokens().size(), 3U);
  EXPECT_EQ(s.truncate(0), 2U);
  EXPECT_EQ(s.total_tokens(), 0U);
  EXPECT_EQ(s.num_blocks(), 0U);
  EXPECT_FALSE(s.last_sequence_hash().has_value());
  EXPECT_EQ(s.extend(t), 4U);
  expect_same(s, fresh(t, 4));
}

TEST(TokenBlockSequenceTest, TruncateBeyondSizeThrowsAndChangesNothing) {
  const std::vector<Token> t = iota_tokens(10, 1);
  TokenBlockSequence s = fresh(t, 4);
  const std::string msg = usage_error_message([&] { s.truncate(11); });
  EXPECT_NE(msg.find("truncate"), std::string::npos) << msg;
  expect_same(s, fresh(t, 4));
}

TEST(TokenBlockSequenceTest, RandomRollbacksMatchAFreshSequence) {
  std::mt19937_64 rng(test_seed());
  const std::uint32_t bs = 8;
  TokenBlockSequence s(bs, SaltBuilder().lora("spec").build());
  std::vector<Token> mirror;
  for (int step = 0; step < 400; ++step) {
    if (rng() % 4 == 0 && !mirror.empty()) {
      const std::size_t cut = mirror.size() - std::min<std::size_t>(mirror.size(), rng() % 12);
      s.truncate(cut);
      mirror.resize(cut);
    } else {
      const std::size_t n = rng() % 10;
      std::vector<Token> add(n);
      for (Token& x : add) x = static_cast<Token>(rng() % 1000);
      const std::size_t before = s.num_blocks();
      EXPECT_EQ(s.extend(add), (mirror.size() + n) / bs - before);
      mirror.insert(mirror.end(), add.begin(), add.end());
    }
  }
  expect_same(s, fresh(mirror, bs, SaltBuilder().lora("spec").build()));
}

TEST(TokenBlockSequenceTest, SaltChangesEveryBlock) {
  const std::vector<Token> t = iota_tokens(32, 1);
  const TokenBlockSequence a = fresh(t, 8);
  const TokenBlockSequence b = fresh(t, 8, SaltBuilder().cache_salt("tenant").build());
  EXPECT_EQ(b.salt(), SaltBuilder().cache_salt("tenant").build());
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_NE(a.sequence_hashes()[i].value(), b.sequence_hashes()[i].value());
}

TEST(TokenBlockSequenceTest, ClearAndReserveKeepConfiguration) {
  const std::vector<Token> t = iota_tokens(32, 1);
  TokenBlockSequence s = fresh(t, 8, SaltHash(5));
  s.add_multimodal(40, 1);
  s.clear();
  EXPECT_EQ(s.total_tokens(), 0U);
  EXPECT_EQ(s.num_blocks(), 0U);
  EXPECT_TRUE(s.block_keys().empty());
  s.reserve(4096);
  s.extend(t);
  expect_same(s, fresh(t, 8, SaltHash(5)));
}

// ---- Block-level extra keys

TEST(TokenBlockSequenceTest, MultimodalKeyChangesItsBlockAndDescendantsOnly) {
  const std::vector<Token> t = iota_tokens(40, 1);
  const TokenBlockSequence plain = fresh(t, 8);
  TokenBlockSequence mm(8);
  mm.add_multimodal(19, 0xFEEDULL);  // block 2 (tokens 16..23)
  mm.extend(t);
  ASSERT_EQ(mm.num_blocks(), 5U);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(mm.block_hashes()[i], plain.block_hashes()[i]) << i;
    EXPECT_EQ(mm.sequence_hashes()[i], plain.sequence_hashes()[i]) << i;
  }
  EXPECT_NE(mm.block_hashes()[2], plain.block_hashes()[2]);
  for (std::size_t i = 2; i < 5; ++i)
    EXPECT_NE(mm.sequence_hashes()[i].value(), plain.sequence_hashes()[i].value()) << i;
  // Later blocks keep their own block hash; only the chain differs.
  for (std::size_t i = 3; i < 5; ++i) EXPECT_EQ(mm.block_hashes()[i], plain.block_hashes()[i]) << i;
  // The block hash is the block-level API's, with the offset rebased to the block.
  const ExtraKey rebased = ExtraKey::multimodal(3, 0xFEEDULL);
  EXPECT_EQ(mm.block_hashes()[2], block_hash(mm.block_tokens(2), kNoSalt, {&rebased, 1}));
}

TEST(TokenBlockSequenceTest, MultimodalContentAndOffsetMatter) {
  const std::vector<Token> t = iota_tokens(16, 1);
  auto with = [&](std::size_t offset, std::uint64_t content) {
    TokenBlockSequence s(8);
    s.add_multimodal(offset, content);
    s.extend(t);
    return s.sequence_hashes()[1].value();
  };
  EXPECT_NE(with(9, 1), with(9, 2));
  EXPECT_NE(with(9, 1), with(10, 1));
  EXPECT_EQ(with(9, 1), with(9, 1));
  TokenBlockSequence bytes_key(8);
  bytes_key.add_multimodal(9, std::string_view("image-digest"));
  bytes_key.extend(t);
  EXPECT_NE(bytes_key.sequence_hashes()[1].value(), with(9, 1));
}

TEST(TokenBlockSequenceTest, KeysMayBeAddedForTokensNotYetSeenAndInAnyOrder) {
  const std::vector<Token> t = iota_tokens(24, 1);
  TokenBlockSequence a(8);
  a.extend(std::span<const Token>(t).first(10));
  a.add_multimodal(20, 2);
  a.add_multimodal(12, 1);
  a.append(t[10]);
  a.extend(std::span<const Token>(t).subspan(11));
  TokenBlockSequence b(8);
  b.add_multimodal(12, 1);
  b.add_multimodal(20, 2);
  b.extend(t);
  expect_same(a, b);
  ASSERT_EQ(a.block_keys().size(), 2U);
  EXPECT_EQ(a.block_keys()[0].token_offset, 12U);
  EXPECT_EQ(a.block_keys()[1].token_offset, 20U);
}

TEST(TokenBlockSequenceTest, KeyForACompleteBlockThrows) {
  const std::vector<Token> t = iota_tokens(20, 1);
  TokenBlockSequence s = fresh(t, 8);  // blocks 0,1 complete; tail 16..19
  const std::string msg = usage_error_message([&] { s.add_multimodal(15, 7); });
  EXPECT_NE(msg.find("already complete"), std::string::npos) << msg;
  EXPECT_NO_THROW(s.add_multimodal(16, 7));  // the tail block is fine
}

TEST(TokenBlockSequenceTest, SequenceLevelKeyAsBlockKeyThrows) {
  TokenBlockSequence s(8);
  const std::string msg = usage_error_message([&] { s.add_block_key(ExtraKey::cache_salt("x")); });
  EXPECT_NE(msg.find("wrong kind"), std::string::npos) << msg;
  EXPECT_THROW(s.add_block_key(ExtraKey::lora("x")), UsageError);
  EXPECT_TRUE(s.block_keys().empty());
}

TEST(TokenBlockSequenceTest, TruncateDropsKeysPastTheCutAndRehashes) {
  const std::vector<Token> t = iota_tokens(32, 1);
  TokenBlockSequence s(8);
  s.add_multimodal(10, 1);  // block 1
  s.add_multimodal(20, 2);  // block 2
  s.extend(t);
  EXPECT_EQ(s.truncate(19), 2U);  // block 2 cut before its key; key at 20 dropped
  ASSERT_EQ(s.block_keys().size(), 1U);
  EXPECT_EQ(s.block_keys()[0].token_offset, 10U);

  TokenBlockSequence expected(8);
  expected.add_multimodal(10, 1);
  expected.extend(std::span<const Token>(t).first(19));
  expect_same(s, expected);

  // Refilled without the key, block 2 hashes like a plain block after block 1.
  s.extend(std::span<const Token>(t).subspan(19));
  expected.extend(std::span<const Token>(t).subspan(19));
  expect_same(s, expected);
  EXPECT_EQ(s.block_hashes()[2], fresh(t, 8).block_hashes()[2]);

  // A cut inside a block keeps a key before the cut: the block re-hashes with it.
  TokenBlockSequence k(8);
  k.add_multimodal(17, 3);
  k.extend(t);
  const std::uint64_t with_key = k.block_hashes()[2];
  k.truncate(20);
  EXPECT_EQ(k.block_keys().size(), 1U);
  k.extend(std::span<const Token>(t).subspan(20));
  EXPECT_EQ(k.block_hashes()[2], with_key);
}

TEST(TokenBlockSequenceTest, TruncateToSizeKeepsKeysForTokensNotYetSeen) {
  // Truncating to size() changes nothing, so a key attached ahead of its
  // tokens survives it; any shorter cut drops the key with the tokens.
  TokenBlockSequence s(3);
  s.add_multimodal(45, 1);
  EXPECT_EQ(s.truncate(0), 0U);
  ASSERT_EQ(s.block_keys().size(), 1U);
  s.extend(iota_tokens(4, 1));
  EXPECT_EQ(s.truncate(4), 0U);
  ASSERT_EQ(s.block_keys().size(), 1U);
  EXPECT_EQ(s.truncate(3), 0U);
  EXPECT_TRUE(s.block_keys().empty());
}

}  // namespace token_block_sequence_test
}  // namespace kvbm
