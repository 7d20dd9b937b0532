#include "kvbm/block_registry.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace block_registry_test {

using test::chain;
using test::expect_balanced;
using test::register_one;
using test::root;
using test::seq;

template <TierMarker T>
BlockManager<T> make_manager(const std::shared_ptr<BlockRegistry>& registry, std::size_t count = 4,
                             std::string name = "") {
  auto b = BlockManager<T>::builder().block_count(count).block_size(16).registry(registry);
  if (!name.empty()) b.pool_name(std::move(name));
  return b.build();
}

using Names = std::vector<std::string>;

TEST(BlockRegistry, BuilderWithAndWithoutTracker) {
  auto plain = BlockRegistry::builder().build();
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->frequency_tracker(), nullptr);
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto tracked = BlockRegistry::builder().frequency_tracker(tracker).build();
  EXPECT_EQ(tracked->frequency_tracker(), tracker);
}

TEST(BlockRegistry, ManagersShareTheRegistryTheyWereBuiltWith) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry);
  auto g2 = make_manager<G2>(registry);
  EXPECT_EQ(g1.registry(), registry);
  EXPECT_EQ(g2.registry(), registry);
}

TEST(BlockRegistry, PresenceAcrossTiers) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry);
  auto g2 = make_manager<G2>(registry);
  auto g3 = make_manager<G3>(registry);
  const auto h = chain(3);
  auto a1 = register_one(g1, h[0]);
  auto a2 = register_one(g2, h[0]);
  auto b2 = register_one(g2, h[1]);
  { auto c3 = register_one(g3, h[2]); }  // inactive blocks are present too

  EXPECT_TRUE(registry->is_present<G1>(h[0]));
  EXPECT_FALSE(registry->is_present<G1>(h[1]));
  EXPECT_FALSE(registry->is_present<G1>(h[2]));
  EXPECT_TRUE(registry->is_present<G2>(h[0]));
  EXPECT_TRUE(registry->is_present<G2>(h[1]));
  EXPECT_FALSE(registry->is_present<G3>(h[0]));
  EXPECT_TRUE(registry->is_present<G3>(h[2]));

  EXPECT_EQ(registry->presence<G1>(h), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(registry->presence<G2>(h), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(registry->presence<G3>(h), (std::vector<bool>{false, false, true}));
  EXPECT_TRUE(registry->presence<G1>(std::vector<SequenceHash>{}).empty());

  EXPECT_EQ(registry->pools_holding(h[0]), (Names{"G1", "G2"}));
  EXPECT_EQ(registry->pools_holding(h[1]), (Names{"G2"}));
  EXPECT_EQ(registry->pools_holding(h[2]), (Names{"G3"}));
  EXPECT_TRUE(registry->pools_holding(root(77)).empty());
  expect_balanced(g1);
  expect_balanced(g2);
  expect_balanced(g3);
}

TEST(BlockRegistry, PresenceDoesNotReviveOrCount) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry);
  { auto a = register_one(g1, seq(0)); }
  EXPECT_TRUE(registry->is_present<G1>(seq(0)));
  EXPECT_EQ(g1.pool_counts().inactive, 1U);
  EXPECT_EQ(test::metric_value(g1, "kvbm_match_hashes_requested_total"), 0.0);
  EXPECT_EQ(test::metric_value(g1, "kvbm_scan_hashes_requested_total"), 0.0);
}

TEST(BlockRegistry, UnattachedTierHoldsNothing) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry);
  auto a = register_one(g1, seq(0));
  EXPECT_FALSE(registry->is_present<G2>(seq(0)));
  EXPECT_EQ(registry->presence<G3>(std::vector{seq(0)}), std::vector<bool>{false});
}

TEST(BlockRegistry, EvictedBlocksAreNoLongerPresent) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry, 1);
  { auto a = register_one(g1, seq(0)); }
  EXPECT_TRUE(registry->is_present<G1>(seq(0)));
  auto taken = g1.allocate_blocks(1);
  ASSERT_TRUE(taken);
  EXPECT_FALSE(registry->is_present<G1>(seq(0)));
  EXPECT_TRUE(registry->pools_holding(seq(0)).empty());
}

