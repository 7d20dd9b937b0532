#include "kvbm/groups/snapshot_policy.h"

#include <gtest/gtest.h>

namespace kvbm {
namespace snapshot_policy_test {

TEST(SnapshotPolicy, EveryBlockRegistersEachBoundary) {
  const auto p = SnapshotPolicy::every_block();
  for (std::size_t i = 0; i < 10; ++i) EXPECT_TRUE(p.registers_on_completion(i));
  EXPECT_FALSE(p.keeps_last_completed());
  EXPECT_EQ(p, SnapshotPolicy{});
}

TEST(SnapshotPolicy, EveryKthRegistersBlocksKMinusOneTwoKMinusOne) {
  const auto p = SnapshotPolicy::every_kth_block(4);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(p.registers_on_completion(i), (i + 1) % 4 == 0);
  EXPECT_THROW((void)SnapshotPolicy::every_kth_block(0), UsageError);
}

TEST(SnapshotPolicy, RequestEndRegistersNothingOnTheWay) {
  const auto p = SnapshotPolicy::request_end();
  for (std::size_t i = 0; i < 10; ++i) EXPECT_FALSE(p.registers_on_completion(i));
  EXPECT_TRUE(p.keeps_last_completed());
}

TEST(SnapshotPolicy, StepEndLeavesRegistrationToTheStepsEnd) {
  const auto p = SnapshotPolicy::step_end();
  for (std::size_t i = 0; i < 10; ++i) EXPECT_FALSE(p.registers_on_completion(i));
  EXPECT_TRUE(p.takes_step_end_only());
  EXPECT_FALSE(p.keeps_last_completed());
  EXPECT_FALSE(SnapshotPolicy::every_block().takes_step_end_only());
  EXPECT_NE(p, SnapshotPolicy::every_block());
}

}  // namespace snapshot_policy_test
}  // namespace kvbm
