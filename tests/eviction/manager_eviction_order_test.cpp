// Eviction order as seen through a BlockManager, for every backend: blocks are
// registered, released in a known order, then taken back one allocation at a
// time; the test records which hash stops being present after each one.
// Presence is read through the registry (a match would revive the block).

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/eviction/multi_level_lru.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace manager_eviction_order_test {

using test::chain;
using test::expect_balanced;
using test::register_one;
using test::root;
using test::seq;

using Hashes = std::vector<SequenceHash>;

// Allocates one block at a time (keeping it) until `watched` is all gone or an
// allocation fails; returns, per allocation, the watched hashes that stopped
// being present (so exactly one each when the allocation evicted a watched block).
template <TierMarker T>
std::vector<Hashes> drain_order(BlockManager<T>& m, const Hashes& watched,
                                std::vector<MutableBlock<T>>& keep) {
  std::vector<Hashes> order;
  auto before = m.registry()->template presence<T>(watched);
  for (std::size_t step = 0; step < m.total_blocks(); ++step) {
    auto got = m.allocate_blocks(1);
    if (!got) break;
    keep.push_back(std::move(got->front()));
    const auto after = m.registry()->template presence<T>(watched);
    Hashes gone;
    for (std::size_t i = 0; i < watched.size(); ++i) {
      if (before[i] && !after[i]) gone.push_back(watched[i]);
      EXPECT_FALSE(!before[i] && after[i]) << "a hash reappeared";
    }
    order.push_back(std::move(gone));
    before = after;
    expect_balanced(m);
  }
  return order;
}

// Releases the handles in the given order (indices into `blocks`).
template <TierMarker T>
void release_in_order(std::vector<std::optional<ImmutableBlock<T>>>& blocks,
                      const std::vector<std::size_t>& order) {
  for (const std::size_t i : order) blocks[i].reset();
}

template <TierMarker T>
std::vector<std::optional<ImmutableBlock<T>>> register_all(BlockManager<T>& m, const Hashes& hs) {
  std::vector<std::optional<ImmutableBlock<T>>> out;
  for (const auto& h : hs) out.emplace_back(register_one(m, h));
  return out;
}

std::vector<Hashes> singletons(const Hashes& hs) {
  std::vector<Hashes> out;
  for (const auto& h : hs) out.push_back({h});
  return out;
}

// ---- LRU -----------------------------------------------------------------

TEST(ManagerEvictionOrder, LruEvictsLeastRecentlyReleasedFirst) {
  auto m = BlockManager<G1>::builder().block_count(4).block_size(16).with_lru_backend().build();
  const Hashes h{root(100), root(101), root(102), root(103)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {2, 0, 3, 1});
  std::vector<MutableBlock<G1>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[2], h[0], h[3], h[1]}));
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
}

TEST(ManagerEvictionOrder, LruMatchMakesABlockMostRecent) {
  auto m = BlockManager<G1>::builder().block_count(4).block_size(16).with_lru_backend().build();
  const Hashes h{root(100), root(101), root(102), root(103)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {0, 1, 2, 3});
  { auto matched = m.match_blocks(Hashes{h[0]}); }  // h0 released again: most recent
  std::vector<MutableBlock<G1>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[1], h[2], h[3], h[0]}));
}

TEST(ManagerEvictionOrder, LruFreeBlocksGoBeforeAnyEviction) {
  auto m = BlockManager<G1>::builder().block_count(4).block_size(16).with_lru_backend().build();
  const Hashes h{root(100), root(101)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {1, 0});
  std::vector<MutableBlock<G1>> keep;
  EXPECT_EQ(drain_order(m, h, keep), (std::vector<Hashes>{{}, {}, {h[1]}, {h[0]}}));
}

TEST(ManagerEvictionOrder, LruNeverEvictsHeldBlocks) {
  auto m = BlockManager<G1>::builder().block_count(3).block_size(16).with_lru_backend().build();
  const Hashes h{root(100), root(101), root(102)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {0, 2});  // h1 stays held
  std::vector<MutableBlock<G1>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[0], h[2]}));
  EXPECT_TRUE(m.registry()->is_present<G1>(h[1]));
}

// ---- Multi-level LRU -----------------------------------------------------

TEST(ManagerEvictionOrder, MultiLevelLruEvictsColdLevelsFirst) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto m = BlockManager<G2>::builder()
               .block_count(4)
               .block_size(16)
               .registry(registry)
               .with_multi_level_lru_backend()
               .build();
  ASSERT_EQ(m.eviction_policy(), EvictionPolicy::kMultiLevelLru);
  const SequenceHash hot = root(100), warm = root(101), cold1 = root(102), cold2 = root(103);
  const Hashes h{hot, warm, cold1, cold2};
  auto blocks = register_all(m, h);  // each estimate 1
  // While held: hot matched 3 more times (estimate 4: level 2), warm once (2: level 1).
  for (int i = 0; i < 3; ++i) {
    auto matched = m.match_blocks(Hashes{hot});
  }
  { auto matched = m.match_blocks(Hashes{warm}); }
  ASSERT_EQ(tracker->estimate(hot.value()), 4U);
  ASSERT_EQ(tracker->estimate(warm.value()), 2U);
  ASSERT_EQ(tracker->estimate(cold1.value()), 1U);
  ASSERT_EQ(tracker->estimate(cold2.value()), 1U);
  // Released hottest first: plain LRU would evict hot first.
  release_in_order(blocks, {0, 1, 2, 3});
  std::vector<MutableBlock<G2>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({cold1, cold2, warm, hot}));
}