TEST(BlockRegistry, TwoPoolsOfOneTier) {
  auto registry = BlockRegistry::builder().build();
  auto left = make_manager<G2>(registry, 2, "host0");
  auto right = make_manager<G2>(registry, 2, "host1");
  auto a = register_one(left, seq(0));
  auto b = register_one(right, seq(1));
  auto c = register_one(right, seq(0));
  EXPECT_EQ(registry->presence<G2>(chain(3)), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(registry->pools_holding(seq(0)), (Names{"host0", "host1"}));
  EXPECT_EQ(registry->pools_holding(seq(1)), (Names{"host1"}));
}

TEST(BlockRegistry, DestroyedManagerHoldsNothing) {
  auto registry = BlockRegistry::builder().build();
  auto g1 = make_manager<G1>(registry);
  std::optional<BlockManager<G2>> g2(make_manager<G2>(registry));
  { auto a = register_one(*g2, seq(0)); }  // inactive
  auto held1 = register_one(g1, seq(1));
  EXPECT_EQ(registry->pools_holding(seq(0)), (Names{"G2"}));
  g2.reset();
  EXPECT_FALSE(registry->is_present<G2>(seq(0)));
  EXPECT_TRUE(registry->pools_holding(seq(0)).empty());
  EXPECT_EQ(registry->pools_holding(seq(1)), (Names{"G1"}));
  // A new G2 pool attaches and answers in place of the old one.
  auto g2b = make_manager<G2>(registry);
  auto b = register_one(g2b, seq(0));
  EXPECT_EQ(registry->pools_holding(seq(0)), (Names{"G2"}));
}

// A manager destroyed while its blocks are still held keeps its pool alive
// only so that those blocks can be returned; the tier no longer holds
// anything a query could use (weak upgrades fail the same way).
TEST(BlockRegistry, ManagerDestroyedWithBlocksOutHoldsNothing) {
  auto registry = BlockRegistry::builder().build();
  std::optional<BlockManager<G2>> g2(make_manager<G2>(registry));
  std::optional<ImmutableBlock<G2>> held(register_one(*g2, seq(0)));
  { auto inactive = register_one(*g2, seq(1)); }
  EXPECT_EQ(registry->presence<G2>(chain(2)), (std::vector<bool>{true, true}));
  g2.reset();
  EXPECT_EQ(registry->presence<G2>(chain(2)), (std::vector<bool>{false, false}));
  EXPECT_TRUE(registry->pools_holding(seq(0)).empty());
  EXPECT_EQ(held->sequence_hash(), seq(0));
  // A replacement pool of the same tier is not credited with the old pool's blocks.
  auto replacement = make_manager<G2>(registry, 4, "G2b");
  EXPECT_FALSE(registry->is_present<G2>(seq(0)));
  EXPECT_TRUE(registry->pools_holding(seq(0)).empty());
  EXPECT_TRUE(replacement.match_blocks(chain(1)).empty());
  held.reset();
  EXPECT_FALSE(registry->is_present<G2>(seq(0)));
}

TEST(BlockRegistry, RegistryOutlivedByItsManagers) {
  std::optional<BlockManager<G1>> g1;
  {
    auto registry = BlockRegistry::builder().build();
    g1.emplace(make_manager<G1>(registry));
  }
  // The manager keeps the registry alive.
  ASSERT_NE(g1->registry(), nullptr);
  auto a = register_one(*g1, seq(0));
  EXPECT_TRUE(g1->registry()->is_present<G1>(seq(0)));
}

// ---- Frequency tracking ----------------------------------------------------

TEST(BlockRegistry, FrequencyTrackerIsFedByRegistrationAndMatch) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto g1 = make_manager<G1>(registry);
  const auto h = chain(3);
  EXPECT_EQ(tracker->estimate(h[0].value()), 0U);

  auto a = register_one(g1, h[0]);
  EXPECT_EQ(tracker->estimate(h[0].value()), 1U);

  { auto m = g1.match_blocks(std::vector{h[0]}); }
  EXPECT_EQ(tracker->estimate(h[0].value()), 2U);

  // A prefix match touches its hits and the first miss, not what follows it.
  { auto m = g1.match_blocks(h); }
  EXPECT_EQ(tracker->estimate(h[0].value()), 3U);
  EXPECT_EQ(tracker->estimate(h[1].value()), 1U);
  EXPECT_EQ(tracker->estimate(h[2].value()), 0U);

  // A match that finds nothing still records the miss.
  { auto m = g1.match_blocks(std::vector{h[2]}); }
  EXPECT_EQ(tracker->estimate(h[2].value()), 1U);

  // Registering the missing block counts as well.
  auto b = register_one(g1, h[1]);
  EXPECT_EQ(tracker->estimate(h[1].value()), 2U);
}

TEST(BlockRegistry, FrequencyTrackerIsSharedByAllTiers) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto g1 = make_manager<G1>(registry);
  auto g2 = make_manager<G2>(registry);
  auto a = register_one(g1, seq(0));
  auto b = register_one(g2, seq(0));
  { auto m = g2.match_blocks(std::vector{seq(0)}); }
  EXPECT_EQ(tracker->estimate(seq(0).value()), 3U);
}

TEST(BlockRegistry, DeduplicatedAndDuplicateRegistrationsAreCounted) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  auto registry = BlockRegistry::builder().frequency_tracker(tracker).build();
  auto reject = BlockManager<G1>::builder()
                    .block_count(4)
                    .block_size(16)
                    .registry(registry)
                    .duplicate_policy(DuplicatePolicy::kReject)
                    .build();
  auto allow = BlockManager<G2>::builder().block_count(4).block_size(16).registry(registry).build();
  auto a = register_one(reject, root(10));
  auto b = register_one(reject, root(10));  // deduplicated
  EXPECT_EQ(tracker->estimate(10), 2U);
  auto c = register_one(allow, root(20));
  auto d = register_one(allow, root(20));  // duplicate
  EXPECT_EQ(tracker->estimate(20), 2U);
  expect_balanced(reject);
  expect_balanced(allow);
}

}  // namespace block_registry_test
}  // namespace kvbm
