#include "kvbm/router/kv_indexer.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "router/router_test_util.h"

namespace kvbm::router {
namespace kv_indexer_test {

using namespace std::chrono_literals;
using test::batch;
using test::cleared;
using test::removed;
using test::stored;

constexpr TierId kG1 = TierId::kG1;
constexpr TierId kG2 = TierId::kG2;
constexpr TierId kG3 = TierId::kG3;
constexpr TierId kG4 = TierId::kG4;

TierBlockCounts tiers(std::size_t g1, std::size_t g2, std::size_t g3, std::size_t g4) {
  return {{g1, g2, g3, g4}};
}

std::string name_of(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

const InstanceOverlap& of(const OverlapScores& s, InstanceId id) {
  for (const auto& o : s.instances) {
    if (o.instance == id) return o;
  }
  ADD_FAILURE() << "instance " << id << " not in the answer";
  static const InstanceOverlap kNone;
  return kNone;
}

TEST(KvIndexer, StoresAndRemovesPerInstanceAndTier) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  EXPECT_EQ(index.apply(a, 0, batch({stored({1, 2, 3})})).status, ApplyStatus::kApplied);
  EXPECT_TRUE(index.holds(a, 2, kG1));
  EXPECT_FALSE(index.holds(a, 2, kG2));
  EXPECT_FALSE(index.holds(b, 2, kG1));
  EXPECT_EQ(index.state(a).blocks, tiers(3, 0, 0, 0));

  const std::vector<std::uint64_t> request{1, 2, 3, 4};
  auto s = index.overlaps(request);
  EXPECT_EQ(s.request_blocks, 4U);
  ASSERT_EQ(s.instances.size(), 2U);
  EXPECT_EQ(of(s, a).prefix_blocks, 3U);
  EXPECT_EQ(of(s, a).per_tier, tiers(3, 0, 0, 0));
  EXPECT_EQ(of(s, b).prefix_blocks, 0U);
  EXPECT_FALSE(of(s, a).stale);

  EXPECT_EQ(index.apply(a, 1, batch({removed({2})})).status, ApplyStatus::kApplied);
  EXPECT_FALSE(index.holds(a, 2, kG1));
  s = index.overlaps(request);
  EXPECT_EQ(of(s, a).prefix_blocks, 1U);  // stops at 2, though 3 is held
  EXPECT_EQ(index.state(a).blocks, tiers(2, 0, 0, 0));

  const auto st = index.stats();
  EXPECT_EQ(st.batches_applied, 2U);
  EXPECT_EQ(st.events_applied, 2U);
  EXPECT_EQ(st.blocks_stored, 3U);
  EXPECT_EQ(st.blocks_removed, 1U);
  EXPECT_EQ(st.distinct_blocks, 2U);
  EXPECT_GT(st.index_bytes, 0U);
  index.apply(b, 0, batch({stored({1, 9})}));
  EXPECT_EQ(index.stats().distinct_blocks, 3U);  // 1 is one entry for both instances
  index.apply(a, 2, batch({cleared()}));
  index.remove_instance(b);
  EXPECT_EQ(index.stats().distinct_blocks, 0U);  // emptied entries leave the table
}

TEST(KvIndexer, BlockCountsInTheFastestTierHoldingIt) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  // 1: G1 and G2 -> G1. 2: G3 and G2 -> G2. 3: DISK and STORAGE (both G3) -> G3.
  index.apply(a, 0,
              batch({stored({1, 2}, "CPU"), stored({1}, "GPU"), stored({2, 3}, "DISK"),
                     stored({3}, "STORAGE")}));
  const std::vector<std::uint64_t> request{1, 2, 3};
  const auto s = index.overlaps(request);
  EXPECT_EQ(of(s, a).per_tier, tiers(1, 1, 1, 0));
  EXPECT_EQ(of(s, a).prefix_blocks, 3U);
  EXPECT_EQ(index.state(a).blocks, tiers(1, 2, 2, 0));  // 3 stored twice in G3: once
  // Removing the G1 copy of 1 leaves its G2 copy.
  index.apply(a, 1, batch({removed({1}, "GPU")}));
  EXPECT_EQ(of(index.overlaps(request), a).per_tier, tiers(0, 2, 1, 0));
}

TEST(KvIndexer, SharedTierCountsForEveryInstanceAfterItsLocalTiers) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0, batch({stored({1, 2}, "REMOTE")}));
  index.apply(b, 0, batch({stored({1}, "GPU")}));
  EXPECT_EQ(index.shared_blocks(kG4), 2U);
  EXPECT_EQ(index.shared_blocks(kG1), 0U);
  EXPECT_TRUE(index.holds(b, 2, kG4));                  // stored by a, held by the cluster
  EXPECT_EQ(index.state(a).blocks, tiers(0, 0, 0, 0));  // shared tiers are not an instance's

  const std::vector<std::uint64_t> request{1, 2, 3};
  auto s = index.overlaps(request);
  EXPECT_EQ(of(s, a).per_tier, tiers(0, 0, 0, 2));
  EXPECT_EQ(of(s, b).per_tier, tiers(1, 0, 0, 1));

  // a clears and leaves: the store still holds the blocks.
  index.apply(a, 1, batch({cleared()}));
  index.remove_instance(a);
  EXPECT_EQ(index.shared_blocks(kG4), 2U);
  EXPECT_EQ(of(index.overlaps(request), b).per_tier, tiers(1, 0, 0, 1));

  // Any instance's removal from the shared tier removes it for all.
  index.apply(b, 1, batch({removed({2}, "REMOTE")}));
  EXPECT_EQ(index.shared_blocks(kG4), 1U);
  EXPECT_EQ(of(index.overlaps(request), b).per_tier, tiers(1, 0, 0, 0));
  EXPECT_TRUE(index.holds(b, 1, kG4));
  EXPECT_EQ(index.stats().removed_unknown_blocks, 0U);
}

