// Tests of KvBlockManager::plan_onboard() and onboard(hashes, options)
// (kvbm/onboard_plan.h): a manager whose G3 reads are made slow (a syscall
// override moving a ManualClock) learns G3 -> G1 is slow, and the auto plan
// then stops short of the G3 part when prefill is faster, within a deadline
// when given; load_all still loads it; recompute_all copies nothing; the plan
// is returned before any copy (the tiers' counts unchanged); unknown
// estimates load; every pool balanced after each scenario.

#include "kvbm/onboard_plan.h"

#include <atomic>
#include <cstdint>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace onboard_plan_test {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using test::config;
using test::TempDir;

constexpr auto kReadDelay = milliseconds(5);  // per G3 read, on the test's clock

std::atomic<ManualClock*> slow_clock{nullptr};
std::int64_t slow_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  if (ManualClock* c = slow_clock.load()) c->advance(kReadDelay);
  return io::real_syscalls().pread(fd, buf, count, offset);
}
io::SyscallTable slow_table() {
  io::SyscallTable t = io::real_syscalls();
  t.pread = &slow_pread;
  return t;
}

void expect_clean(KvBlockManager& kv) {
  EXPECT_EQ(kv.audit(), "");
  for (const PoolCounts c :
       {kv.device().pool_counts(), kv.host()->pool_counts(), kv.disk()->pool_counts()}) {
    EXPECT_TRUE(c.balanced());
    EXPECT_EQ(c.in_use, 0u);
  }
}

OnboardOptions options(OnboardMode m) {
  OnboardOptions o;
  o.mode = m;
  return o;
}

// Every pool's reset, inactive and in-use counts.
std::vector<std::size_t> counts_of(KvBlockManager& kv) {
  std::vector<std::size_t> out;
  for (const PoolCounts c :
       {kv.device().pool_counts(), kv.host()->pool_counts(), kv.disk()->pool_counts()}) {
    out.insert(out.end(), {c.reset, c.inactive, c.in_use});
  }
  return out;
}

// G1 16..: the prefix P of 12 blocks, its first 4 in G2 (and G3), the other 8
// in G3 only; G2 -> G1 measured free, G3 -> G1 at 5 ms a read.
class OnboardPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = config(32, 32, 64, dir_.path());
    c.clock = clock_;
    c.pipeline.batch_config.min_batch_size = 1;
    c.pipeline.policy_timeout = std::chrono::hours(1'000'000);
    c.prefill_tokens_per_second = 4000;  // 4 tokens a block: 1 ms a block
    kv_ = KvBlockManager::build(c);
    // G2 -> G1, measured with other blocks.
    const auto q = test::prefix(99, 4);
    test::compute(*kv_, q);
    kv_->drain();
    kv_->device().reset_inactive_pool();
    onboard_all(q, TierId::kG2, 4);
    // P: everywhere, then in G3 only.
    test::compute(*kv_, p_);
    kv_->drain();
    kv_->device().reset_inactive_pool();
    kv_->host()->reset_inactive_pool();
    slow_clock = clock_.get();
    // G3 -> G1: P's first 4 (slow), then put back into G2 by an explicit offload.
    {
      auto h = kv_->onboard(std::span(p_).first(4));
      ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
      ASSERT_EQ(h.counts().from(TierId::kG3), 4u);
      auto blocks = h.take_blocks();
      (void)kv_->offload(blocks);
    }
    kv_->drain();
    kv_->device().reset_inactive_pool();
    ASSERT_EQ(kv_->probe(p_).from(TierId::kG2), 4u);
    ASSERT_EQ(kv_->probe(p_).from(TierId::kG3), 8u);
  }
  void TearDown() override {
    kv_->shutdown();
    expect_clean(*kv_);
    slow_clock = nullptr;
  }
  void onboard_all(const std::vector<SequenceHash>& h, TierId from, std::size_t n) {
    auto o = kv_->onboard(h);
    ASSERT_EQ(o.wait(), TransferStatus::kDone) << o.error();
    ASSERT_EQ(o.counts().from(from), n);
  }

  TempDir dir_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  io::ScopedSyscallOverride slow_{slow_table()};  // outlives the manager
  std::unique_ptr<KvBlockManager> kv_;
  std::vector<SequenceHash> p_ = test::prefix(5, 12);
};

// Prefill (1 ms a block) beats G3 (>= 5 ms a block): auto loads G2's part
// only, and the plan comes back before anything is taken or copied.
TEST_F(OnboardPlanTest, AutoStopsShortOfTheSlowTierWhenPrefillIsFaster) {
  const auto before = counts_of(*kv_);
  const OnboardPlan plan = kv_->plan_onboard(p_, options(OnboardMode::kAuto));
  EXPECT_EQ(counts_of(*kv_), before);  // nothing taken, nothing copied
  EXPECT_TRUE(plan.estimates_known);
  EXPECT_EQ(plan.blocks, 12u);
  EXPECT_EQ(plan.found[TierId::kG2], 4u);
  EXPECT_EQ(plan.found[TierId::kG3], 8u);
  EXPECT_EQ(plan.load[TierId::kG2], 4u);
  EXPECT_EQ(plan.load[TierId::kG3], 0u);
  EXPECT_EQ(plan.compute_blocks, 8u);
  EXPECT_EQ(plan.compute_tokens, 32u);
  EXPECT_EQ(plan.compute_time, milliseconds(8));
  EXPECT_EQ(plan.load_time, nanoseconds(0));  // G2 -> G1 measured free on this clock
  EXPECT_EQ(plan.expected_time, plan.load_time + plan.compute_time);

  auto h = kv_->onboard(p_, options(OnboardMode::kAuto));
  ASSERT_TRUE(h.plan().has_value());
  EXPECT_EQ(h.plan()->load, plan.load);
  ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  EXPECT_EQ(h.counts().from(TierId::kG2), 4u);
  EXPECT_EQ(h.counts().from(TierId::kG3), 0u);
  EXPECT_EQ(h.take_blocks().size(), 4u);
}

