#include "kvbm/block_manager.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm {
namespace block_manager_test {

using test::chain;
using test::expect_balanced;
using test::make_registered;
using test::present;
using test::register_one;
using test::root;
using test::seq;
using test::stage_ok;

BlockManager<G1> make_manager(std::size_t count, DuplicatePolicy policy = DuplicatePolicy::kAllow) {
  return BlockManager<G1>::builder()
      .block_count(count)
      .block_size(16)
      .duplicate_policy(policy)
      .build();
}

using test::expect_usage_error;

bool same_counts(const PoolCounts& a, const PoolCounts& b) {
  return a.total == b.total && a.reset == b.reset && a.inactive == b.inactive &&
         a.evictable == b.evictable && a.in_use == b.in_use && a.mutable_out == b.mutable_out &&
         a.immutable_out == b.immutable_out;
}

// ---- Builder -------------------------------------------------------------

TEST(BlockManagerBuilder, RejectsMissingOrZeroBlockCount) {
  expect_usage_error([] { (void)BlockManager<G1>::builder().block_size(16).build(); },
                     {"block_count", "at least 1"});
  expect_usage_error(
      [] { (void)BlockManager<G1>::builder().block_count(0).block_size(16).build(); },
      {"block_count"});
}

TEST(BlockManagerBuilder, RejectsMissingOrZeroBlockSize) {
  expect_usage_error([] { (void)BlockManager<G1>::builder().block_count(4).build(); },
                     {"block_size", "at least 1"});
  expect_usage_error([] { (void)BlockManager<G1>::builder().block_count(4).block_size(0).build(); },
                     {"block_size"});
}

TEST(BlockManagerBuilder, RejectsTooLargeOptions) {
  expect_usage_error(
      [] {
        (void)BlockManager<G1>::builder()
            .block_count(std::size_t{kMaxBlockCount} + 1)
            .block_size(16)
            .build();
      },
      {"block_count", "exceeds", std::to_string(kMaxBlockCount)});
  expect_usage_error(
      [] {
        (void)BlockManager<G1>::builder()
            .block_count(4)
            .block_size(std::size_t{kMaxBlockSize} + 1)
            .build();
      },
      {"block_size", "exceeds", std::to_string(kMaxBlockSize)});
  // The largest block size itself is fine.
  auto m = BlockManager<G1>::builder().block_count(1).block_size(kMaxBlockSize).build();
  EXPECT_EQ(m.block_size(), kMaxBlockSize);
}

TEST(BlockManagerBuilder, MultiLevelLruNeedsAFrequencyTracker) {
  expect_usage_error(
      [] {
        (void)BlockManager<G1>::builder()
            .block_count(4)
            .block_size(16)
            .with_multi_level_lru_backend()
            .build();
      },
      {"multi_level_lru", "frequency tracker"});
}

TEST(BlockManagerBuilder, DefaultsAndAccessors) {
  auto m = BlockManager<G2>::builder().block_count(8).block_size(32).build();
  EXPECT_EQ(m.total_blocks(), 8U);
  EXPECT_EQ(m.available_blocks(), 8U);
  EXPECT_EQ(m.block_size(), 32U);
  EXPECT_EQ(m.pool_name(), "G2");
  EXPECT_EQ(m.eviction_policy(), EvictionPolicy::kLru);
  EXPECT_EQ(m.duplicate_policy(), DuplicatePolicy::kAllow);
  ASSERT_NE(m.registry(), nullptr);
  EXPECT_EQ(m.registry()->frequency_tracker(), nullptr);
  ASSERT_NE(m.metrics_registry(), nullptr);
  const auto c = m.pool_counts();
  EXPECT_EQ(c.total, 8U);
  EXPECT_EQ(c.reset, 8U);
  expect_balanced(m);

  auto n = BlockManager<G3>::builder()
               .block_count(2)
               .block_size(1)
               .with_lineage_backend()
               .duplicate_policy(DuplicatePolicy::kReject)
               .pool_name("disk0")
               .build();
  EXPECT_EQ(n.eviction_policy(), EvictionPolicy::kLineage);
  EXPECT_EQ(n.duplicate_policy(), DuplicatePolicy::kReject);
  EXPECT_EQ(n.pool_name(), "disk0");
}

// ---- Allocation ----------------------------------------------------------

TEST(BlockManager, AllocateIsAllOrNothing) {
  auto m = make_manager(4);
  auto held = m.allocate_blocks(3);
  ASSERT_TRUE(held);
  const PoolCounts before = m.pool_counts();
  EXPECT_FALSE(m.allocate_blocks(2).has_value());
  EXPECT_TRUE(same_counts(before, m.pool_counts()));
  auto last = m.allocate_blocks(1);
  ASSERT_TRUE(last);
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
  EXPECT_EQ(m.available_blocks(), 0U);
  expect_balanced(m);
}

TEST(BlockManager, FailedAllocationEvictsNothing) {
  auto m = make_manager(4);
  auto held = m.allocate_blocks(2);
  ASSERT_TRUE(held);
  { auto a = register_one(m, seq(0)); }  // inactive
  ASSERT_EQ(m.available_blocks(), 2U);   // 1 reset + 1 evictable
  const PoolCounts before = m.pool_counts();
  EXPECT_FALSE(m.allocate_blocks(3).has_value());
  EXPECT_TRUE(same_counts(before, m.pool_counts()));
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{true});
  expect_balanced(m);
}