TEST(KvIndexer, StoredTwiceIsIdempotentAndUnknownRemovalsAreCounted) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored({1, 2}), stored({2, 1})}));
  EXPECT_EQ(index.state(a).blocks, tiers(2, 0, 0, 0));
  index.apply(a, 1, batch({removed({1, 7}), removed({1}), removed({9}, "REMOTE")}));
  EXPECT_EQ(index.state(a).blocks, tiers(1, 0, 0, 0));
  EXPECT_EQ(index.stats().removed_unknown_blocks, 3U);  // 7, 1 again, 9
}

TEST(KvIndexer, UnknownMediumIsCountedAndIgnored) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto r = index.apply(a, 0, batch({stored({1}, "NPU"), removed({1}, "NPU"), stored({2})}));
  EXPECT_EQ(r.status, ApplyStatus::kApplied);
  EXPECT_EQ(index.stats().unknown_medium_events, 2U);
  EXPECT_EQ(index.stats().events_applied, 1U);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_TRUE(index.holds(a, 2, kG1));
}

TEST(KvIndexer, CustomMediumsAndNoSharedTier) {
  KvIndexerOptions o;
  o.mediums = {{"HBM", kG1}, {"REMOTE", kG4}};
  o.shared_tiers = {};
  KvIndexer index(std::move(o));
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0, batch({stored({1}, "HBM"), stored({2}, "REMOTE"), stored({3}, "GPU")}));
  EXPECT_EQ(index.stats().unknown_medium_events, 1U);  // GPU is not in the map
  EXPECT_TRUE(index.holds(a, 2, kG4));
  EXPECT_FALSE(index.holds(b, 2, kG4));  // G4 is local now
  EXPECT_EQ(index.state(a).blocks, tiers(1, 0, 0, 1));
  const std::vector<std::uint64_t> request{1, 2};
  EXPECT_EQ(of(index.overlaps(request), a).per_tier, tiers(1, 0, 0, 1));
  EXPECT_EQ(of(index.overlaps(request), b).prefix_blocks, 0U);
}

TEST(KvIndexer, AllBlocksClearedDropsEveryLocalTierOfThatInstanceOnly) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0,
              batch({stored({1}), stored({2}, "CPU"), stored({3}, "DISK"), stored({4}, "REMOTE")}));
  index.apply(b, 0, batch({stored({1})}));
  events::AllBlocksCleared gpu_only;
  gpu_only.medium = "GPU";  // an in-process event's medium is ignored, as on the wire
  index.apply(a, 1, batch({gpu_only}));
  EXPECT_EQ(index.state(a).blocks, tiers(0, 0, 0, 0));
  EXPECT_TRUE(index.holds(b, 1, kG1));
  EXPECT_TRUE(index.holds(a, 4, kG4));
  EXPECT_EQ(index.stats().clears, 1U);
}

