#include "kvbm/groups/hit_rules.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm {
namespace hit_rules_test {

GroupRule full(std::uint32_t b) { return {AttentionKind::kFull, b, 0}; }
GroupRule window(std::uint32_t w, std::uint32_t b) { return {AttentionKind::kSlidingWindow, b, w}; }
GroupRule chunk(std::uint32_t c, std::uint32_t b) { return {AttentionKind::kChunkedLocal, b, c}; }
GroupRule state(std::uint32_t b) { return {AttentionKind::kRecurrentState, b, 0}; }

// Presence of one group's blocks as a set of indices.
struct Blocks {
  std::set<std::size_t> held;
  bool operator()(std::size_t i) const { return held.count(i) != 0; }
};

Blocks range(std::size_t first, std::size_t last, std::set<std::size_t> missing = {}) {
  Blocks b;
  for (std::size_t i = first; i < last; ++i) {
    if (missing.count(i) == 0) b.held.insert(i);
  }
  return b;
}

std::size_t hit1(const GroupRule& r, std::size_t limit, const Blocks& b) {
  return longest_hit(r, limit, r.tokens_per_block, b);
}

// The definition, tried cut by cut from the top: every group holds every block it needs.
std::size_t brute(const std::vector<GroupRule>& rules, std::size_t max_tokens,
                  const std::vector<Blocks>& present, std::size_t a = 0) {
  if (a == 0) a = alignment_tokens(std::span<const GroupRule>(rules));
  for (std::size_t cut = max_tokens / a * a;; cut -= a) {
    bool ok = true;
    for (std::size_t g = 0; g < rules.size() && ok; ++g) {
      const BlockRange need = needed_blocks(rules[g], cut);
      for (std::size_t i = need.first; i < need.last && ok; ++i) ok = present[g](i);
    }
    if (ok || cut == 0) return cut;
  }
}

HybridHit common(const std::vector<GroupRule>& rules, std::size_t max_tokens,
                 const std::vector<Blocks>& present) {
  return longest_common_hit(std::span<const GroupRule>(rules), max_tokens,
                            [&](std::size_t g, std::size_t i) { return present[g](i); });
}

// ---- What each kind needs at a cut ----------------------------------------

TEST(NeededBlocks, FullNeedsEveryBlockBeforeTheCut) {
  EXPECT_EQ(needed_blocks(full(16), 160), (BlockRange{0, 10}));
  EXPECT_EQ(needed_blocks(full(16), 0), (BlockRange{0, 0}));
}

TEST(NeededBlocks, WindowNeedsCeilOfWindowMinusOneOverBlockSize) {
  // W - 1 tokens before the cut: 127 tokens of 16 -> 8 blocks; 97 -> 96 tokens -> 6 blocks;
  // 98 -> 97 tokens -> 7 blocks (W not a multiple of the block size).
  EXPECT_EQ(needed_blocks(window(128, 16), 320), (BlockRange{12, 20}));
  EXPECT_EQ(needed_blocks(window(97, 16), 160), (BlockRange{4, 10}));
  EXPECT_EQ(needed_blocks(window(98, 16), 160), (BlockRange{3, 10}));
  EXPECT_EQ(needed_blocks(window(1, 16), 160), (BlockRange{10, 10}));  // the token itself only
}

TEST(NeededBlocks, WindowLargerThanThePrefixNeedsThePrefix) {
  EXPECT_EQ(needed_blocks(window(1024, 16), 160), (BlockRange{0, 10}));
}

TEST(NeededBlocks, ChunkNeedsItsChunkFromTheStart) {
  EXPECT_EQ(needed_blocks(chunk(64, 16), 176), (BlockRange{8, 11}));
  EXPECT_EQ(needed_blocks(chunk(64, 16), 128), (BlockRange{8, 8}));  // on a chunk boundary
  EXPECT_EQ(needed_blocks(chunk(64, 16), 48), (BlockRange{0, 3}));
}

TEST(NeededBlocks, StateNeedsTheSnapshotAtTheCut) {
  EXPECT_EQ(needed_blocks(state(16), 160), (BlockRange{9, 10}));
  EXPECT_EQ(needed_blocks(state(16), 0), (BlockRange{0, 0}));
}

TEST(FirstBlockInReach, MatchesWhatACutAtTheSameTokensNeeds) {
  for (const GroupRule& r :
       {full(16), window(128, 16), window(97, 16), window(1000, 16), chunk(64, 16), state(16)}) {
    for (std::size_t n = 1; n < 200; ++n) {
      EXPECT_EQ(first_block_in_reach(r, n * 16), needed_blocks(r, n * 16).first)
          << static_cast<int>(r.kind) << " at block " << n;
    }
  }
}

TEST(FirstBlockInReach, WindowKeepsTheLastWMinusOneTokens) {
  // 200 computed, W = 128: tokens 73..199 are still read, so block 4 (64..79) is the first.
  EXPECT_EQ(first_block_in_reach(window(128, 16), 200), 4u);
  EXPECT_EQ(first_block_in_reach(window(128, 16), 127), 0u);
  EXPECT_EQ(first_block_in_reach(chunk(64, 16), 200), 12u);
  EXPECT_EQ(first_block_in_reach(state(16), 200), 12u);
  EXPECT_EQ(first_block_in_reach(full(16), 200), 0u);
}

// ---- One group -------------------------------------------------------------

TEST(LongestHit, FullStopsAtTheFirstMiss) {
  EXPECT_EQ(hit1(full(16), 160, range(0, 10, {5})), 80u);
  EXPECT_EQ(hit1(full(16), 160, range(0, 10)), 160u);
  EXPECT_EQ(hit1(full(16), 150, range(0, 10)), 144u);  // a partial block is not a hit
}

TEST(LongestHit, MissingMiddleBlockCutsFullButNotWindow) {
  const Blocks held = range(0, 6, {2});
  EXPECT_EQ(hit1(full(16), 96, held), 32u);
  EXPECT_EQ(hit1(window(32, 16), 96, held), 96u);  // needs blocks 4 and 5 only
  EXPECT_EQ(hit1(window(48, 16), 96, held), 96u);  // ceil(47 / 16) = 3: blocks 3..5
  EXPECT_EQ(hit1(window(64, 16), 96, held), 32u);  // ceil(63 / 16) = 4: blocks 2..5, 2 missing
}

TEST(LongestHit, WindowLargerThanThePrefix) {
  EXPECT_EQ(hit1(window(1024, 16), 160, range(0, 10)), 160u);
  EXPECT_EQ(hit1(window(1024, 16), 160, range(0, 10, {3})), 48u);
}

TEST(LongestHit, WindowNotAMultipleOfTheBlockSize) {
  const Blocks tail = range(3, 10);                  // blocks 0..2 gone (released or evicted)
  EXPECT_EQ(hit1(window(97, 16), 160, tail), 160u);  // needs 6 blocks: 4..9
  EXPECT_EQ(hit1(window(98, 16), 160, tail), 160u);  // needs 7 blocks: 3..9
  EXPECT_EQ(hit1(window(98, 16), 160, range(4, 10)), 0u);
  EXPECT_EQ(hit1(window(97, 16), 160, range(4, 10)), 160u);
}

TEST(LongestHit, WindowFallsBackToAnEarlierRun) {
  // Blocks 0..5 and 8..9 held, 6 and 7 missing; 3 blocks needed.
  EXPECT_EQ(hit1(window(48, 16), 160, range(0, 10, {6, 7})), 96u);
}

TEST(LongestHit, ChunkBoundaryExactlyAtTheCutNeedsNothing) {
  EXPECT_EQ(hit1(chunk(64, 16), 128, Blocks{}), 128u);
  EXPECT_EQ(hit1(chunk(64, 16), 140, Blocks{}), 128u);
  EXPECT_EQ(hit1(chunk(64, 16), 176, range(8, 10)), 160u);  // block 10 missing
  EXPECT_EQ(hit1(chunk(64, 16), 176, range(9, 11)), 128u);  // the chunk's first block missing
}

TEST(LongestHit, StateTakesTheLastSnapshot) {
  EXPECT_EQ(hit1(state(16), 160, Blocks{{3, 7}}), 128u);
  EXPECT_EQ(hit1(state(16), 120, Blocks{{3, 7}}), 64u);
  EXPECT_EQ(hit1(state(16), 160, Blocks{}), 0u);
  // With a 32-token alignment, block 6's snapshot (112 tokens) is not on a common cut.
  EXPECT_EQ(longest_hit(state(16), 160, 32, Blocks{{3, 6}}), 64u);
}

TEST(LongestHit, RefusesAnAlignmentThatIsNotAMultipleOfTheBlockSize) {
  EXPECT_THROW((void)longest_hit(full(16), 160, 24, Blocks{}), UsageError);
  EXPECT_THROW((void)longest_hit(chunk(40, 16), 160, 16, Blocks{}), UsageError);
}

// ---- Several groups ----------------------------------------------------------

TEST(LongestCommonHit, DifferentBlockSizesCutOnTheirCommonMultiple) {
  // full16 holds 7 blocks (112 tokens), full32 holds 4 (128): common cut 96 (a multiple of 32).
  const std::vector<GroupRule> rules{full(16), full(32)};
  const HybridHit h = common(rules, 1000, {range(0, 7), range(0, 4)});
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.tokens, 96u);
  EXPECT_EQ(h.blocks[0], (BlockRange{0, 6}));
  EXPECT_EQ(h.blocks[1], (BlockRange{0, 3}));
}

