// The figures kvbm-replay must reproduce on the shipped trace (Mooncake FAST'25
// conversation workload; examples/data/README.md): with room for every block
// the block hit ratio is exactly 105,710 / 288,500; with G1 limited and LRU
// eviction, within one percentage point of the reference table.
//
// Metadata only (no bytes), so each replay of 288,500 blocks takes well under a
// second. KVBM_STRESS_SCALE < 1 (sanitizer builds) replays the unlimited case
// and the smallest capacity only.

#include <iostream>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace {

constexpr std::uint64_t kRequests = 12'031;
constexpr std::uint64_t kBlocks = 288'500;
constexpr std::uint64_t kUnlimitedHits = 105'710;

#define KVBM_REQUIRE_TRACE()                     \
  const Trace* const tr = test::shipped_trace(); \
  if (tr == nullptr) KVBM_SKIP_OR_FAIL(test::kTraceMissing)

ReplayConfig g1_only(std::size_t blocks, EvictionPolicy policy) {
  ReplayConfig c;
  c.device = TierConfig{.blocks = blocks, .eviction = policy};
  c.host = {};
  c.disk = {};
  c.move_bytes = false;
  return c;
}

class ReplayFiguresUnlimited : public ::testing::TestWithParam<EvictionPolicy> {};

TEST_P(ReplayFiguresUnlimited, BlockHitRatioIsExactly105710Of288500) {
  KVBM_REQUIRE_TRACE();
  const ReplayResult r = run_replay(*tr, g1_only(200'000, GetParam()));
  std::cout << "[replay figures] unlimited " << to_string(GetParam()) << ": " << r.hits() << " / "
            << r.blocks << std::endl;
  EXPECT_EQ(r.requests, kRequests);
  EXPECT_EQ(r.blocks, kBlocks);
  EXPECT_EQ(r.hits(), kUnlimitedHits);
  EXPECT_EQ(r.hit_blocks[0], kUnlimitedHits);
  EXPECT_EQ(r.computed_blocks, kBlocks - kUnlimitedHits);
  EXPECT_EQ(r.uncached_blocks, 0u);
  EXPECT_EQ(r.evictions[0], 0u);
  EXPECT_EQ(r.audit, "");
}

INSTANTIATE_TEST_SUITE_P(Policies, ReplayFiguresUnlimited,
                         ::testing::Values(EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru,
                                           EvictionPolicy::kLineage),
                         [](const ::testing::TestParamInfo<EvictionPolicy>& p) {
                           return std::string(to_string(p.param));
                         });

// With G2 and G3 below an unlimited G1, nothing is ever found below G1.
TEST(ReplayFigures, UnlimitedG1WithLowerTiersStillHits105710InG1) {
  KVBM_REQUIRE_TRACE();
  if (test::stress_scale() < 1.0) KVBM_SKIP_OR_FAIL("KVBM_STRESS_SCALE < 1: full trace only");
  test::ScratchDir dir("kvbm-replay-figures");
  ReplayConfig c = g1_only(200'000, EvictionPolicy::kLru);
  c.host = TierConfig{.blocks = 10'000};
  c.disk = TierConfig{.blocks = 20'000};
  c.disk_directory = dir.path();
  const ReplayResult r = run_replay(*tr, c);
  EXPECT_EQ(r.hits(), kUnlimitedHits);
  EXPECT_EQ(r.hit_blocks[0], kUnlimitedHits);
  EXPECT_EQ(r.audit, "");
}

struct Capacity {
  std::size_t blocks;
  std::uint64_t reference_hits;
};

void PrintTo(const Capacity& c, std::ostream* os) { *os << c.blocks << " blocks"; }

class ReplayFiguresLru : public ::testing::TestWithParam<Capacity> {};

TEST_P(ReplayFiguresLru, WithinOnePointOfTheReference) {
  KVBM_REQUIRE_TRACE();
  const Capacity cap = GetParam();
  if (test::stress_scale() < 1.0 && cap.blocks != 1'000)
    KVBM_SKIP_OR_FAIL("KVBM_STRESS_SCALE < 1: 1000 blocks only");
  const ReplayResult r = run_replay(*tr, g1_only(cap.blocks, EvictionPolicy::kLru));
  const double reference = static_cast<double>(cap.reference_hits) / static_cast<double>(kBlocks);
  std::cout << "[replay figures] lru " << cap.blocks << " blocks: " << r.hits() << " / " << r.blocks
            << " = " << r.block_hit_ratio() << " (reference " << cap.reference_hits << " = "
            << reference << ")" << std::endl;
  RecordProperty("hits", std::to_string(r.hits()));
  EXPECT_EQ(r.requests, kRequests);
  EXPECT_EQ(r.blocks, kBlocks);
  EXPECT_EQ(r.uncached_blocks, 0u);
  EXPECT_NEAR(r.block_hit_ratio(), reference, 0.01);
  EXPECT_EQ(r.audit, "");
}

INSTANTIATE_TEST_SUITE_P(ReadmeTable, ReplayFiguresLru,
                         ::testing::Values(Capacity{100'000, 104'924}, Capacity{50'000, 102'290},
                                           Capacity{10'000, 60'921}, Capacity{1'000, 12'831}),
                         [](const ::testing::TestParamInfo<Capacity>& p) {
                           return "capacity_" + std::to_string(p.param.blocks);
                         });

}  // namespace
}  // namespace kvbm::replay