TEST(BlockManager, AllocateAtMostTakesWhatFits) {
  auto m = make_manager(4);
  EXPECT_TRUE(m.allocate_at_most(0).empty());
  auto held = m.allocate_blocks(2);
  ASSERT_TRUE(held);
  { auto a = register_one(m, seq(0)); }  // inactive: 1 reset + 1 evictable left
  auto some = m.allocate_at_most(10);    // more than the pool holds: no throw
  EXPECT_EQ(some.size(), 2U);
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{false});  // evicted to fit
  EXPECT_TRUE(m.allocate_at_most(1).empty());
  some.clear();
  EXPECT_EQ(m.allocate_at_most(2).size(), 2U);
  expect_balanced(m);
}

TEST(BlockManager, AllocateZeroReturnsAnEmptyAllocation) {
  auto m = make_manager(4);
  auto all = m.allocate_blocks(4);  // even from a full pool
  ASSERT_TRUE(all);
  auto none = m.allocate_blocks(0);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(m.pool_counts().in_use, 4U);
  all->clear();
  expect_balanced(m);
}

TEST(BlockManager, AllocateMoreThanTotalThrows) {
  auto m = make_manager(4);
  expect_usage_error([&] { (void)m.allocate_blocks(5); }, {"allocate_blocks(5)", "G1", "4"});
  EXPECT_EQ(m.pool_counts().reset, 4U);
  auto all = m.allocate_blocks(4);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 4U);
  std::vector<BlockId> ids;
  for (const auto& b : *all) ids.push_back(b.block_id());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<BlockId>{0, 1, 2, 3}));
  expect_balanced(m);
}

TEST(BlockManager, AllocationTakesResetBlocksBeforeEvicting) {
  auto m = make_manager(4);
  const auto h = chain(3);
  {
    auto blocks = make_registered(m, h);
    // Released in order h0, h1, h2 (vector destroys front to back).
  }
  auto c = m.pool_counts();
  EXPECT_EQ(c.reset, 1U);
  EXPECT_EQ(c.inactive, 3U);
  EXPECT_EQ(m.available_blocks(), 4U);

  auto first = m.allocate_blocks(1);  // from reset: nothing evicted
  ASSERT_TRUE(first);
  EXPECT_EQ(present(m, h), (std::vector<bool>{true, true, true}));
  c = m.pool_counts();
  EXPECT_EQ(c.reset, 0U);
  EXPECT_EQ(c.inactive, 3U);

  auto two = m.allocate_blocks(2);  // evicts the two least recently released
  ASSERT_TRUE(two);
  EXPECT_EQ(present(m, h), (std::vector<bool>{false, false, true}));
  EXPECT_TRUE(m.match_blocks(std::vector{h[0]}).empty());
  c = m.pool_counts();
  EXPECT_EQ(c.inactive, 1U);
  EXPECT_EQ(c.mutable_out, 3U);
  EXPECT_EQ(m.available_blocks(), 1U);
  expect_balanced(m);
}

TEST(BlockManager, AllocationNeverTakesBlocksInUse) {
  auto m = make_manager(3);
  auto held = register_one(m, seq(0));
  auto mut = m.allocate_blocks(1);
  ASSERT_TRUE(mut);
  auto staged = stage_ok(std::move(mut->front()), seq(1));
  auto rest = m.allocate_blocks(1);
  ASSERT_TRUE(rest);
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
  EXPECT_EQ(held.sequence_hash(), seq(0));
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{true});
  expect_balanced(m);
}

// ---- Registration and duplicates -----------------------------------------