TEST(LongestCommonHit, IteratesToAFixedPoint) {
  // full32 up to 320 tokens; snapshots of 16 at blocks 9 (160 tokens) and 17 (288 tokens).
  const std::vector<GroupRule> rules{full(32), state(16)};
  const HybridHit h = common(rules, 320, {range(0, 10), Blocks{{9, 17}}});
  EXPECT_EQ(h.tokens, 288u);
  EXPECT_EQ(h.blocks[0], (BlockRange{0, 9}));
  EXPECT_EQ(h.blocks[1], (BlockRange{17, 18}));
  EXPECT_GE(h.rounds, 2u);
}

TEST(LongestCommonHit, WindowAndFullWithAMissingMiddleBlock) {
  const std::vector<GroupRule> rules{full(16), window(128, 16)};
  // The window group released blocks 0..11 of 20; full holds everything but block 15.
  // Full stops at block 15; there the window needs blocks 7..14, and 7..11 are gone: no cut.
  EXPECT_EQ(common(rules, 320, {range(0, 20, {15}), range(12, 20)}).tokens, 0u);
  // With blocks 5..19 of the window group held, the cut at 15 blocks serves both.
  const HybridHit h = common(rules, 320, {range(0, 20, {15}), range(5, 20)});
  EXPECT_EQ(h.tokens, 240u);
  EXPECT_EQ(h.blocks[0], (BlockRange{0, 15}));
  EXPECT_EQ(h.blocks[1], (BlockRange{7, 15}));
}