TEST(ManagerEvictionOrder, MultiLevelLruIsLruWithinALevel) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto m = BlockManager<G2>::builder()
               .block_count(4)
               .block_size(16)
               .registry(registry)
               .with_multi_level_lru_backend()
               .build();
  const Hashes h{root(200), root(201), root(202), root(203)};
  auto blocks = register_all(m, h);
  // Lift h0 and h2 to level 1 together.
  { auto matched = m.scan_matches(h); }  // scan does not count
  for (const std::size_t i : {0U, 2U}) {
    auto matched = m.match_blocks(Hashes{h[i]});
  }
  release_in_order(blocks, {2, 3, 0, 1});
  std::vector<MutableBlock<G2>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[3], h[1], h[2], h[0]}));
}

TEST(ManagerEvictionOrder, MultiLevelLruLevelIsFixedWhenReleased) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto m = BlockManager<G2>::builder()
               .block_count(2)
               .block_size(16)
               .registry(registry)
               .with_multi_level_lru_backend()
               .build();
  const Hashes h{root(300), root(301)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {0, 1});  // both at level 0, h0 older
  // h0 becomes hot while inactive (e.g. seen by another tier): its level does
  // not change until it is released again.
  for (int i = 0; i < 7; ++i) tracker->touch(h[0].value());
  ASSERT_EQ(tracker->estimate(h[0].value()), 8U);
  std::vector<MutableBlock<G2>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[0], h[1]}));
}

TEST(ManagerEvictionOrder, MultiLevelLruReleveledOnRelease) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto m = BlockManager<G2>::builder()
               .block_count(2)
               .block_size(16)
               .registry(registry)
               .with_multi_level_lru_backend()
               .build();
  const Hashes h{root(400), root(401)};
  auto blocks = register_all(m, h);
  release_in_order(blocks, {1, 0});  // h1 older
  for (int i = 0; i < 7; ++i) tracker->touch(h[1].value());
  // Reviving and releasing h1 puts it at level 3 (estimate 9); h0 is then
  // revived and released at level 1 (estimate 2), more recently than h1.
  // Plain LRU would now evict h1 first; the levels evict h0 first.
  { auto matched = m.match_blocks(Hashes{h[1]}); }
  { auto matched = m.match_blocks(Hashes{h[0]}); }
  ASSERT_EQ(tracker->estimate(h[1].value()), 9U);
  ASSERT_EQ(tracker->estimate(h[0].value()), 2U);
  std::vector<MutableBlock<G2>> keep;
  EXPECT_EQ(drain_order(m, h, keep), singletons({h[0], h[1]}));
}

// ---- Lineage -------------------------------------------------------------

BlockManager<G3> make_lineage(std::size_t count) {
  return BlockManager<G3>::builder()
      .block_count(count)
      .block_size(16)
      .with_lineage_backend()
      .build();
}

TEST(ManagerEvictionOrder, LineageUnwindsAChainLeafFirst) {
  auto m = make_lineage(4);
  const Hashes a = chain(3, 0);      // A <- B <- C
  const SequenceHash x = seq(0, 1);  // an unrelated leaf
  const Hashes all{a[0], a[1], a[2], x};
  auto blocks = register_all(m, all);
  release_in_order(blocks, {0, 1, 2, 3});  // the chain before the leaf
  EXPECT_EQ(m.pool_counts().inactive, 4U);
  EXPECT_EQ(m.pool_counts().evictable, 2U);  // C and X; A and B have children
  std::vector<MutableBlock<G3>> keep;
  EXPECT_EQ(drain_order(m, all, keep), singletons({a[2], a[1], a[0], x}));
}

TEST(ManagerEvictionOrder, LruWouldEvictTheSameChainRootFirst) {
  // Control for the lineage test: the same script with LRU evicts A first.
  auto m = BlockManager<G3>::builder().block_count(4).block_size(16).with_lru_backend().build();
  const Hashes a = chain(3, 0);
  const SequenceHash x = seq(0, 1);
  const Hashes all{a[0], a[1], a[2], x};
  auto blocks = register_all(m, all);
  release_in_order(blocks, {0, 1, 2, 3});
  std::vector<MutableBlock<G3>> keep;
  EXPECT_EQ(drain_order(m, all, keep), singletons({a[0], a[1], a[2], x}));
}