TEST(KvIndexer, GapHoldsBatchesUntilTheReplayFillsItThenAppliesThemInOrder) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  EXPECT_EQ(index.apply(a, 0, batch({stored({1})})).expected, 1U);

  auto r = index.apply(a, 2, batch({stored({5})}));
  EXPECT_EQ(r.status, ApplyStatus::kGap);
  EXPECT_EQ(r.expected, 1U);
  EXPECT_EQ(r.applied_batches, 0U);
  EXPECT_FALSE(index.holds(a, 5, kG1));  // held, not applied
  auto st = index.state(a);
  EXPECT_EQ(st.stale, StaleReason::kGap);
  EXPECT_EQ(st.held_batches, 1U);
  const std::vector<std::uint64_t> request{1};
  EXPECT_TRUE(index.overlaps(request).instances[0].stale);
  EXPECT_EQ(index.overlaps(request).instances[0].prefix_blocks,
            1U);  // stale entries still reported

  // Batch 3 removes what batch 2 stores: applied out of order, 5 would stay.
  r = index.apply(a, 3, batch({removed({5}), stored({6})}));
  EXPECT_EQ(r.status, ApplyStatus::kGap);
  EXPECT_EQ(index.state(a).held_batches, 2U);

  r = index.apply(a, 1, batch({stored({4})}));  // the replay
  EXPECT_EQ(r.status, ApplyStatus::kApplied);
  EXPECT_EQ(r.applied_batches, 3U);
  EXPECT_EQ(r.expected, 4U);
  st = index.state(a);
  EXPECT_EQ(st.stale, StaleReason::kFresh);
  EXPECT_EQ(st.held_batches, 0U);
  EXPECT_EQ(st.next_sequence, 4U);
  EXPECT_TRUE(index.holds(a, 4, kG1));
  EXPECT_FALSE(index.holds(a, 5, kG1));
  EXPECT_TRUE(index.holds(a, 6, kG1));
  EXPECT_EQ(index.stats().gaps, 1U);
  EXPECT_EQ(index.stats().batches_applied, 4U);
}

TEST(KvIndexer, FillingOneOfTwoHolesLeavesTheInstanceStale) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 2, batch({stored({2})}));
  index.apply(a, 4, batch({stored({4})}));
  EXPECT_EQ(index.apply(a, 0, batch({})).applied_batches, 1U);
  auto r = index.apply(a, 1, batch({}));
  EXPECT_EQ(r.applied_batches, 2U);  // 1 and the held 2
  EXPECT_EQ(r.expected, 3U);
  EXPECT_EQ(index.state(a).stale, StaleReason::kGap);  // 3 still missing
  r = index.apply(a, 3, batch({}));
  EXPECT_EQ(r.applied_batches, 2U);
  EXPECT_EQ(r.expected, 5U);
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
}

TEST(KvIndexer, DuplicateBatchesAreIgnored) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored({1})}));
  index.apply(a, 1, batch({removed({1})}));
  const auto r = index.apply(a, 1, batch({stored({1})}));
  EXPECT_EQ(r.status, ApplyStatus::kDuplicate);
  EXPECT_EQ(r.expected, 2U);
  EXPECT_EQ(r.applied_batches, 0U);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_EQ(index.stats().duplicate_batches, 1U);
}

TEST(KvIndexer, SequenceZeroAfterALaterOneIsARestart) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0, batch({stored({1, 2}), stored({3}, "REMOTE")}));
  index.apply(b, 0, batch({stored({1})}));
  index.apply(a, 1, batch({}));
  index.apply(a, 5, batch({stored({9})}));  // held after a gap
  const auto r = index.apply(a, 0, batch({stored({7})}));
  EXPECT_EQ(r.status, ApplyStatus::kRestart);
  EXPECT_EQ(r.expected, 1U);
  EXPECT_EQ(r.applied_batches, 1U);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_TRUE(index.holds(a, 7, kG1));
  EXPECT_FALSE(index.holds(a, 9, kG1));  // the held batch went with the old run
  EXPECT_TRUE(index.holds(b, 1, kG1));
  EXPECT_TRUE(index.holds(b, 3, kG4));  // the store did not restart
  const auto st = index.state(a);
  EXPECT_EQ(st.stale, StaleReason::kFresh);
  EXPECT_EQ(st.held_batches, 0U);
  EXPECT_EQ(st.blocks, tiers(1, 0, 0, 0));
  EXPECT_EQ(index.stats().restarts, 1U);
}