TEST(BlockManager, AllowPolicyKeepsBothBlocksAndDuplicateGoesToReset) {
  auto m = make_manager(4, DuplicatePolicy::kAllow);
  auto primary = register_one(m, seq(0));
  auto dup = register_one(m, seq(0));
  EXPECT_NE(primary.block_id(), dup.block_id());
  EXPECT_EQ(dup.sequence_hash(), seq(0));
  EXPECT_EQ(primary.use_count(), 1U);
  EXPECT_EQ(dup.use_count(), 1U);
  auto c = m.pool_counts();
  EXPECT_EQ(c.immutable_out, 2U);
  EXPECT_EQ(c.reset, 2U);
  expect_balanced(m);

  // Matching returns the primary.
  {
    auto matched = m.match_blocks(std::vector{seq(0)});
    ASSERT_EQ(matched.size(), 1U);
    EXPECT_EQ(matched[0], primary);
  }
  // Dropping the duplicate returns it to reset, not to the inactive pool.
  dup = primary;  // releases the duplicate block
  c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.reset, 3U);
  EXPECT_EQ(c.immutable_out, 1U);
  expect_balanced(m);
  // Dropping the primary moves it to inactive.
  primary = dup;
  {
    auto gone = std::move(primary);
    auto gone2 = std::move(dup);
  }
  c = m.pool_counts();
  EXPECT_EQ(c.inactive, 1U);
  EXPECT_EQ(c.reset, 3U);
  expect_balanced(m);
}

TEST(BlockManager, AllowPolicyDuplicateOfAnInactiveBlock) {
  auto m = make_manager(3, DuplicatePolicy::kAllow);
  BlockId primary_id = 0;
  { primary_id = register_one(m, seq(0)).block_id(); }
  auto dup = register_one(m, seq(0));
  EXPECT_NE(dup.block_id(), primary_id);
  EXPECT_EQ(m.pool_counts().inactive, 1U);  // the primary stays inactive
  auto matched = m.match_blocks(std::vector{seq(0)});
  ASSERT_EQ(matched.size(), 1U);
  EXPECT_EQ(matched[0].block_id(), primary_id);
  EXPECT_EQ(m.pool_counts().inactive, 0U);
  expect_balanced(m);
}

TEST(BlockManager, AllowPolicyDuplicateOutlivesEvictedPrimary) {
  auto m = make_manager(2, DuplicatePolicy::kAllow);
  auto dup = [&] {
    auto primary = register_one(m, seq(0));
    return register_one(m, seq(0));
  }();                                // primary dropped -> inactive
  auto taken = m.allocate_blocks(1);  // evicts the primary
  ASSERT_TRUE(taken);
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{false});
  EXPECT_EQ(dup.sequence_hash(), seq(0));
  expect_balanced(m);
  { auto gone = std::move(dup); }
  EXPECT_EQ(m.pool_counts().reset, 1U);
  EXPECT_EQ(m.pool_counts().inactive, 0U);
  expect_balanced(m);
}

TEST(BlockManager, RejectPolicyReturnsTheExistingBlockAndFreesTheNewOne) {
  auto m = make_manager(4, DuplicatePolicy::kReject);
  auto existing = register_one(m, seq(0));
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  const BlockId new_id = blocks->front().block_id();
  ASSERT_NE(new_id, existing.block_id());
  EXPECT_EQ(m.pool_counts().reset, 2U);
  auto result = m.register_block(stage_ok(std::move(blocks->front()), seq(0)));
  EXPECT_EQ(result.block_id(), existing.block_id());
  EXPECT_EQ(result, existing);
  EXPECT_EQ(existing.use_count(), 2U);
  const auto c = m.pool_counts();
  EXPECT_EQ(c.reset, 3U);  // the new block was freed
  EXPECT_EQ(c.mutable_out, 0U);
  EXPECT_EQ(c.immutable_out, 1U);
  expect_balanced(m);
}

TEST(BlockManager, RejectPolicyRevivesAnInactiveExistingBlock) {
  auto m = make_manager(3, DuplicatePolicy::kReject);
  BlockId existing_id = 0;
  { existing_id = register_one(m, seq(0)).block_id(); }
  ASSERT_EQ(m.pool_counts().inactive, 1U);
  auto result = register_one(m, seq(0));
  EXPECT_EQ(result.block_id(), existing_id);
  EXPECT_EQ(result.use_count(), 1U);
  auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.reset, 2U);
  EXPECT_EQ(c.immutable_out, 1U);
  expect_balanced(m);
  { auto gone = std::move(result); }
  c = m.pool_counts();
  EXPECT_EQ(c.inactive, 1U);
  EXPECT_EQ(c.reset, 2U);
  expect_balanced(m);
}

