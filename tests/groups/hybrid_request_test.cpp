#include "kvbm/groups/hybrid_request.h"

#include <utility>

#include <gtest/gtest.h>

#include "kvbm/groups/hybrid_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace hybrid_request_test {

using Manager = HybridBlockManager<G2>;

Manager make() {
  return Manager::builder()
      .group(KvCacheGroupSpec::full(GroupId{0}, 16, 64, {0}), 16)
      .group(KvCacheGroupSpec::chunked_local(GroupId{1}, 32, 16, 64, {1}), 16)
      .build();
}

TEST(HybridRequest, SaysWhichBlocksItHolds) {
  Manager m = make();
  const auto hashes = test::chain(6);
  HybridRequest<G2> r = m.start_request();
  EXPECT_EQ(r.group_count(), 2u);
  ASSERT_TRUE(m.allocate(r, 80));  // 5 blocks each
  EXPECT_EQ(r.held_range(0), (BlockRange{0, 5}));
  EXPECT_EQ(r.registered_blocks(0), 0u);
  m.commit(r, hashes, 80);
  EXPECT_EQ(r.registered_blocks(0), 5u);
  m.release_out_of_reach(r, 80);
  // The chunk of 32 containing token 80 starts at block 4: blocks 0..3 are out of reach.
  EXPECT_EQ(r.held_range(1), (BlockRange{4, 5}));
  EXPECT_EQ(r.held_blocks(1), 1u);
  EXPECT_NE(r.block_id(0, 0), r.block_id(0, 1));
  EXPECT_THROW((void)r.block_id(1, 3), UsageError);
  EXPECT_THROW((void)r.held_range(2), UsageError);
  HybridRequest<G2> moved = std::move(r);
  EXPECT_EQ(moved.held_blocks(0), 5u);
  EXPECT_EQ(r.group_count(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_THROW((void)r.held_blocks(0), UsageError);  // NOLINT(bugprone-use-after-move)
  m.finish(moved, hashes);
  EXPECT_EQ(m.audit(), "");
}

TEST(HybridRequest, DroppingItReleasesEveryBlock) {
  Manager m = make();
  {
    HybridRequest<G2> r = m.start_request();
    ASSERT_TRUE(m.allocate(r, 64));
    EXPECT_EQ(m.pool(0).pool_counts().in_use, 4u);
  }
  EXPECT_EQ(m.pool(0).pool_counts().in_use, 0u);
  EXPECT_EQ(m.pool(1).pool_counts().in_use, 0u);
  EXPECT_EQ(m.audit(), "");
}

}  // namespace hybrid_request_test
}  // namespace kvbm