TEST(KvIndexer, ResyncDropsEntriesAndAppliesTheHeldBatches) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored({1, 2})}));
  index.apply(a, 3, batch({stored({3})}));
  index.apply(a, 4, batch({removed({3}), stored({4})}));
  index.resync(a);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_FALSE(index.holds(a, 3, kG1));
  EXPECT_TRUE(index.holds(a, 4, kG1));
  const auto st = index.state(a);
  EXPECT_EQ(st.stale, StaleReason::kFresh);
  EXPECT_EQ(st.next_sequence, 5U);
  EXPECT_EQ(st.held_batches, 0U);
  EXPECT_EQ(index.stats().resyncs, 1U);
  EXPECT_EQ(index.apply(a, 5, batch({})).status, ApplyStatus::kApplied);
}

TEST(KvIndexer, ResyncResumesWhereItIsTold) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored({1})}));
  index.apply(a, 3, batch({stored({3})}));
  index.apply(a, 5, batch({stored({5})}));
  // Batch 1 did not decode: go on after it; the held 3 and 5 come back.
  index.resync(a, 4);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_FALSE(index.holds(a, 3, kG1));  // held below the resume point: dropped
  EXPECT_TRUE(index.holds(a, 5, kG1));
  EXPECT_EQ(index.state(a).next_sequence, 6U);
  EXPECT_EQ(index.apply(a, 6, batch({})).status, ApplyStatus::kApplied);

  // Nothing held, a resume point: the instance waits for exactly that batch.
  index.resync(a, 10);
  EXPECT_EQ(index.state(a).next_sequence, 10U);
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_EQ(index.apply(a, 11, batch({stored({11})})).status, ApplyStatus::kGap);

  // Nothing held, no resume point: whatever comes next is taken as in order.
  const auto b = index.add_instance("b");
  index.apply(b, 0, batch({stored({1})}));
  index.resync(b);
  const auto r = index.apply(b, 42, batch({stored({42})}));
  EXPECT_EQ(r.status, ApplyStatus::kApplied);
  EXPECT_EQ(r.expected, 43U);
  EXPECT_TRUE(index.holds(b, 42, kG1));
  EXPECT_FALSE(index.holds(b, 1, kG1));
  EXPECT_EQ(index.stats().resyncs, 3U);
}

TEST(KvIndexer, TooManyHeldBatchesResyncs) {
  KvIndexerOptions o;
  o.max_held_batches = 2;
  KvIndexer index(std::move(o));
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored({1})}));
  EXPECT_EQ(index.apply(a, 5, batch({stored({5})})).status, ApplyStatus::kGap);
  EXPECT_EQ(index.apply(a, 6, batch({stored({6})})).applied_batches, 0U);
  const auto r = index.apply(a, 8, batch({stored({8})}));  // a third: over the limit
  EXPECT_EQ(r.status, ApplyStatus::kGap);
  EXPECT_EQ(r.applied_batches, 3U);
  EXPECT_EQ(r.expected, 9U);
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_TRUE(index.holds(a, 5, kG1) && index.holds(a, 6, kG1) && index.holds(a, 8, kG1));
  EXPECT_EQ(index.stats().resyncs, 1U);
}

TEST(KvIndexer, SilentInstanceIsStaleUntilItsNextBatch) {
  auto clock = std::make_shared<ManualClock>();
  KvIndexerOptions o;
  o.silence_timeout = 100ms;
  o.clock = clock;
  KvIndexer index(std::move(o));
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0, batch({stored({1})}));
  index.apply(a, 1, batch({}));
  clock->advance(99ms);
  index.apply(b, 0, batch({}));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  clock->advance(1ms);
  EXPECT_EQ(index.state(a).stale, StaleReason::kSilent);
  EXPECT_EQ(index.state(b).stale, StaleReason::kFresh);
  const std::vector<std::uint64_t> request{1};
  auto s = index.overlaps(request);
  EXPECT_TRUE(of(s, a).stale);
  EXPECT_EQ(of(s, a).prefix_blocks, 1U);
  EXPECT_FALSE(of(s, b).stale);
  // A duplicate is a sign of life too.
  EXPECT_EQ(index.apply(a, 1, batch({})).status, ApplyStatus::kDuplicate);
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  clock->advance(100ms);
  EXPECT_EQ(index.state(a).stale, StaleReason::kSilent);
  index.apply(a, 2, batch({}));  // a heartbeat
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_FALSE(of(index.overlaps(request), a).stale);
  EXPECT_TRUE(index.holds(a, 1, kG1));
}