TEST(BlockManager, RegisteringABlockOfAnotherManagerThrowsAndKeepsTheBlock) {
  auto m1 = make_manager(2);
  auto m2 = BlockManager<G1>::builder().block_count(2).block_size(16).pool_name("other").build();
  auto blocks = m2.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  auto foreign = stage_ok(std::move(blocks->front()), seq(0));
  const BlockId id = foreign.block_id();
  expect_usage_error([&] { (void)m1.register_block(std::move(foreign)); },
                     {"belongs to another manager", "other"});
  ASSERT_TRUE(foreign.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(foreign.block_id(), id);
  EXPECT_EQ(foreign.sequence_hash(), seq(0));
  EXPECT_FALSE(m1.registry()->is_present<G1>(seq(0)));
  EXPECT_FALSE(m2.registry()->is_present<G1>(seq(0)));
  EXPECT_EQ(m1.pool_counts().in_use, 0U);
  EXPECT_EQ(m2.pool_counts().in_use, 1U);
  expect_balanced(m1);
  expect_balanced(m2);
  // Dropping it returns it to its own pool.
  { auto gone = std::move(foreign); }
  EXPECT_EQ(m2.pool_counts().reset, 2U);
  EXPECT_EQ(m1.pool_counts().reset, 2U);
  expect_balanced(m1);
  expect_balanced(m2);
  // And registering it with its own manager still works.
  auto again = m2.allocate_blocks(1);
  ASSERT_TRUE(again);
  auto ok = m2.register_block(stage_ok(std::move(again->front()), seq(0)));
  EXPECT_TRUE(m2.registry()->is_present<G1>(seq(0)));
  expect_balanced(m2);
}

TEST(BlockManager, OwnsTellsItsBlocksFromOthersAndMovedFromHandles) {
  auto m1 = make_manager(4);
  auto m2 = make_manager(4);
  auto mutable_blocks = m1.allocate_blocks(2);
  ASSERT_TRUE(mutable_blocks);
  EXPECT_TRUE(m1.owns((*mutable_blocks)[0]));
  EXPECT_FALSE(m2.owns((*mutable_blocks)[0]));
  auto complete = stage_ok(std::move((*mutable_blocks)[0]), seq(0));
  EXPECT_FALSE(m1.owns((*mutable_blocks)[0]));  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(m1.owns(complete));
  EXPECT_FALSE(m2.owns(complete));
  auto immutable = m1.register_block(std::move(complete));
  EXPECT_FALSE(m1.owns(complete));  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(m1.owns(immutable));
  EXPECT_FALSE(m2.owns(immutable));
  auto taken = std::move(immutable);
  EXPECT_FALSE(m1.owns(immutable));  // NOLINT(bugprone-use-after-move)
  mutable_blocks.reset();
  expect_balanced(m1);
  expect_balanced(m2);
}

TEST(BlockManager, RegisterBlocksRegistersAllInOrder) {
  auto m = make_manager(4);
  const auto h = chain(3);
  auto blocks = m.allocate_blocks(3);
  ASSERT_TRUE(blocks);
  std::vector<CompleteBlock<G1>> staged;
  for (std::size_t i = 0; i < 3; ++i) staged.push_back(stage_ok(std::move((*blocks)[i]), h[i]));
  auto imm = m.register_blocks(std::move(staged));
  ASSERT_EQ(imm.size(), 3U);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(imm[i].sequence_hash(), h[i]);
  EXPECT_EQ(m.match_blocks(h).size(), 3U);
  expect_balanced(m);
}

TEST(BlockManager, AllocateBlockTakesOneBlockLikeAllocateBlocksOfOne) {
  auto m = make_manager(2);
  auto a = m.allocate_block();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->block_id(), 0u);  // the reset pool hands out block 0 first
  EXPECT_EQ(m.pool_counts().mutable_out, 1u);
  // Fill the pool with one cached block and one in use; the next single
  // allocation must evict the cached one.
  auto cached = m.register_block(stage_ok(std::move(*a), root(1)));
  auto held = m.register_block(stage_ok(std::move(*m.allocate_block()), root(2)));
  const BlockId cached_id = cached.block_id();
  { auto drop = std::move(cached); }
  EXPECT_EQ(m.pool_counts().inactive, 1u);
  auto b = m.allocate_block();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->block_id(), cached_id);
  EXPECT_EQ(present(m, {root(1)}), std::vector<bool>{false});
  // Nothing left: nullopt, and nothing changed.
  const PoolCounts before = m.pool_counts();
  EXPECT_FALSE(m.allocate_block().has_value());
  const PoolCounts after = m.pool_counts();
  EXPECT_EQ(after.reset, before.reset);
  EXPECT_EQ(after.in_use, before.in_use);
  b.reset();
  expect_balanced(m);
  EXPECT_EQ(m.audit(), "");
}

