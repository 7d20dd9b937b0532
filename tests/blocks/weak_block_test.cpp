#include "kvbm/blocks/weak_block.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace weak_block_test {

using test::expect_balanced;
using test::present;
using test::register_one;
using test::seq;
using test::stage_ok;

BlockManager<G1> make_manager(std::size_t count, DuplicatePolicy policy = DuplicatePolicy::kAllow) {
  return BlockManager<G1>::builder()
      .block_count(count)
      .block_size(16)
      .duplicate_policy(policy)
      .build();
}

TEST(WeakBlock, RemembersIdAndHash) {
  auto m = make_manager(2);
  auto a = register_one(m, seq(0));
  const WeakBlock<G1> w = a.downgrade();
  EXPECT_EQ(w.block_id(), a.block_id());
  EXPECT_EQ(w.sequence_hash(), seq(0));
  // A weak reference does not count as a strong one.
  EXPECT_EQ(a.use_count(), 1U);
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeWhileActive) {
  auto m = make_manager(2);
  auto a = register_one(m, seq(0));
  const auto w = a.downgrade();
  auto up = w.upgrade();
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(*up, a);
  EXPECT_EQ(a.use_count(), 2U);
  up.reset();
  EXPECT_EQ(a.use_count(), 1U);
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeFromInactiveRevivesTheBlock) {
  auto m = make_manager(2);
  std::optional<WeakBlock<G1>> w;
  BlockId id = 0;
  {
    auto a = register_one(m, seq(0));
    id = a.block_id();
    w.emplace(a.downgrade());
  }
  EXPECT_EQ(m.pool_counts().inactive, 1U);
  auto up = w->upgrade();
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->block_id(), id);
  EXPECT_EQ(up->sequence_hash(), seq(0));
  EXPECT_EQ(up->use_count(), 1U);
  const auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.immutable_out, 1U);
  expect_balanced(m);
  // Copies of the weak handle upgrade to the same block.
  const WeakBlock<G1> copy = *w;
  auto up2 = copy.upgrade();
  ASSERT_TRUE(up2);
  EXPECT_EQ(*up2, *up);
  EXPECT_EQ(up->use_count(), 2U);
}

TEST(WeakBlock, UpgradeAfterEvictionFails) {
  auto m = make_manager(1);
  std::optional<WeakBlock<G1>> w;
  { w.emplace(register_one(m, seq(0)).downgrade()); }
  auto blocks = m.allocate_blocks(1);  // evicts the only block
  ASSERT_TRUE(blocks);
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{false});
  EXPECT_FALSE(w->upgrade().has_value());
  expect_balanced(m);
  // The same slot, now holding a different hash, is not mistaken for it.
  auto other = m.register_block(stage_ok(std::move(blocks->front()), seq(0, 9)));
  EXPECT_EQ(other.block_id(), w->block_id());
  EXPECT_FALSE(w->upgrade().has_value());
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeAfterResetInactivePoolFails) {
  auto m = make_manager(2);
  std::optional<WeakBlock<G1>> w;
  { w.emplace(register_one(m, seq(0)).downgrade()); }
  EXPECT_EQ(m.reset_inactive_pool(), 1U);
  EXPECT_FALSE(w->upgrade().has_value());
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeFindsSameHashReRegisteredInAnotherBlock) {
  auto m = make_manager(2);
  std::optional<WeakBlock<G1>> w;
  BlockId old_id = 0;
  {
    auto a = register_one(m, seq(0));
    old_id = a.block_id();
    w.emplace(a.downgrade());
  }
  // Take both blocks: the free one first, then the inactive one is evicted.
  auto blocks = m.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  ASSERT_EQ((*blocks)[1].block_id(), old_id);
  EXPECT_FALSE(w->upgrade().has_value());
  // Register the same hash in the other block.
  auto fresh = m.register_block(stage_ok(std::move((*blocks)[0]), seq(0)));
  ASSERT_NE(fresh.block_id(), old_id);
  auto up = w->upgrade();
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->block_id(), fresh.block_id());
  EXPECT_EQ(up->sequence_hash(), seq(0));
  EXPECT_EQ(fresh.use_count(), 2U);
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeFindsSameHashReRegisteredInSameBlock) {
  auto m = make_manager(1);
  std::optional<WeakBlock<G1>> w;
  { w.emplace(register_one(m, seq(0)).downgrade()); }
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  auto again = m.register_block(stage_ok(std::move(blocks->front()), seq(0)));
  auto up = w->upgrade();
  ASSERT_TRUE(up);
  EXPECT_EQ(*up, again);
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeOfADroppedDuplicateFindsThePrimary) {
  auto m = make_manager(3, DuplicatePolicy::kAllow);
  auto primary = register_one(m, seq(0));
  std::optional<WeakBlock<G1>> w;
  {
    auto dup = register_one(m, seq(0));
    ASSERT_NE(dup.block_id(), primary.block_id());
    w.emplace(dup.downgrade());
    // While the duplicate is held, upgrade returns the duplicate itself.
    auto up = w->upgrade();
    ASSERT_TRUE(up);
    EXPECT_EQ(*up, dup);
    EXPECT_EQ(dup.use_count(), 2U);
  }
  // The duplicate went back to reset; upgrade falls back to the primary.
  auto up = w->upgrade();
  ASSERT_TRUE(up);
  EXPECT_EQ(*up, primary);
  expect_balanced(m);
}

TEST(WeakBlock, UpgradeAfterManagerIsDestroyedFails) {
  std::optional<WeakBlock<G1>> from_inactive;
  std::optional<WeakBlock<G1>> from_active;
  std::optional<ImmutableBlock<G1>> held;
  {
    auto m = make_manager(2);
    { from_inactive.emplace(register_one(m, seq(0)).downgrade()); }
    held.emplace(register_one(m, seq(1)));
    from_active.emplace(held->downgrade());
    ASSERT_TRUE(from_inactive->upgrade().has_value());
  }
  EXPECT_FALSE(from_inactive->upgrade().has_value());
  EXPECT_FALSE(from_active->upgrade().has_value());  // held, but the manager is gone
  EXPECT_EQ(held->use_count(), 1U);
  held.reset();
  EXPECT_FALSE(from_active->upgrade().has_value());  // the pool itself is gone
}

TEST(WeakBlock, MovedFromWeakBlockDoesNotUpgrade) {
  auto m = make_manager(2);
  auto a = register_one(m, seq(0));
  WeakBlock<G1> w = a.downgrade();
  WeakBlock<G1> taken = std::move(w);
  EXPECT_TRUE(taken.upgrade().has_value());
  EXPECT_FALSE(w.upgrade().has_value());  // NOLINT(bugprone-use-after-move)
  expect_balanced(m);
}

}  // namespace weak_block_test
}  // namespace kvbm
