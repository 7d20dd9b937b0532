#include "kvbm/blocks/release_order.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace release_order_test {

using test::chain;
using test::expect_balanced;
using test::make_registered;
using test::metric_value;
using test::present;

BlockManager<G1> make_manager(std::size_t count) {
  return BlockManager<G1>::builder().block_count(count).block_size(16).build();
}

// Allocates `n` blocks from a full pool (each one an eviction) and drops them:
// what is left present tells which blocks were released least recently.
std::vector<bool> present_after_evicting(BlockManager<G1>& m, std::size_t n,
                                         const std::vector<SequenceHash>& hashes) {
  auto taken = m.allocate_blocks(n);
  EXPECT_TRUE(taken.has_value());
  return present(m, hashes);
}

void expect_gauges_match_counts(const BlockManager<G1>& m) {
  const PoolCounts c = m.pool_counts();
  EXPECT_EQ(metric_value(m, "kvbm_inactive_pool_size"), static_cast<double>(c.inactive));
  EXPECT_EQ(metric_value(m, "kvbm_inflight_immutable"), static_cast<double>(c.immutable_out));
  EXPECT_EQ(metric_value(m, "kvbm_reset_pool_size"), static_cast<double>(c.reset));
}

TEST(ReleaseOrder, TailFirstLeavesThePoolAsDroppingEachHandleLastFirst) {
  const auto hashes = chain(8);
  auto batched = make_manager(8);
  auto one_by_one = make_manager(8);
  auto a = make_registered(batched, hashes);
  auto b = make_registered(one_by_one, hashes);
  release_tail_first(a);
  while (!b.empty()) b.pop_back();
  EXPECT_TRUE(a.empty());
  expect_balanced(batched);
  expect_gauges_match_counts(batched);
  EXPECT_EQ(batched.pool_counts().inactive, 8U);
  // The tail was released first, so it is evicted first, in both pools.
  const std::vector<bool> expected{true, true, true, true, true, false, false, false};
  EXPECT_EQ(present_after_evicting(batched, 3, hashes), expected);
  EXPECT_EQ(present_after_evicting(one_by_one, 3, hashes), expected);
}

TEST(ReleaseOrder, InOrderReleasesTheHeadFirst) {
  const auto hashes = chain(6);
  auto m = make_manager(6);
  auto blocks = make_registered(m, hashes);
  release_in_order(blocks);
  EXPECT_TRUE(blocks.empty());
  expect_balanced(m);
  expect_gauges_match_counts(m);
  const std::vector<bool> expected{false, false, true, true, true, true};
  EXPECT_EQ(present_after_evicting(m, 2, hashes), expected);
}

// More blocks than one batch holds, two pools interleaved, shared handles and
// a handle kept outside the vector: every reference is dropped exactly once.
TEST(ReleaseOrder, RunsOfPoolsSharedHandlesAndFullBatches) {
  constexpr std::size_t kBlocks = 3 * detail::ReleaseBatch::kCapacity + 5;
  auto m1 = make_manager(kBlocks);
  auto m2 = make_manager(kBlocks);
  auto first = make_registered(m1, chain(static_cast<std::uint32_t>(kBlocks), 1));
  auto second = make_registered(m2, chain(static_cast<std::uint32_t>(kBlocks), 2));
  const ImmutableBlock<G1> kept = first[7];
  std::vector<ImmutableBlock<G1>> mixed;
  for (std::size_t i = 0; i < kBlocks; ++i) {
    mixed.push_back(std::move(first[i]));
    if (i % 3 == 0) mixed.push_back(mixed.back());  // a second handle of the same block
    if (i % 5 == 0 || i > kBlocks / 2) mixed.push_back(std::move(second[i]));
  }
  for (auto& b : second) {
    if (b.valid()) mixed.push_back(std::move(b));
  }
  release_tail_first(mixed);
  EXPECT_TRUE(mixed.empty());
  for (const auto* m : {&m1, &m2}) {
    expect_balanced(*m);
    expect_gauges_match_counts(*m);
  }
  EXPECT_EQ(m1.pool_counts().immutable_out, 1U);  // `kept`
  EXPECT_EQ(kept.use_count(), 1U);
  EXPECT_EQ(m1.pool_counts().inactive, kBlocks - 1);
  EXPECT_EQ(m2.pool_counts().inactive, kBlocks);
}

TEST(ReleaseOrder, MissingBlocksAreSkipped) {
  const auto hashes = chain(5);
  auto m = make_manager(5);
  auto blocks = make_registered(m, hashes);
  std::vector<std::optional<ImmutableBlock<G1>>> holes;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    holes.emplace_back(std::move(blocks[i]));
    holes.emplace_back(std::nullopt);
  }
  release_tail_first(holes);
  EXPECT_TRUE(holes.empty());
  expect_balanced(m);
  expect_gauges_match_counts(m);
  EXPECT_EQ(m.pool_counts().inactive, 5U);
}

// The pool outlives its manager while blocks are out; the batch that returns
// the last of them ends the pool after its lock is released (ASan checks).
TEST(ReleaseOrder, ThePoolMayOutliveItsManagerUntilTheBatch) {
  std::vector<ImmutableBlock<G1>> blocks;
  {
    auto m = make_manager(70);
    blocks = make_registered(m, chain(70));
  }
  release_tail_first(blocks);
  EXPECT_TRUE(blocks.empty());
  {
    auto m = make_manager(4);
    blocks = make_registered(m, chain(4));
  }
  release_in_order(blocks);
  EXPECT_TRUE(blocks.empty());
}

}  // namespace release_order_test
}  // namespace kvbm