TEST(BlockManager, RegisterBlocksWithTheSameHashTwiceInOneBatch) {
  for (const auto policy : {DuplicatePolicy::kAllow, DuplicatePolicy::kReject}) {
    SCOPED_TRACE(policy == DuplicatePolicy::kAllow ? "allow" : "reject");
    auto m = make_manager(4, policy);
    auto blocks = *m.allocate_blocks(3);
    std::vector<CompleteBlock<G1>> staged;
    staged.push_back(stage_ok(std::move(blocks[0]), root(7)));
    staged.push_back(stage_ok(std::move(blocks[1]), root(8)));
    staged.push_back(stage_ok(std::move(blocks[2]), root(7)));
    const BlockId first = staged[0].block_id();
    const BlockId third = staged[2].block_id();
    auto got = m.register_blocks(std::move(staged));
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].block_id(), first);
    if (policy == DuplicatePolicy::kAllow) {
      EXPECT_EQ(got[2].block_id(), third);  // a duplicate, kept until dropped
      EXPECT_EQ(m.pool_counts().in_use, 3u);
    } else {
      EXPECT_EQ(got[2].block_id(), first);  // the batch's own first block
      EXPECT_EQ(got[0].use_count(), 2u);
      EXPECT_EQ(m.pool_counts().in_use, 2u);
      EXPECT_EQ(m.pool_counts().reset, 2u);  // the rejected block went back
    }
    got.clear();
    EXPECT_EQ(m.pool_counts().inactive, 2u);
    EXPECT_EQ(present(m, {root(7), root(8)}), (std::vector<bool>{true, true}));
    expect_balanced(m);
    EXPECT_EQ(m.audit(), "");
  }
}

