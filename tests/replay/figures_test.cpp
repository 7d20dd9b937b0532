// The figures kvbm-replay must reproduce on the shipped trace (Mooncake FAST'25
// conversation workload; examples/data/README.md): with room for every block
// the block hit ratio is exactly 105,710 / 288,500; with G1 limited and LRU
// eviction, within one percentage point of the reference table.
//
// Metadata only (no bytes), so each replay of 288,500 blocks takes well under a
// second. The unlimited G1 replays the whole trace at any scale. At
// KVBM_STRESS_SCALE < 1 (the sanitizer stages) the other cases replay the
// trace's first requests (that fraction of them), with G1 scaled alike (at least
// 1,000 blocks), against what the test computes itself: with G1 unlimited, the
// blocks whose hash an earlier request had; with G1 limited, TextbookLru
// (tests/textbook_lru.h). At full scale the test checks both against the README.

#include <algorithm>
#include <iostream>
#include <unordered_set>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "replay_test_util.h"
#include "textbook_lru.h"

namespace kvbm::replay {
namespace figures_test {

constexpr std::uint64_t kRequests = 12'031;
constexpr std::uint64_t kBlocks = 288'500;
constexpr std::uint64_t kUnlimitedHits = 105'710;
constexpr std::size_t kSmallestG1 = 1'000;  // the README's smallest capacity

/// The trace to replay: the whole shipped one at full scale, else its first requests (call it
/// once KVBM_REQUIRE_TRACE has found the trace).
Trace scaled_trace() {
  if (test::stress_scale() >= 1.0) return *test::shipped_trace();
  return *test::first_requests(kvbm::test::scaled(kRequests, 1));
}

/// The hits of any prefix cache with room for every block: each block whose hash an earlier
/// request of the trace had.
std::uint64_t seen_before(const Trace& t) {
  std::unordered_set<SequenceHash> earlier;
  std::uint64_t hits = 0;
  for (const TraceRequest& r : t.requests) {
    for (const SequenceHash& h : r.hashes) hits += earlier.contains(h) ? 1 : 0;
    earlier.insert(r.hashes.begin(), r.hashes.end());
  }
  return hits;
}

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
  EXPECT_EQ(r.hit_blocks[TierId::kG1], kUnlimitedHits);
  EXPECT_EQ(r.computed_blocks, kBlocks - kUnlimitedHits);
  EXPECT_EQ(r.uncached_blocks, 0u);
  EXPECT_EQ(r.evictions[TierId::kG1], 0u);
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
  const Trace t = scaled_trace();
  const std::uint64_t expected = seen_before(t);
  if (test::stress_scale() >= 1.0) {
    EXPECT_EQ(expected, kUnlimitedHits) << "the blocks seen before against the README";
  }
  test::ScratchDir dir("kvbm-replay-figures");
  ReplayConfig c = g1_only(200'000, EvictionPolicy::kLru);
  c.host = TierConfig{.blocks = 10'000};
  c.disk = TierConfig{.blocks = 20'000};
  c.disk_directory = dir.path();
  const ReplayResult r = run_replay(t, c);
  std::cout << "[replay figures] unlimited G1 over G2 and G3, " << t.requests.size()
            << " requests: " << r.hits() << " / " << r.blocks << " (seen before: " << expected
            << ")" << std::endl;
  EXPECT_EQ(r.requests, t.requests.size());
  EXPECT_EQ(r.blocks, t.blocks);
  EXPECT_EQ(r.hits(), expected);
  EXPECT_EQ(r.hit_blocks[TierId::kG1], expected);
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
  const bool full = test::stress_scale() >= 1.0;
  const Capacity cap = GetParam();
  const std::size_t g1 = full ? cap.blocks : kvbm::test::scaled(cap.blocks, kSmallestG1);
  const Trace t = scaled_trace();
  kvbm::test::TextbookLru model(g1);
  for (const TraceRequest& req : t.requests) model.request(req.hashes);
  if (full) {
    EXPECT_EQ(model.hits(), cap.reference_hits) << "the textbook model against the README";
  }
  const std::uint64_t expected = full ? cap.reference_hits : model.hits();
  const ReplayResult r = run_replay(t, g1_only(g1, EvictionPolicy::kLru));
  const double reference = static_cast<double>(expected) / static_cast<double>(t.blocks);
  std::cout << "[replay figures] lru " << g1 << " blocks, " << t.requests.size()
            << " requests: " << r.hits() << " / " << r.blocks << " = " << r.block_hit_ratio()
            << " (" << (full ? "reference " : "textbook model ") << expected << " = " << reference
            << ")" << std::endl;
  RecordProperty("hits", std::to_string(r.hits()));
  EXPECT_EQ(r.requests, t.requests.size());
  EXPECT_EQ(r.blocks, full ? kBlocks : t.blocks);
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

}  // namespace figures_test
}  // namespace kvbm::replay