TEST(LongestCommonHit, ZeroWhenNothingIsHeld) {
  const std::vector<GroupRule> rules{full(16), window(64, 16), state(16)};
  const HybridHit h = common(rules, 320, {Blocks{}, Blocks{}, Blocks{}});
  EXPECT_EQ(h.tokens, 0u);
  for (const auto& b : h.blocks) EXPECT_TRUE(b.empty());
}

// Randomized: the scan-and-skip rules and the fixed point against the definition, tried
// cut by cut, on small models with random block sizes, windows, chunks and holes.
TEST(LongestCommonHit, EqualsTheDefinitionOnRandomModels) {
  const std::uint32_t seed = test::test_seed();
  std::mt19937 rng(seed);
  auto pick = [&rng](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  const std::uint32_t sizes[] = {4, 8, 16};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<GroupRule> rules;
    std::vector<Blocks> present;
    const std::uint32_t groups = pick(1, 4);
    for (std::uint32_t g = 0; g < groups; ++g) {
      const std::uint32_t b = sizes[pick(0, 2)];
      const std::uint32_t kind = pick(1, 4);
      if (kind == 1) rules.push_back(full(b));
      if (kind == 2) rules.push_back(window(pick(1, 80), b));
      if (kind == 3) rules.push_back(chunk(b * pick(1, 6), b));
      if (kind == 4) rules.push_back(state(b));
      Blocks held;
      const std::uint32_t density = pick(50, 100);
      for (std::size_t i = 0; i < 64; ++i) {
        if (pick(1, 100) <= density) held.held.insert(i);
      }
      present.push_back(held);
    }
    const std::size_t max_tokens = pick(0, 256);
    const HybridHit h = common(rules, max_tokens, present);
    ASSERT_EQ(h.tokens, brute(rules, max_tokens, present)) << "trial " << trial;
    for (std::size_t g = 0; g < rules.size(); ++g) {
      ASSERT_EQ(h.blocks[g], needed_blocks(rules[g], h.tokens));
      const std::size_t one = longest_hit(rules[g], max_tokens, h.alignment, present[g]);
      ASSERT_EQ(one, brute({rules[g]}, max_tokens, {present[g]}, h.alignment))
          << "trial " << trial << " group " << g;
    }
  }
}

}  // namespace hit_rules_test
}  // namespace kvbm