TEST_F(OnboardPlanTest, LoadAllStillLoadsTheSlowTier) {
  auto h = kv_->onboard(p_, options(OnboardMode::kLoadAll));
  ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  EXPECT_EQ(h.plan()->load[TierId::kG3], 8u);
  EXPECT_EQ(h.plan()->compute_blocks, 0u);
  EXPECT_GE(h.plan()->load_time, 8 * kReadDelay);
  EXPECT_EQ(h.counts().from(TierId::kG2), 4u);
  EXPECT_EQ(h.counts().from(TierId::kG3), 8u);
  EXPECT_EQ(h.take_blocks().size(), 12u);
  // onboard(hashes) without options: load-all as always, no plan.
  auto plain = kv_->onboard(p_);
  EXPECT_FALSE(plain.plan().has_value());
  ASSERT_EQ(plain.wait(), TransferStatus::kDone);
  EXPECT_EQ(plain.counts().total(), 12u);
}

TEST_F(OnboardPlanTest, RecomputeAllCopiesNothing) {
  const auto before = counts_of(*kv_);
  auto h = kv_->onboard(p_, options(OnboardMode::kRecomputeAll));
  ASSERT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.plan()->loaded(), 0u);
  EXPECT_EQ(h.plan()->compute_blocks, 12u);
  EXPECT_EQ(h.counts().total(), 0u);
  EXPECT_TRUE(h.take_blocks().empty());
  EXPECT_EQ(counts_of(*kv_), before);
}

// Slower prefill (reported by the engine: 40 ms a block): loading G3 wins;
// with a deadline, only what its tail fits in is loaded.
TEST_F(OnboardPlanTest, SlowPrefillLoadsAndADeadlineCutsTheLoad) {
  kv_->report_prefill(400, milliseconds(4000));
  OnboardPlan plan = kv_->plan_onboard(p_);
  EXPECT_EQ(plan.load[TierId::kG3], 8u);
  EXPECT_EQ(plan.compute_blocks, 0u);
  const nanoseconds per_block =
      kv_->transfer_costs().path(TierId::kG3, TierId::kG1)->predict(1).tail;
  ASSERT_GE(per_block, kReadDelay);
  const nanoseconds deadline = 2 * per_block + std::chrono::microseconds(1);  // rounding
  plan = kv_->plan_onboard(p_, {.mode = OnboardMode::kAuto, .deadline = deadline});
  EXPECT_EQ(plan.load[TierId::kG2], 4u);
  EXPECT_EQ(plan.load[TierId::kG3], 2u);
  EXPECT_LE(plan.load_tail, deadline);
  EXPECT_EQ(plan.deadline, deadline);
  auto h = kv_->onboard(p_, {.mode = OnboardMode::kAuto, .deadline = deadline});
  ASSERT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().total(), 6u);
}

// A G1 hit at the head is free: recompute_all keeps it, auto never cuts before it.
TEST_F(OnboardPlanTest, LeadingG1HitsAreAlwaysHandedBack) {
  {
    auto h = kv_->onboard(std::span(p_).first(2));
    ASSERT_EQ(h.wait(), TransferStatus::kDone);
  }  // P's first 2 inactive in G1
  const OnboardPlan plan = kv_->plan_onboard(p_, options(OnboardMode::kRecomputeAll));
  EXPECT_EQ(plan.load[TierId::kG1], 2u);
  EXPECT_EQ(plan.copies(), 0u);
  auto h = kv_->onboard(p_, options(OnboardMode::kRecomputeAll));
  ASSERT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().from(TierId::kG1), 2u);
  EXPECT_EQ(h.take_blocks().size(), 2u);
}

// No measurement of G3 -> G1 and no prefill estimate: auto loads everything
// found, and says its estimates were not all known.
TEST(OnboardPlanUnknownTest, UnknownEstimatesLoad) {
  TempDir dir;
  auto c = config(16, 16, 32, dir.path());
  auto kv = KvBlockManager::build(c);
  const auto p = test::prefix(3, 6);
  test::compute(*kv, p);
  kv->drain();
  kv->device().reset_inactive_pool();
  kv->host()->reset_inactive_pool();
  const OnboardPlan plan = kv->plan_onboard(p);
  EXPECT_FALSE(plan.estimates_known);
  EXPECT_EQ(plan.load[TierId::kG3], 6u);
  auto h = kv->onboard(p, {});
  ASSERT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().from(TierId::kG3), 6u);
  h = {};
  kv->shutdown();
  expect_clean(*kv);
}

TEST(OnboardModeTest, NamesRoundTrip) {
  for (const auto m : {OnboardMode::kAuto, OnboardMode::kLoadAll, OnboardMode::kRecomputeAll}) {
    EXPECT_EQ(parse_onboard_mode(to_string(m)), m);
  }
  EXPECT_THROW((void)parse_onboard_mode("sometimes"), UsageError);
}

}  // namespace onboard_plan_test
}  // namespace kvbm