TEST(BlockManager, RegisterBlocksChecksAllBeforeRegisteringAny) {
  auto m1 = make_manager(4);
  auto m2 = BlockManager<G1>::builder().block_count(2).block_size(16).pool_name("other").build();
  auto own = m1.allocate_blocks(2);
  auto theirs = m2.allocate_blocks(1);
  ASSERT_TRUE(own && theirs);
  std::vector<CompleteBlock<G1>> staged;
  staged.push_back(stage_ok(std::move((*own)[0]), seq(0)));
  staged.push_back(stage_ok(std::move((*own)[1]), seq(1)));
  staged.push_back(stage_ok(std::move(theirs->front()), seq(2)));
  expect_usage_error([&] { (void)m1.register_blocks(std::move(staged)); },
                     {"register_blocks", "belongs to another manager"});
  ASSERT_EQ(staged.size(), 3U);  // NOLINT(bugprone-use-after-move)
  for (const auto& b : staged) EXPECT_TRUE(b.valid());
  EXPECT_EQ(present(m1, chain(3)), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(m1.pool_counts().mutable_out, 2U);
  EXPECT_EQ(m1.pool_counts().immutable_out, 0U);
  expect_balanced(m1);
  expect_balanced(m2);
  staged.clear();
  EXPECT_EQ(m1.pool_counts().reset, 4U);
  EXPECT_EQ(m2.pool_counts().reset, 2U);
  expect_balanced(m1);
  expect_balanced(m2);
}

TEST(BlockManager, RegisterBlocksRejectsAMovedFromBlock) {
  auto m = make_manager(2);
  auto blocks = m.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  std::vector<CompleteBlock<G1>> staged;
  staged.push_back(stage_ok(std::move((*blocks)[0]), seq(0)));
  staged.push_back(stage_ok(std::move((*blocks)[1]), seq(1)));
  CompleteBlock<G1> taken = std::move(staged[1]);
  expect_usage_error([&] { (void)m.register_blocks(std::move(staged)); },
                     {"register_blocks", "moved from"});
  EXPECT_TRUE(staged[0].valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(m.registry()->is_present<G1>(seq(0)));
  expect_balanced(m);
}

// ---- Moved from ----------------------------------------------------------

// Every member of a moved-from manager throws UsageError naming the call;
// blocks handed out before the move stay with the manager moved into.
TEST(BlockManager, MovedFromManagerThrowsOnEveryMember) {
  auto src = make_manager(4);
  auto held = make_registered(src, chain(2));
  auto dst = std::move(src);
  EXPECT_FALSE(src.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(dst.valid());

  auto check = [&](const char* call, auto&& f) {
    SCOPED_TRACE(call);
    expect_usage_error(f, {call, "moved from"});
  };
  const auto hashes = chain(2);
  check("allocate_blocks", [&] { (void)src.allocate_blocks(1); });
  check("allocate_block", [&] { (void)src.allocate_block(); });
  check("allocate_at_most", [&] { (void)src.allocate_at_most(1); });
  check("match_blocks", [&] { (void)src.match_blocks(hashes); });
  check("scan_matches", [&] { (void)src.scan_matches(hashes); });
  check("reset_inactive_pool", [&] { (void)src.reset_inactive_pool(); });
  check("available_blocks", [&] { (void)src.available_blocks(); });
  check("total_blocks", [&] { (void)src.total_blocks(); });
  check("block_size", [&] { (void)src.block_size(); });
  check("pool_counts", [&] { (void)src.pool_counts(); });
  check("audit", [&] { (void)src.audit(); });
  check("pool_name", [&] { (void)src.pool_name(); });
  check("registry", [&] { (void)src.registry(); });
  check("metrics_registry", [&] { (void)src.metrics_registry(); });
  check("eviction_policy", [&] { (void)src.eviction_policy(); });
  check("duplicate_policy", [&] { (void)src.duplicate_policy(); });
  check("owns", [&] { (void)src.owns(held[0]); });
  {
    auto block = dst.allocate_blocks(1);
    ASSERT_TRUE(block);
    auto staged = stage_ok(std::move(block->front()), seq(5));
    check("register_block", [&] { (void)src.register_block(std::move(staged)); });
    EXPECT_TRUE(staged.valid());  // NOLINT(bugprone-use-after-move): left with the caller
    std::vector<CompleteBlock<G1>> batch;
    batch.push_back(std::move(staged));
    check("register_blocks", [&] { (void)src.register_blocks(std::move(batch)); });
    EXPECT_EQ(batch.size(), 1U);  // NOLINT(bugprone-use-after-move)
  }
  // Move-assigning into the empty manager makes it usable again.
  auto other = make_manager(2);
  src = std::move(other);
  EXPECT_TRUE(src.valid());
  EXPECT_EQ(src.total_blocks(), 2U);
  expect_balanced(src);

  EXPECT_EQ(dst.pool_counts().in_use, 2U);
  held.clear();
  EXPECT_EQ(dst.pool_counts().inactive, 2U);
  expect_balanced(dst);
}

// ---- Matching ------------------------------------------------------------

TEST(BlockManager, PrefixMatchStopsAtFirstMissScanSkipsIt) {
  auto m = make_manager(4);
  const auto h = chain(3);
  auto a = register_one(m, h[0]);
  auto c = register_one(m, h[2]);
  const std::vector<SequenceHash> query{h[0], h[1], h[2]};

  auto matched = m.match_blocks(query);
  ASSERT_EQ(matched.size(), 1U);
  EXPECT_EQ(matched[0].sequence_hash(), h[0]);

  auto scanned = m.scan_matches(query);
  ASSERT_EQ(scanned.size(), 2U);
  EXPECT_EQ(scanned[0].sequence_hash(), h[0]);
  EXPECT_EQ(scanned[1].sequence_hash(), h[2]);
  EXPECT_EQ(scanned[1], c);

  EXPECT_TRUE(m.match_blocks(std::vector{h[1], h[0]}).empty());
  EXPECT_TRUE(m.match_blocks(std::span<const SequenceHash>{}).empty());
  EXPECT_TRUE(m.scan_matches(std::span<const SequenceHash>{}).empty());
  expect_balanced(m);
}

TEST(BlockManager, MatchRevivesInactiveBlocks) {
  auto m = make_manager(4);
  const auto h = chain(3);
  std::vector<BlockId> ids;
  {
    auto blocks = make_registered(m, h);
    for (const auto& b : blocks) ids.push_back(b.block_id());
  }
  ASSERT_EQ(m.pool_counts().inactive, 3U);
  auto matched = m.match_blocks(h);
  ASSERT_EQ(matched.size(), 3U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(matched[i].block_id(), ids[i]);
    EXPECT_EQ(matched[i].use_count(), 1U);
  }
  auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.immutable_out, 3U);
  EXPECT_EQ(m.available_blocks(), 1U);
  // Revived blocks cannot be evicted.
  auto one = m.allocate_blocks(1);
  ASSERT_TRUE(one);
  EXPECT_FALSE(m.allocate_blocks(1).has_value());
  expect_balanced(m);
  // A second match of the same blocks adds references.
  auto again = m.match_blocks(std::vector{h[0]});
  EXPECT_EQ(matched[0].use_count(), 2U);
  expect_balanced(m);
}

TEST(BlockManager, ScanRevivesInactiveBlocks) {
  auto m = make_manager(2);
  { auto a = register_one(m, seq(0)); }
  auto scanned = m.scan_matches(std::vector{root(999), seq(0)});
  ASSERT_EQ(scanned.size(), 1U);
  EXPECT_EQ(m.pool_counts().inactive, 0U);
  EXPECT_EQ(m.pool_counts().immutable_out, 1U);
  expect_balanced(m);
}

TEST(BlockManager, ResetInactivePoolEvictsAllInactive) {
  auto m = make_manager(5);
  const auto h = chain(4);
  auto held = register_one(m, root(500));
  { auto blocks = make_registered(m, h); }
  ASSERT_EQ(m.pool_counts().inactive, 4U);
  EXPECT_EQ(m.reset_inactive_pool(), 4U);
  EXPECT_EQ(present(m, h), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(present(m, {root(500)}), std::vector<bool>{true});
  const auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.reset, 4U);
  EXPECT_EQ(c.immutable_out, 1U);
  EXPECT_EQ(m.reset_inactive_pool(), 0U);
  expect_balanced(m);
}

TEST(BlockManager, AvailableAndTotalBlocks) {
  auto m = make_manager(6);
  EXPECT_EQ(m.total_blocks(), 6U);
  EXPECT_EQ(m.available_blocks(), 6U);
  auto mut = m.allocate_blocks(2);
  EXPECT_EQ(m.available_blocks(), 4U);
  auto held = register_one(m, seq(0));
  EXPECT_EQ(m.available_blocks(), 3U);
  { auto dropped = register_one(m, seq(1)); }
  EXPECT_EQ(m.available_blocks(), 3U);  // inactive counts as available
  EXPECT_EQ(m.total_blocks(), 6U);
  expect_balanced(m);
}

// ---- Randomized invariants -----------------------------------------------

TEST(BlockManager, RandomizedOperationsKeepTheInvariant) {
  const auto seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const auto policy : {DuplicatePolicy::kAllow, DuplicatePolicy::kReject}) {
    for (const auto eviction :
         {EvictionPolicy::kLru, EvictionPolicy::kLineage, EvictionPolicy::kMultiLevelLru}) {
      auto registry = BlockRegistry::builder()
                          .frequency_tracker(std::make_shared<FrequencyTracker>(256))
                          .build();
      auto m = BlockManager<G1>::builder()
                   .block_count(16)
                   .block_size(4)
                   .duplicate_policy(policy)
                   .eviction(eviction)
                   .registry(registry)
                   .build();
      std::vector<MutableBlock<G1>> mut;
      std::vector<CompleteBlock<G1>> complete;
      std::vector<ImmutableBlock<G1>> imm;
      std::vector<WeakBlock<G1>> weak;
      auto pick = [&](std::size_t n) {
        return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
      };
      auto random_hash = [&] {
        // Short chains over few values, so duplicates and shared prefixes happen.
        return seq(static_cast<std::uint32_t>(pick(4)), static_cast<std::uint32_t>(pick(3)));
      };
      for (int step = 0; step < 2000; ++step) {
        switch (pick(10)) {
          case 0: {
            if (auto b = m.allocate_blocks(1 + pick(3))) {
              for (auto& x : *b) mut.push_back(std::move(x));
            }
            break;
          }
          case 1:
            if (!mut.empty()) {
              const std::size_t i = pick(mut.size());
              complete.push_back(stage_ok(std::move(mut[i]), random_hash()));
              mut.erase(mut.begin() + static_cast<std::ptrdiff_t>(i));
            }
            break;
          case 2:
            if (!complete.empty()) {
              const std::size_t i = pick(complete.size());
              imm.push_back(m.register_block(std::move(complete[i])));
              complete.erase(complete.begin() + static_cast<std::ptrdiff_t>(i));
            }
            break;
          case 3:
            if (!imm.empty())
              imm.erase(imm.begin() + static_cast<std::ptrdiff_t>(pick(imm.size())));
            break;
          case 4:
            if (!mut.empty())
              mut.erase(mut.begin() + static_cast<std::ptrdiff_t>(pick(mut.size())));
            break;
          case 5: {
            const auto c = static_cast<std::uint32_t>(pick(3));
            for (auto& b : m.match_blocks(chain(4, c))) imm.push_back(std::move(b));
            break;
          }
          case 6: {
            const std::vector<SequenceHash> q{random_hash(), random_hash()};
            for (auto& b : m.scan_matches(q)) imm.push_back(std::move(b));
            break;
          }
          case 7:
            if (!imm.empty()) {
              ImmutableBlock<G1> copy = imm[pick(imm.size())];
              weak.push_back(copy.downgrade());
              imm.push_back(std::move(copy));
            }
            break;
          case 8:
            if (!weak.empty()) {
              if (auto up = weak[pick(weak.size())].upgrade()) imm.push_back(std::move(*up));
            }
            if (!complete.empty() && pick(2) == 0) {
              const std::size_t i = pick(complete.size());
              mut.push_back(std::move(complete[i]).reset_to_mutable());
              complete.erase(complete.begin() + static_cast<std::ptrdiff_t>(i));
            }
            break;
          case 9:
            if (pick(10) == 0) (void)m.reset_inactive_pool();
            if (!complete.empty()) complete.pop_back();
            break;
        }
        const std::string audit = m.audit();
        ASSERT_EQ(audit, "") << "step " << step;
        const auto c = m.pool_counts();
        ASSERT_TRUE(c.balanced()) << "step " << step;
        ASSERT_EQ(c.mutable_out, mut.size() + complete.size()) << "step " << step;
      }
      mut.clear();
      complete.clear();
      imm.clear();
      const auto c = m.pool_counts();
      EXPECT_EQ(c.in_use, 0U);
      EXPECT_EQ(c.reset + c.inactive, 16U);
      expect_balanced(m);
    }
  }
}

TEST(BlockManager, ConcurrentWorkersKeepTheInvariant) {
  const auto seed = test::test_seed();
  auto m = make_manager(32);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, &failures, t, seed] {
      std::mt19937 rng(seed + static_cast<unsigned>(t));
      std::vector<ImmutableBlock<G1>> held;
      for (int i = 0; i < 1000; ++i) {
        const auto c = static_cast<std::uint32_t>(rng() % 4);
        const auto h = chain(4, c);
        auto matched = m.match_blocks(h);
        const std::size_t have = matched.size();
        for (auto& b : matched) held.push_back(std::move(b));
        if (have < h.size()) {
          if (auto blocks = m.allocate_blocks(h.size() - have)) {
            for (std::size_t k = 0; k < blocks->size(); ++k) {
              auto staged = std::move((*blocks)[k]).stage(h[have + k], 16);
              if (!staged.ok()) {
                failures++;
                continue;
              }
              held.push_back(m.register_block(std::move(staged).value()));
            }
          }
        }
        if (held.size() > 8 || rng() % 3 == 0) held.clear();
        if (rng() % 50 == 0) (void)m.reset_inactive_pool();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  const auto c = m.pool_counts();
  EXPECT_EQ(c.in_use, 0U);
  expect_balanced(m);
}

}  // namespace block_manager_test
}  // namespace kvbm