TEST(KvIndexer, MarkedStaleUntilTheNextAppliedBatch) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({}));
  index.apply(a, 1, batch({}));
  index.mark_stale(a);
  EXPECT_EQ(index.state(a).stale, StaleReason::kMarked);
  EXPECT_EQ(index.apply(a, 1, batch({})).status, ApplyStatus::kDuplicate);
  EXPECT_EQ(index.state(a).stale, StaleReason::kMarked);
  index.apply(a, 2, batch({}));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
}

TEST(KvIndexer, RemovedInstanceIsGoneAndItsLaneComesBackEmpty) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  index.apply(a, 0, batch({stored({1, 2}), stored({3}, "CPU")}));
  index.remove_instance(a);
  EXPECT_EQ(index.instances(), std::vector<InstanceId>{b});
  EXPECT_FALSE(index.find_instance("a").has_value());
  EXPECT_EQ(index.find_instance("b"), b);
  EXPECT_FALSE(index.holds(a, 1, kG1));
  EXPECT_THROW(index.apply(a, 1, batch({})), UsageError);
  EXPECT_THROW(index.remove_instance(a), UsageError);
  const std::vector<std::uint64_t> request{1, 2};
  EXPECT_EQ(index.overlaps(request).instances.size(), 1U);

  // The same name again: a new id, holding nothing (it reuses a's lane).
  const auto a2 = index.add_instance("a");
  EXPECT_NE(a2, a);
  EXPECT_FALSE(index.holds(a2, 1, kG1));
  EXPECT_FALSE(index.holds(a2, 3, kG2));
  EXPECT_EQ(of(index.overlaps(request), a2).prefix_blocks, 0U);
  EXPECT_EQ(index.state(a2).next_sequence, 0U);
  EXPECT_EQ(index.state(a2).blocks, tiers(0, 0, 0, 0));
}

TEST(KvIndexer, MisuseThrowsUsageError) {
  KvIndexer index;
  EXPECT_THROW((void)index.add_instance(""), UsageError);
  (void)index.add_instance("a");
  EXPECT_THROW((void)index.add_instance("a"), UsageError);
  EXPECT_THROW((void)index.state(7), UsageError);
  EXPECT_THROW(index.apply(7, 0, batch({})), UsageError);
  KvIndexerOptions bad;
  bad.shared_tiers = {static_cast<TierId>(0)};
  EXPECT_THROW(KvIndexer{std::move(bad)}, UsageError);
  KvIndexerOptions neg;
  neg.silence_timeout = -1ms;
  EXPECT_THROW(KvIndexer{std::move(neg)}, UsageError);
}

TEST(KvIndexer, EmptyRequestAndNoInstances) {
  KvIndexer index;
  EXPECT_TRUE(index.overlaps({}).instances.empty());
  const auto a = index.add_instance("a");
  const auto s = index.overlaps({});
  ASSERT_EQ(s.instances.size(), 1U);
  EXPECT_EQ(s.instances[0].instance, a);
  EXPECT_EQ(s.instances[0].prefix_blocks, 0U);
}

// One writer applies while readers query: every answer is a state the
// writer passed through (the prefix only grows here), never a torn one.
TEST(KvIndexer, ReadersShareTheIndexWhileAWriterApplies) {
  KvIndexer index;
  const auto a = index.add_instance("a");
  constexpr std::uint64_t kBlocks = 2000;
  std::vector<std::uint64_t> request(kBlocks);
  for (std::uint64_t i = 0; i < kBlocks; ++i) request[i] = 1000 + i;
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      std::size_t last = 0;
      while (!done.load()) {
        const auto s = index.overlaps(request);
        const std::size_t now = s.instances.at(0).prefix_blocks;
        if (now < last || s.instances[0].per_tier[kG1] + s.instances[0].per_tier[kG2] != now) ++bad;
        last = now;
      }
    });
  }
  for (std::uint64_t i = 0; i < kBlocks; ++i) {
    index.apply(a, i, batch({stored({request[i]}, i % 2 == 0 ? "GPU" : "CPU")}));
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(index.overlaps(request).instances[0].prefix_blocks, kBlocks);
}