TEST(ManagerEvictionOrder, LineageNeverEvictsAParentOfAnInUseChild) {
  auto m = make_lineage(2);
  const Hashes a = chain(2);
  auto blocks = register_all(m, a);
  release_in_order(blocks, {0});  // parent inactive, child held
  EXPECT_EQ(m.pool_counts().inactive, 1U);
  EXPECT_EQ(m.pool_counts().evictable, 0U);
  EXPECT_EQ(m.available_blocks(), 0U);
  // Allocation fails rather than evict the parent.
  const PoolCounts before = m.pool_counts();
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
  EXPECT_EQ(m.pool_counts().inactive, before.inactive);
  EXPECT_TRUE(m.registry()->is_present<G3>(a[0]));
  expect_balanced(m);
  // Once the child is released it goes first, then its parent.
  release_in_order(blocks, {1});
  EXPECT_EQ(m.available_blocks(), 1U);
  std::vector<MutableBlock<G3>> keep;
  EXPECT_EQ(drain_order(m, a, keep), singletons({a[1], a[0]}));
}

TEST(ManagerEvictionOrder, LineageEvictsOtherLeavesAroundAProtectedParent) {
  auto m = make_lineage(3);
  const Hashes a = chain(2, 0);
  const SequenceHash x = seq(0, 1);
  const Hashes all{a[0], a[1], x};
  auto blocks = register_all(m, all);
  release_in_order(blocks, {0, 2});  // A and X inactive, A's child B held
  std::vector<MutableBlock<G3>> keep;
  EXPECT_EQ(drain_order(m, all, keep), singletons({x}));
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
  EXPECT_TRUE(m.registry()->is_present<G3>(a[0]));
  EXPECT_EQ(m.reset_inactive_pool(), 0U);  // nothing evictable either
  EXPECT_TRUE(m.registry()->is_present<G3>(a[0]));
  expect_balanced(m);
}

TEST(ManagerEvictionOrder, LineageChildRegisteredOnAnInactiveParentProtectsIt) {
  auto m = make_lineage(3);
  const Hashes a = chain(2);
  const SequenceHash x = root(77);
  auto parent = register_all(m, Hashes{a[0], x});
  release_in_order(parent, {0, 1});    // A released before X: LRU would take A first
  auto child = register_one(m, a[1]);  // from reset; now A has a registered child
  EXPECT_EQ(m.pool_counts().evictable, 1U);
  std::vector<MutableBlock<G3>> keep;
  EXPECT_EQ(drain_order(m, Hashes{a[0], a[1], x}, keep), singletons({x}));
  EXPECT_TRUE(m.registry()->is_present<G3>(a[0]));
}

TEST(ManagerEvictionOrder, LineageResetInactivePoolUnwindsWholeChains) {
  auto m = make_lineage(4);
  const Hashes a = chain(4);
  { auto blocks = register_all(m, a); }
  EXPECT_EQ(m.pool_counts().evictable, 1U);
  EXPECT_EQ(m.reset_inactive_pool(), 4U);
  EXPECT_EQ(m.registry()->presence<G3>(a), (std::vector<bool>(4, false)));
  expect_balanced(m);
}

TEST(ManagerEvictionOrder, LineageAllocationEvictsAWholeChainLeafFirst) {
  // Only C is evictable at first, but evicting it frees B, then A: an
  // allocation of three blocks succeeds.
  auto m = make_lineage(3);
  const Hashes a = chain(3);
  { auto blocks = register_all(m, a); }
  EXPECT_EQ(m.pool_counts().evictable, 1U);
  auto taken = m.allocate_blocks(3);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(m.registry()->presence<G3>(a), (std::vector<bool>(3, false)));
  EXPECT_EQ(test::metric_value(m, "kvbm_evictions_total"), std::optional<double>(3.0));
  expect_balanced(m);
}

TEST(ManagerEvictionOrder, LineageAllocationThatCannotBeMetChangesNothing) {
  // A <- B <- C with C held: A and B are inactive but pinned by C. X is a
  // free leaf. Asking for three blocks may evict X but not A or B: it fails,
  // and X is still cached afterwards.
  auto m = make_lineage(4);
  const Hashes a = chain(3, 0);
  const SequenceHash x = seq(0, 1);
  auto blocks = register_all(m, Hashes{a[0], a[1], a[2], x});
  release_in_order(blocks, {0, 1, 3});
  const PoolCounts before = m.pool_counts();
  EXPECT_EQ(before.inactive, 3U);
  EXPECT_FALSE(m.allocate_blocks(2).has_value());
  const PoolCounts after = m.pool_counts();
  EXPECT_EQ(after.inactive, before.inactive);
  EXPECT_EQ(after.evictable, before.evictable);
  EXPECT_EQ(m.registry()->presence<G3>(Hashes{a[0], a[1], x}), (std::vector<bool>(3, true)));
  EXPECT_EQ(test::metric_value(m, "kvbm_evictions_total"), std::optional<double>(0.0));
  expect_balanced(m);
  // X alone can still be taken.
  auto one = m.allocate_blocks(1);
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(m.registry()->is_present<G3>(x));
  expect_balanced(m);
}

}  // namespace manager_eviction_order_test
}  // namespace kvbm