namespace kvbm {
namespace block_manager_test {

TEST(BlockManagerAllocateIds, TakesExactlyTheNamedFreeBlocks) {
  auto m = make_manager(8);
  const std::vector<BlockId> ids = {5, 1, 6};
  auto blocks = m.allocate_ids(ids);
  ASSERT_TRUE(blocks.has_value());
  ASSERT_EQ(blocks->size(), 3u);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*blocks)[i].block_id(), ids[i]);
  EXPECT_EQ(m.pool_counts().in_use, 3u);
  expect_balanced(m);
  // Restored blocks register like any other and become matchable.
  const auto h = chain(3, 40);
  std::vector<ImmutableBlock<G1>> registered;
  for (std::size_t i = 0; i < 3; ++i) {
    registered.push_back(m.register_block(stage_ok(std::move((*blocks)[i]), h[i])));
  }
  registered.clear();
  const auto hit = m.match_blocks(h);
  ASSERT_EQ(hit.size(), 3u);
  EXPECT_EQ(hit[0].block_id(), 5u);
  EXPECT_EQ(hit[2].block_id(), 6u);
}

TEST(BlockManagerAllocateIds, AllOrNothingOnABadId) {
  auto m = make_manager(4);
  auto held = m.allocate_ids(std::vector<BlockId>{2});
  ASSERT_TRUE(held.has_value());
  EXPECT_FALSE(m.allocate_ids(std::vector<BlockId>{0, 2}).has_value());  // 2 is not free
  EXPECT_FALSE(m.allocate_ids(std::vector<BlockId>{0, 0}).has_value());  // repeated
  EXPECT_FALSE(m.allocate_ids(std::vector<BlockId>{0, 4}).has_value());  // out of range
  EXPECT_EQ(m.pool_counts().in_use, 1u);
  EXPECT_EQ(m.pool_counts().reset, 3u);
  expect_balanced(m);
  held.reset();
  EXPECT_EQ(m.pool_counts().reset, 4u);
  // The freed ids come back in the order allocate_blocks uses.
  auto all = m.allocate_blocks(4);
  EXPECT_TRUE(all.has_value());
}

}  // namespace block_manager_test
}  // namespace kvbm