// ---------------------------------------------------------------------------
// The fast path's property: lanes are independent (src/router/block_index.h).
// Every answer must equal the plain walk over a std::set model of each
// instance's (hash, tier) pairs and the cluster's shared pairs.

struct Model {
  std::vector<std::set<std::pair<std::uint64_t, int>>> local;  // per InstanceId
  std::vector<bool> live;
  std::set<std::pair<std::uint64_t, int>> shared;

  static int tier_of(const std::string& medium) {
    if (medium == "GPU") return 1;
    if (medium == "CPU") return 2;
    if (medium == "DISK" || medium == "STORAGE") return 3;
    if (medium == "REMOTE") return 4;
    return 0;
  }
  void apply(InstanceId id, const events::KvEventBatch& b) {
    for (const auto& e : b.events) {
      if (std::holds_alternative<events::AllBlocksCleared>(e)) {
        local[id].clear();
      } else if (const auto* s = std::get_if<events::BlockStored>(&e)) {
        const int t = tier_of(s->medium);
        for (auto h : s->block_hashes) {
          if (t == 4)
            shared.insert({h, t});
          else if (t != 0)
            local[id].insert({h, t});
        }
      } else {
        const auto& r = std::get<events::BlockRemoved>(e);
        const int t = tier_of(r.medium);
        for (auto h : r.block_hashes) {
          if (t == 4)
            shared.erase({h, t});
          else if (t != 0)
            local[id].erase({h, t});
        }
      }
    }
  }
  [[nodiscard]] bool holds(InstanceId id, std::uint64_t h, int t) const {
    if (!live[id]) return false;
    return t == 4 ? shared.contains({h, t}) : local[id].contains({h, t});
  }
  [[nodiscard]] TierBlockCounts walk(InstanceId id,
                                     const std::vector<std::uint64_t>& hashes) const {
    TierBlockCounts c{};
    for (auto h : hashes) {
      int t = 1;
      while (t <= 3 && !local[id].contains({h, t})) ++t;
      if (t > 3) {
        if (!shared.contains({h, 4})) break;
        t = 4;
      }
      ++c[static_cast<TierId>(t)];
    }
    return c;
  }
};

void expect_matches(const KvIndexer& index, const Model& model, std::uint64_t n_hashes,
                    const std::vector<std::vector<std::uint64_t>>& queries,
                    const std::string& where) {
  for (InstanceId id = 0; id < model.live.size(); ++id) {
    for (std::uint64_t h = 0; h < n_hashes; ++h) {
      for (int t = 1; t <= 4; ++t) {
        ASSERT_EQ(index.holds(id, h, static_cast<TierId>(t)), model.holds(id, h, t))
            << where << ": instance " << id << " hash " << h << " tier " << t;
      }
    }
  }
  for (const auto& q : queries) {
    const auto s = index.overlaps(q);
    std::size_t k = 0;
    for (InstanceId id = 0; id < model.live.size(); ++id) {
      if (!model.live[id]) continue;
      ASSERT_LT(k, s.instances.size()) << where;
      const auto& o = s.instances[k++];
      ASSERT_EQ(o.instance, id) << where;
      const auto want = model.walk(id, q);
      ASSERT_EQ(o.per_tier, want) << where << ": instance " << id;
      std::size_t sum = 0;
      for (auto n : want) sum += n;
      ASSERT_EQ(o.prefix_blocks, sum) << where;
    }
    ASSERT_EQ(k, s.instances.size()) << where;
  }
}

// Every placement of 2 hashes in tiers {G1, G2} of two instances sitting on
// both sides of a word boundary (lanes 63 and 64), and in the shared G4: 2^10
// indexes, each asked the requests in both orders and with a repeated hash.
TEST(KvIndexerModel, ExhaustiveSmallCasesAcrossAWordBoundary) {
  const std::vector<std::vector<std::uint64_t>> queries{{0, 1}, {1, 0}, {0, 0, 1},
                                                        {1, 1}, {0},    {2, 0}};
  const char* kMedium[] = {"GPU", "CPU"};
  for (std::uint32_t bits = 0; bits < (1U << 10); ++bits) {
    KvIndexer index;
    Model model;
    for (int i = 0; i < 65; ++i) {
      index.add_instance(name_of("i", i));
      model.local.emplace_back();
      model.live.push_back(true);
    }
    const InstanceId pair[] = {63, 64};
    std::uint32_t bit = 0;
    for (InstanceId id : pair) {
      std::vector<events::KvEvent> evs;
      for (std::uint64_t h = 0; h < 2; ++h) {
        for (int t = 0; t < 2; ++t) {
          if ((bits >> bit++) & 1U) evs.push_back(stored({h}, kMedium[t]));
        }
      }
      const auto b = batch(std::move(evs));
      index.apply(id, 0, b);
      model.apply(id, b);
    }
    std::uint64_t seq = 0;
    for (std::uint64_t h = 0; h < 2; ++h) {
      if ((bits >> bit++) & 1U) {
        const auto b = batch({stored({h}, "REMOTE")});
        index.apply(0, seq++, b);
        model.apply(0, b);
      }
    }
    expect_matches(index, model, 3, queries, "bits " + std::to_string(bits));
    if (HasFatalFailure()) return;
  }
}

