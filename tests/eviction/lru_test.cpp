#include "kvbm/eviction/lru.h"

#include <algorithm>
#include <iostream>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/eviction/make_backend.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace lru_test {

SequenceHash hash_of(std::uint64_t v) { return SequenceHash(v, std::nullopt, 0); }

std::vector<BlockId> drain(EvictionBackend& b) {
  std::vector<BlockId> out;
  while (auto id = b.pop_victim()) {
    out.push_back(*id);
  }
  return out;
}

TEST(LruBackend, RejectsZeroCapacity) { EXPECT_THROW(LruBackend(0), UsageError); }

TEST(LruBackend, EmptyHasNoVictim) {
  LruBackend lru(4);
  EXPECT_EQ(lru.policy(), EvictionPolicy::kLru);
  EXPECT_EQ(lru.size(), 0U);
  EXPECT_EQ(lru.evictable(), 0U);
  EXPECT_EQ(lru.pop_victim(), std::nullopt);
}

TEST(LruBackend, EvictsInInsertionOrder) {
  LruBackend lru(8);
  for (BlockId id : {3U, 1U, 4U, 0U, 5U}) {
    lru.insert(id, hash_of(id + 100));
  }
  EXPECT_EQ(lru.size(), 5U);
  EXPECT_EQ(drain(lru), (std::vector<BlockId>{3, 1, 4, 0, 5}));
  EXPECT_EQ(lru.size(), 0U);
}

TEST(LruBackend, PeekVictimIsTheNextPopAndRemovesNothing) {
  LruBackend lru(8);
  EXPECT_EQ(lru.peek_victim(), std::nullopt);
  for (BlockId id : {6U, 2U, 7U}) lru.insert(id, hash_of(id));
  lru.remove(6);
  EXPECT_EQ(lru.peek_victim(), 2U);
  EXPECT_EQ(lru.size(), 2U);
  for (BlockId expected : {2U, 7U}) {
    EXPECT_EQ(lru.peek_victim(), expected);
    EXPECT_EQ(lru.pop_victim(), expected);
  }
  EXPECT_EQ(lru.peek_victim(), std::nullopt);
}

TEST(LruBackend, RemoveAndReinsertMovesToMostRecent) {
  LruBackend lru(8);
  for (BlockId id = 0; id < 5; ++id) {
    lru.insert(id, hash_of(id));
  }
  lru.remove(2);  // taken back by a match
  EXPECT_FALSE(lru.contains(2));
  EXPECT_EQ(lru.pop_victim(), 0U);
  lru.remove(4);
  lru.insert(0, hash_of(0));  // released again: now the most recent
  lru.insert(2, hash_of(2));
  EXPECT_EQ(lru.size(), 4U);
  EXPECT_EQ(drain(lru), (std::vector<BlockId>{1, 3, 0, 2}));
}

TEST(LruBackend, RemovingFirstAndLastKeepsListIntact) {
  LruBackend lru(3);
  lru.insert(0, hash_of(0));
  lru.insert(1, hash_of(1));
  lru.insert(2, hash_of(2));
  lru.remove(0);
  lru.remove(2);
  EXPECT_EQ(drain(lru), (std::vector<BlockId>{1}));
  lru.insert(2, hash_of(2));
  lru.insert(1, hash_of(1));
  EXPECT_EQ(drain(lru), (std::vector<BlockId>{2, 1}));
}

TEST(LruBackend, MisuseIsAUsageErrorAndRemoveOfAbsentIsANoOp) {
  LruBackend lru(2);
  lru.insert(1, hash_of(1));
  EXPECT_THROW(lru.insert(1, hash_of(1)), UsageError);
  EXPECT_THROW(lru.insert(2, hash_of(2)), UsageError);
  lru.remove(0);
  lru.remove(7);
  EXPECT_EQ(lru.size(), 1U);
  EXPECT_EQ(drain(lru), (std::vector<BlockId>{1}));
}

// Random operations against a std::list model; prints its seed.
TEST(LruBackend, MatchesReferenceModel) {
  const std::uint64_t seed = test::test_seed64();
  std::mt19937_64 rng(seed);
  constexpr BlockId kCapacity = 64;
  LruBackend lru(kCapacity);
  std::list<BlockId> model;
  for (int step = 0; step < 20000; ++step) {
    const auto id = static_cast<BlockId>(rng() % kCapacity);
    const auto it = std::find(model.begin(), model.end(), id);
    switch (rng() % 3) {
      case 0:
        if (it == model.end()) {
          lru.insert(id, hash_of(id));
          model.push_back(id);
        }
        break;
      case 1:
        lru.remove(id);
        if (it != model.end()) {
          model.erase(it);
        }
        break;
      default: {
        const auto victim = lru.pop_victim();
        if (model.empty()) {
          ASSERT_EQ(victim, std::nullopt) << "seed " << seed;
        } else {
          ASSERT_EQ(victim, model.front()) << "seed " << seed << " step " << step;
          model.pop_front();
        }
      }
    }
    ASSERT_EQ(lru.size(), model.size()) << "seed " << seed;
  }
}

TEST(MakeEvictionBackend, BuildsEachPolicy) {
  auto tracker = std::make_shared<const FrequencyTracker>(64);
  for (auto policy :
       {EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru, EvictionPolicy::kLineage}) {
    const auto backend = make_eviction_backend(policy, 16, tracker);
    ASSERT_NE(backend, nullptr);
    EXPECT_EQ(backend->policy(), policy) << to_string(policy);
    backend->insert(3, hash_of(3));
    EXPECT_EQ(backend->pop_victim(), 3U);
  }
  EXPECT_NE(make_eviction_backend(EvictionPolicy::kLru, 16, nullptr), nullptr);
  EXPECT_NE(make_eviction_backend(EvictionPolicy::kLineage, 16, nullptr), nullptr);
}

// prefetch_remove is a hint: on every backend (lineage keeps the default no-op) it changes
// nothing, for blocks in the pool, blocks out of it and ids out of range alike, so the
// hinted backend gives up the same blocks in the same order as an untouched twin.
TEST(MakeEvictionBackend, PrefetchRemoveChangesNothing) {
  auto tracker = std::make_shared<const FrequencyTracker>(64);
  for (auto policy :
       {EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru, EvictionPolicy::kLineage}) {
    const auto hinted = make_eviction_backend(policy, 16, tracker);
    const auto twin = make_eviction_backend(policy, 16, tracker);
    for (BlockId id : {9U, 2U, 14U, 5U, 0U, 11U}) {
      hinted->insert(id, hash_of(id + 1000));
      twin->insert(id, hash_of(id + 1000));
    }
    const std::vector<BlockId> ids = {2, 0, 3, 15, 16, 1'000'000, detail::IntrusiveLists::kNil};
    hinted->prefetch_remove(ids);
    hinted->prefetch_remove({});
    EXPECT_EQ(hinted->size(), twin->size()) << to_string(policy);
    hinted->remove(14);
    twin->remove(14);
    EXPECT_EQ(drain(*hinted), drain(*twin)) << to_string(policy);
  }
}

TEST(MakeEvictionBackend, MultiLevelWithoutTrackerTellsWhatToDo) {
  try {
    (void)make_eviction_backend(EvictionPolicy::kMultiLevelLru, 16, nullptr);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("frequency tracker"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)make_eviction_backend(EvictionPolicy::kLru, 0, nullptr), UsageError);
}

}  // namespace lru_test
}  // namespace kvbm
