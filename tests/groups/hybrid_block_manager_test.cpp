#include "kvbm/groups/hybrid_block_manager.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm {
namespace hybrid_block_manager_test {

using Manager = HybridBlockManager<G1>;
using Request = HybridRequest<G1>;

constexpr std::uint32_t kBlock = 16;

KvCacheGroupSpec full_group(std::uint32_t id, std::uint32_t b = kBlock) {
  return KvCacheGroupSpec::full(GroupId{id}, b, 1024, {id});
}
KvCacheGroupSpec window_group(std::uint32_t id, std::uint32_t w, std::uint32_t b = kBlock) {
  return KvCacheGroupSpec::sliding_window(GroupId{id}, w, b, 1024, {id});
}
KvCacheGroupSpec state_group(std::uint32_t id, std::uint32_t b = kBlock) {
  return KvCacheGroupSpec::recurrent_state(GroupId{id}, b, 65536, {id});
}

// Every group's pool: consistent and balanced.
void expect_clean(const Manager& m) {
  EXPECT_EQ(m.audit(), "");
  for (std::size_t g = 0; g < m.group_count(); ++g) test::expect_balanced(m.pool(g));
}

// Runs a request over `hashes` from its prefix hit to the end, `step` tokens at a time,
// checking after each allocation that no group holds more than `max_held[g]` blocks.
void run(Manager& m, const std::vector<SequenceHash>& hashes, std::size_t step,
         const std::vector<std::size_t>& max_held = {}) {
  const std::size_t total = hashes.size() * m.hash_block_size();
  Request r = m.start_request(m.find_prefix(hashes, total - 1));
  while (r.computed_tokens() < total && !::testing::Test::HasFailure()) {
    const std::size_t next = std::min(total, r.computed_tokens() + step);
    ASSERT_TRUE(m.allocate(r, next));
    for (std::size_t g = 0; g < max_held.size(); ++g) {
      ASSERT_LE(r.held_blocks(g), max_held[g]) << "group " << g << " at " << next;
    }
    m.commit(r, hashes, next);
    m.release_out_of_reach(r, next);
  }
  m.finish(r, hashes);
  EXPECT_EQ(r.group_count(), 0u);
}

TEST(HybridBlockManager, BuildsOnePoolPerGroupNamedByGroup) {
  Manager m = Manager::builder()
                  .group(full_group(0), 64)
                  .group(window_group(1, 128, 32), 16)
                  .pool_name("G1/model")
                  .build();
  EXPECT_EQ(m.group_count(), 2u);
  EXPECT_EQ(m.pool(0).total_blocks(), 64u);
  EXPECT_EQ(m.pool(1).total_blocks(), 16u);
  EXPECT_EQ(m.pool(1).block_size(), 32u);
  EXPECT_EQ(m.pool(1).pool_name(), "G1/model/group:1:swa128:32");
  EXPECT_EQ(m.hash_block_size(), 16u);
  EXPECT_EQ(m.alignment_tokens(), 32u);
  expect_clean(m);
  EXPECT_THROW((void)Manager::builder().build(), UsageError);
  EXPECT_THROW((void)Manager::builder().group(full_group(1), 8).build(), UsageError);
}

// Groups over pools the caller owns: the manager registers through them (their
// registration hook sees every committed block) and refuses a pool of another block
// size or one given to two groups.
TEST(HybridBlockManager, RunsOverPoolsItDoesNotOwn) {
  std::size_t hooked = 0;
  auto own = [&hooked](std::size_t n) {
    return BlockManager<G1>::builder()
        .block_count(n)
        .block_size(kBlock)
        .on_register([&hooked](const std::vector<ImmutableBlock<G1>>& b) { hooked += b.size(); })
        .build();
  };
  BlockManager<G1> full = own(64);
  BlockManager<G1> window = own(32);
  {
    Manager m =
        Manager::builder().group(full_group(0), full).group(window_group(1, 128), window).build();
    EXPECT_EQ(&m.pool(0), &full);
    EXPECT_EQ(&m.pool(1), &window);
    const auto hashes = test::chain(21);
    run(m, hashes, 16);
    EXPECT_EQ(hooked, 42u) << "every committed block of both groups went through the pools' hook";
    EXPECT_EQ(m.find_prefix(hashes, 21 * 16 - 1).tokens, 320u);
    expect_clean(m);
  }
  test::expect_balanced(full);  // the pools outlive the manager, with their blocks
  EXPECT_EQ(full.pool_counts().inactive, 21u);
  BlockManager<G1> other = BlockManager<G1>::builder().block_count(8).block_size(32).build();
  test::expect_usage_error([&] { (void)Manager::builder().group(full_group(0), other).build(); },
                           {"group 0's pool has blocks of 32 tokens"});
  test::expect_usage_error(
      [&] {
        (void)Manager::builder().group(full_group(0), full).group(full_group(1), full).build();
      },
      {"group 1's pool is another group's too"});
}

TEST(HybridBlockManager, EmptyPoolsFindNothing) {
  Manager m = Manager::builder().group(full_group(0), 32).group(window_group(1, 64), 8).build();
  const auto hashes = test::chain(10);
  const PrefixHit<G1> hit = m.find_prefix(hashes);
  EXPECT_EQ(hit.tokens, 0u);
  EXPECT_EQ(hit.held_blocks(), 0u);
  expect_clean(m);
}

// A second request with the same prompt finds the whole prefix in the full group and
// only the window's tail in the sliding-window group.
TEST(HybridBlockManager, FindPrefixTakesOnlyTheWindowsTail) {
  Manager m = Manager::builder().group(full_group(0), 64).group(window_group(1, 128), 32).build();
  const auto hashes = test::chain(21);  // 336 tokens
  run(m, hashes, 16);
  PrefixHit<G1> hit = m.find_prefix(hashes, 21 * 16 - 1);
  EXPECT_EQ(hit.tokens, 320u);
  EXPECT_EQ(hit.ranges[0], (BlockRange{0, 20}));
  EXPECT_EQ(hit.ranges[1], (BlockRange{12, 20}));
  ASSERT_EQ(hit.blocks[1].size(), 8u);
  const auto keys = m.group_hashes(1, hashes);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(hit.blocks[1][i].sequence_hash(), keys[12 + i]);
  Request r = m.start_request(std::move(hit));
  EXPECT_EQ(r.computed_tokens(), 320u);
  EXPECT_EQ(r.held_range(1), (BlockRange{12, 20}));
  EXPECT_EQ(r.registered_blocks(1), 8u);
  ASSERT_TRUE(m.allocate(r, 336));
  m.commit(r, hashes, 336);
  m.finish(r, hashes);
  expect_clean(m);
}

// Blocks registered under group A are never served for group B: not by B's pool, not
// when a careless caller registers A's keys in B's pool.
TEST(HybridBlockManager, ABlockOfOneGroupIsNeverServedForAnother) {
  Manager m = Manager::builder().group(full_group(0), 32).group(full_group(1), 32).build();
  const auto hashes = test::chain(8);
  const auto keys_a = m.group_hashes(0, hashes);
  const auto keys_b = m.group_hashes(1, hashes);
  for (std::size_t i = 0; i < keys_a.size(); ++i) EXPECT_NE(keys_a[i].value(), keys_b[i].value());
  { auto held = test::make_registered(m.pool(0), keys_a); }  // group A holds the prefix
  EXPECT_TRUE(m.pool(1).match_blocks(keys_a).empty());
  EXPECT_EQ(m.find_prefix(hashes).tokens, 0u);
  { auto wrong = test::make_registered(m.pool(1), keys_a); }  // A's keys in B's pool
  EXPECT_EQ(m.find_prefix(hashes).tokens, 0u);
  { auto right = test::make_registered(m.pool(1), keys_b); }
  PrefixHit<G1> hit = m.find_prefix(hashes);
  EXPECT_EQ(hit.tokens, 128u);
  for (const auto& b : hit.blocks[1]) EXPECT_TRUE(m.pool(1).owns(b));
  hit = PrefixHit<G1>{};
  expect_clean(m);
}

// A hit from another manager cannot start a request here.
TEST(HybridBlockManager, RefusesBlocksOfAnotherManager) {
  Manager a = Manager::builder().group(full_group(0), 16).build();
  Manager b = Manager::builder().group(full_group(0), 16).build();
  const auto hashes = test::chain(2);
  { auto held = test::make_registered(a.pool(0), a.group_hashes(0, hashes)); }
  PrefixHit<G1> hit = a.find_prefix(hashes);
  ASSERT_EQ(hit.tokens, 32u);
  EXPECT_THROW((void)b.start_request(std::move(hit)), UsageError);
  hit = PrefixHit<G1>{};
  expect_clean(a);
  expect_clean(b);
}

// One group's pool is short: nothing is taken from any pool, nothing cached is evicted.
TEST(HybridBlockManager, AllocationIsAllOrNothingAcrossGroups) {
  Manager m = Manager::builder().group(full_group(0), 100).group(window_group(1, 64), 12).build();
  // Fill both pools with cached blocks of another prompt, then let a request hold 8 blocks of
  // each: group 1 has 4 blocks left, group 0 92 (all cached).
  run(m, test::chain(100, 9), 64);
  ASSERT_EQ(m.pool(0).pool_counts().inactive, 100u);
  Request hold = m.start_request();
  ASSERT_TRUE(m.allocate(hold, 16 * 8));
  const PoolCounts before0 = m.pool(0).pool_counts();
  const PoolCounts before1 = m.pool(1).pool_counts();
  ASSERT_EQ(before0.inactive, 92u);
  Request r = m.start_request();
  EXPECT_FALSE(m.allocate(r, 16 * 6));  // group 1 would need 6 of its 4
  EXPECT_EQ(r.held_blocks(0), 0u);
  EXPECT_EQ(r.held_blocks(1), 0u);
  EXPECT_EQ(m.pool(0).pool_counts().inactive, before0.inactive);  // nothing evicted
  EXPECT_EQ(m.pool(0).pool_counts().in_use, before0.in_use);
  EXPECT_EQ(m.pool(1).pool_counts().in_use, before1.in_use);
  EXPECT_EQ(m.pool(1).pool_counts().inactive, before1.inactive);
  expect_clean(m);
  EXPECT_TRUE(m.allocate(r, 16 * 4));
  EXPECT_EQ(r.held_blocks(1), 4u);
  EXPECT_THROW((void)m.allocate(r, 16 * 17), UsageError);  // more than the pool holds: misuse
  m.finish(r);
  m.finish(hold);
  expect_clean(m);
}

// A 32k-token request with a 128-token window and 16-token blocks holds at most 9 blocks
// of the sliding-window group while it prefills (16 tokens a step) and decodes.
TEST(HybridBlockManager, LongRequestHoldsOWindowBlocks) {
  constexpr std::size_t kPrompt = 32768;
  constexpr std::size_t kDecode = 256;
  constexpr std::size_t kBlocks = (kPrompt + kDecode) / kBlock;
  Manager m =
      Manager::builder().group(full_group(0), kBlocks + 8).group(window_group(1, 128), 12).build();
  const auto hashes = test::chain(kBlocks);
  Request r = m.start_request(m.find_prefix(hashes, kPrompt - 1));
  std::size_t most = 0;
  auto step = [&](std::size_t next) {
    ASSERT_TRUE(m.allocate(r, next));
    most = std::max(most, r.held_blocks(1));
    ASSERT_LE(r.held_blocks(1), 9u) << "at " << next << " tokens";
    m.commit(r, hashes, next);
    m.release_out_of_reach(r, next);
  };
  while (r.computed_tokens() < kPrompt && !HasFailure()) step(r.computed_tokens() + kBlock);
  while (r.computed_tokens() < kPrompt + kDecode && !HasFailure()) {
    step(r.computed_tokens() + 1);
  }
  EXPECT_EQ(most, 9u);
  EXPECT_EQ(r.held_blocks(0), kBlocks);
  m.finish(r, hashes);
  expect_clean(m);
  // The window's tail stayed cached: the whole sequence is a hit, reading 8 window blocks.
  PrefixHit<G1> hit = m.find_prefix(hashes);
  EXPECT_EQ(hit.tokens, kPrompt + kDecode);
  EXPECT_EQ(hit.blocks[1].size(), 8u);
  hit = PrefixHit<G1>{};
  expect_clean(m);
}

// The snapshot policy decides which recurrent-state blocks stay cached, and so where a
// later prompt can cut.
TEST(HybridBlockManager, SnapshotPolicyDecidesWhichStatesStay) {
  struct Case {
    SnapshotPolicy policy;
    std::size_t cached;  // state blocks cached after a 10-block request
    std::size_t cut;     // the hit of the same prompt, 159 tokens at most
    std::size_t whole;   // the hit of the same prompt, 160 tokens at most
  };
  const Case cases[] = {{SnapshotPolicy::every_block(), 10, 144, 160},
                        {SnapshotPolicy::every_kth_block(4), 2, 128, 128},  // blocks 3 and 7
                        {SnapshotPolicy::request_end(), 1, 0, 160}};
  const auto hashes = test::chain(10);
  for (const Case& c : cases) {
    Manager m = Manager::builder()
                    .group(full_group(0), 32)
                    .group(state_group(1), 16)
                    .snapshot_policy(c.policy)
                    .build();
    run(m, hashes, 16, {10, 2});
    EXPECT_EQ(m.pool(1).pool_counts().inactive, c.cached) << static_cast<int>(c.policy.kind);
    EXPECT_EQ(m.find_prefix(hashes, 159).tokens, c.cut) << static_cast<int>(c.policy.kind);
    EXPECT_EQ(m.find_prefix(hashes).tokens, c.whole) << static_cast<int>(c.policy.kind);
    PrefixHit<G1> hit = m.find_prefix(hashes);
    EXPECT_EQ(hit.blocks[1].size(), 1u);  // one snapshot, not the prefix
    hit = PrefixHit<G1>{};
    expect_clean(m);
  }
}

// SnapshotPolicy::step_end() (vLLM's "align" mode): a step of four blocks takes one
// recurrent-state block, for its end; the request holds the live state and, until its
// next step is allocated, the previous one; only ends on a block boundary are registered.
TEST(HybridBlockManager, StepEndTakesOnlyTheStateAtEachStepsEnd) {
  Manager m = Manager::builder()
                  .group(full_group(0), 32)
                  .group(state_group(1), 16)
                  .snapshot_policy(SnapshotPolicy::step_end())
                  .build();
  const auto hashes = test::chain(10);  // 160 tokens
  Request r = m.start_request();
  ASSERT_TRUE(m.allocate(r, 64));
  EXPECT_EQ(r.held_blocks(0), 4u);
  EXPECT_EQ(r.held_blocks(1), 1u);  // block 3 only; 0..2 are holes
  EXPECT_EQ(r.held_range(1), (BlockRange{0, 4}));
  EXPECT_FALSE(r.holds_block(1, 1));
  EXPECT_TRUE(r.holds_block(1, 3));
  EXPECT_THROW((void)r.block_id(1, 1), UsageError);
  EXPECT_NO_THROW((void)r.block_id(1, 3));
  m.commit(r, hashes, 64);
  EXPECT_EQ(r.registered_blocks(1), 1u);
  ASSERT_TRUE(m.allocate(r, 128));
  EXPECT_EQ(r.held_blocks(1), 2u);  // 3 (the state the step reads) and 7
  EXPECT_EQ(m.pool(1).pool_counts().in_use, 2u);
  m.commit(r, hashes, 128);
  ASSERT_TRUE(m.allocate(r, 160));
  EXPECT_EQ(r.held_blocks(1), 2u);  // 7 and 9: 3 went back once out of reach
  EXPECT_EQ(r.held_range(1), (BlockRange{7, 10}));
  m.commit(r, hashes, 160);
  m.finish(r, hashes);
  EXPECT_EQ(m.pool(1).pool_counts().inactive, 3u);  // blocks 3, 7 and 9
  EXPECT_EQ(m.find_prefix(hashes, 159).tokens, 128u);
  EXPECT_EQ(m.find_prefix(hashes, 127).tokens, 64u);
  EXPECT_EQ(m.find_prefix(hashes).tokens, 160u);
  expect_clean(m);
}

// A step that ends inside a block leaves that block's state mid-block: it is never
// registered, not even when a later step passes the block's end.
TEST(HybridBlockManager, StepEndRegistersNoStateAStepPassedOver) {
  Manager m = Manager::builder()
                  .group(full_group(0), 32)
                  .group(state_group(1), 16)
                  .snapshot_policy(SnapshotPolicy::step_end())
                  .build();
  const auto hashes = test::chain(10);
  run(m, hashes, 40, {10, 2});                      // steps end at 40, 80, 120, 160
  EXPECT_EQ(m.pool(1).pool_counts().inactive, 2u);  // blocks 4 (80) and 9 (160)
  EXPECT_EQ(m.find_prefix(hashes, 159).tokens, 80u);
  EXPECT_EQ(m.find_prefix(hashes, 79).tokens, 0u);
  expect_clean(m);
  // With steps of one block it is every_block().
  Manager one = Manager::builder()
                    .group(full_group(0), 32)
                    .group(state_group(1), 16)
                    .snapshot_policy(SnapshotPolicy::step_end())
                    .build();
  run(one, hashes, 16, {10, 2});
  EXPECT_EQ(one.pool(1).pool_counts().inactive, 10u);
  EXPECT_EQ(one.find_prefix(hashes, 159).tokens, 144u);
  expect_clean(one);
}

// Blocks of 16 and 32 tokens: the sequence is hashed at 16, cuts fall on multiples of 32.
TEST(HybridBlockManager, DifferentBlockSizesShareOneHashChain) {
  Manager m =
      Manager::builder().group(full_group(0, 16), 64).group(window_group(1, 64, 32), 16).build();
  const auto hashes = test::chain(13);  // 208 tokens: 6 full blocks of 32
  EXPECT_EQ(m.group_hashes(1, hashes).size(), 6u);
  run(m, hashes, 48, {13, 4});
  PrefixHit<G1> hit = m.find_prefix(hashes);
  EXPECT_EQ(hit.tokens, 192u);
  EXPECT_EQ(hit.ranges[1], (BlockRange{4, 6}));  // ceil(63 / 32) = 2 blocks of 32
  hit = PrefixHit<G1>{};
  expect_clean(m);
}

TEST(HybridBlockManager, MisuseSaysWhatToDo) {
  Manager m = Manager::builder().group(full_group(0), 8).group(window_group(1, 32), 8).build();
  const auto hashes = test::chain(4);
  Request r = m.start_request();
  ASSERT_TRUE(m.allocate(r, 32));
  EXPECT_THROW(m.commit(r, hashes, 64), UsageError);  // computed past what was allocated
  m.commit(r, hashes, 32);
  EXPECT_THROW(m.commit(r, hashes, 16), UsageError);  // computed tokens never shrink
  EXPECT_THROW((void)r.block_id(0, 5), UsageError);
  EXPECT_EQ(r.block_id(0, 1), r.block_id(0, 1));
  m.finish(r);
  EXPECT_THROW((void)m.allocate(r, 16), UsageError);  // finished
  expect_clean(m);
}

// Requests on several threads over shared prompts and small pools: allocations fail and
// are abandoned, hits race evictions; every pool ends balanced with nothing in use.
TEST(HybridBlockManager, ConcurrentRequestsKeepEveryPoolBalanced) {
  Manager m = Manager::builder()
                  .group(full_group(0), 64)
                  .group(window_group(1, 48), 24)
                  .group(state_group(2), 12)
                  .build();
  std::vector<std::vector<SequenceHash>> prompts;
  for (std::uint32_t c = 0; c < 6; ++c) prompts.push_back(test::chain(12, 100 + c));
  const std::uint32_t seed = test::test_seed();
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&m, &prompts, seed, t] {
      std::mt19937 rng(seed + t);
      for (int i = 0; i < 200; ++i) {
        const auto& hashes = prompts[rng() % prompts.size()];
        const std::size_t total = hashes.size() * kBlock;
        Request r = m.start_request(m.find_prefix(hashes, total - 1));
        bool ok = true;
        while (ok && r.computed_tokens() < total) {
          const std::size_t next = std::min(total, r.computed_tokens() + 16 * (1 + rng() % 3));
          ok = m.allocate(r, next);
          if (ok) {
            m.commit(r, hashes, next);
            m.release_out_of_reach(r, next);
          }
        }
        if (ok) {
          m.finish(r, hashes);
        } else {
          m.finish(r);  // no room: the request gives everything back
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  expect_clean(m);
  for (std::size_t g = 0; g < m.group_count(); ++g) EXPECT_EQ(m.pool(g).pool_counts().in_use, 0u);
}

// Handles may outlive the manager.
TEST(HybridBlockManager, RequestMayOutliveItsManager) {
  const auto hashes = test::chain(4);
  std::optional<Request> r;
  {
    Manager m = Manager::builder().group(full_group(0), 8).group(state_group(1), 4).build();
    r.emplace(m.start_request());
    ASSERT_TRUE(m.allocate(*r, 64));
    m.commit(*r, hashes, 64);
  }
  r.reset();  // blocks return to pools whose manager is gone
}

}  // namespace hybrid_block_manager_test
}  // namespace kvbm