// Random event sequences over few hashes, all tiers and 70 instances (two
// words), with clears, restarts, removals and re-adds (lanes reused); the
// index is compared with the model after every batch.
TEST(KvIndexerModel, RandomEventSequencesMatchASetModel) {
  const std::uint64_t seed = std::random_device{}();
  std::cout << "KvIndexerModel seed: " << seed << "\n";
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const char* kMediums[] = {"GPU", "CPU", "DISK", "STORAGE", "REMOTE", "NPU"};
  constexpr std::uint64_t kHashes = 6;
  KvIndexer index;
  Model model;
  std::vector<std::uint64_t> next_seq;
  auto add = [&](const std::string& name) {
    const auto id = index.add_instance(name);
    ASSERT_EQ(id, model.live.size());
    model.local.emplace_back();
    model.live.push_back(true);
    next_seq.push_back(0);
  };
  for (int i = 0; i < 70; ++i) add(name_of("i", i));
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
  };
  auto hashes = [&] {
    std::vector<std::uint64_t> hs(1 + pick(3));
    for (auto& h : hs) h = pick(kHashes);
    return hs;
  };
  for (int step = 0; step < 3000; ++step) {
    std::vector<InstanceId> live;
    for (InstanceId id = 0; id < model.live.size(); ++id) {
      if (model.live[id]) live.push_back(id);
    }
    const InstanceId id = live[pick(live.size())];
    const auto op = pick(100);
    if (op < 2) {
      index.remove_instance(id);
      model.live[id] = false;
      model.local[id].clear();
      add(name_of("n", step));
      continue;
    }
    std::vector<events::KvEvent> evs;
    const auto n_events = 1 + pick(3);
    for (std::uint64_t e = 0; e < n_events; ++e) {
      const auto kind = pick(20);
      if (kind == 0) {
        evs.push_back(cleared());
      } else if (kind < 12) {
        evs.push_back(stored(hashes(), kMediums[pick(6)]));
      } else {
        evs.push_back(removed(hashes(), kMediums[pick(6)]));
      }
    }
    const auto b = batch(std::move(evs));
    if (op < 5 && next_seq[id] > 0) {  // a restart
      ASSERT_EQ(index.apply(id, 0, b).status, ApplyStatus::kRestart);
      model.local[id].clear();
      next_seq[id] = 1;
    } else {
      ASSERT_EQ(index.apply(id, next_seq[id]++, b).status, ApplyStatus::kApplied);
    }
    model.apply(id, b);
    std::vector<std::vector<std::uint64_t>> queries{{0, 1, 2, 3, 4, 5}};
    if (step % 10 == 0) {  // long runs of repeated blocks: a run is added as one number
      std::vector<std::uint64_t> runs;
      for (std::uint64_t h = 0; h < 3; ++h) runs.insert(runs.end(), 150 + (h * 61), h);
      queries.push_back(std::move(runs));
      std::vector<std::uint64_t> cycle;
      for (int r = 0; r < 100; ++r) {
        for (std::uint64_t h = 0; h < kHashes; ++h) cycle.push_back(h);
      }
      queries.push_back(std::move(cycle));
    }
    for (int q = 0; q < 3; ++q) {
      std::vector<std::uint64_t> r(1 + pick(7));
      for (auto& h : r) h = pick(kHashes + 1);
      queries.push_back(std::move(r));
    }
    expect_matches(index, model, kHashes, queries, "step " + std::to_string(step));
    if (HasFatalFailure()) return;
  }
}

}  // namespace kv_indexer_test
}  // namespace kvbm::router