namespace kvbm {
namespace block_manager_test {

// A caller out of room waits for a block to leave use instead of polling:
// woken by a release from another thread, by an immutable block going
// inactive too, and told false at the deadline when nothing is released.
TEST(BlockManagerWaitForRelease, WakesOnAReleaseAndTimesOutWithoutOne) {
  using namespace std::chrono_literals;
  auto m = make_manager(2);
  auto held = m.allocate_blocks(2);
  ASSERT_TRUE(held.has_value());
  std::uint64_t seen = m.releases();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.wait_for_release(seen, start + 20ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);

  std::thread releaser([&] {
    // Makes the release likely to come while the caller waits (the wake-up
    // under test); nothing tells when it waits. A release that comes first
    // ends the wait at once: the test passes, testing less.
    std::this_thread::sleep_for(10ms);
    held->pop_back();  // a mutable block back to the reset pool
  });
  EXPECT_TRUE(m.wait_for_release(seen, std::chrono::steady_clock::now() + 30s));
  releaser.join();
  EXPECT_EQ(m.available_blocks(), 1u);

  seen = m.releases();
  std::optional<ImmutableBlock<G1>> registered =
      m.register_block(stage_ok(std::move(held->back()), chain(1, 7)[0]));
  held.reset();
  EXPECT_EQ(m.releases(), seen) << "registering keeps the block in use";
  std::thread dropper([&] { registered.reset(); });
  EXPECT_TRUE(m.wait_for_release(seen, std::chrono::steady_clock::now() + 30s));
  dropper.join();
  expect_balanced(m);
}

}  // namespace block_manager_test
}  // namespace kvbm
