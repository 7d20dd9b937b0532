#include "kvbm/eviction/multi_level_lru.h"

#include <array>
#include <iostream>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace multi_level_lru_test {

SequenceHash hash_of(std::uint64_t v) { return SequenceHash(v, std::nullopt, 0); }

std::vector<BlockId> drain(EvictionBackend& b) {
  std::vector<BlockId> out;
  while (auto id = b.pop_victim()) {
    out.push_back(*id);
  }
  return out;
}

void touch_n(FrequencyTracker& t, std::uint64_t key, int n) {
  for (int i = 0; i < n; ++i) {
    t.touch(key);
  }
}

TEST(MultiLevelLruBackend, PeekVictimIsTheNextPopAcrossLevels) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  MultiLevelLruBackend b(8, tracker);
  EXPECT_EQ(b.peek_victim(), std::nullopt);
  touch_n(*tracker, 100, 8);  // block 0 sits in a high level
  b.insert(0, hash_of(100));
  b.insert(1, hash_of(101));
  b.insert(2, hash_of(102));
  std::size_t left = 3;
  for (BlockId expected : {1U, 2U, 0U}) {  // low level first, LRU within it
    EXPECT_EQ(b.peek_victim(), expected);
    EXPECT_EQ(b.size(), left--);  // peeking removed nothing
    EXPECT_EQ(b.pop_victim(), expected);
  }
  EXPECT_EQ(b.peek_victim(), std::nullopt);
}

TEST(MultiLevelLruBackend, RejectsMissingTrackerAndBadThresholds) {
  auto tracker = std::make_shared<const FrequencyTracker>(64);
  EXPECT_THROW(MultiLevelLruBackend(8, nullptr), UsageError);
  EXPECT_THROW(MultiLevelLruBackend(0, tracker), UsageError);
  EXPECT_THROW(MultiLevelLruBackend(8, tracker, {2, 2, 8}), UsageError);
  EXPECT_THROW(MultiLevelLruBackend(8, tracker, {0, 4, 8}), UsageError);
  EXPECT_THROW(MultiLevelLruBackend(8, tracker, {2, 4, 16}), UsageError);
  EXPECT_NO_THROW(MultiLevelLruBackend(8, tracker, {1, 2, 15}));
}

TEST(MultiLevelLruBackend, LevelsFollowDefaultThresholds) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  MultiLevelLruBackend b(8, tracker);
  EXPECT_EQ(b.policy(), EvictionPolicy::kMultiLevelLru);
  // estimate -> level: 0-1 -> 0, 2-3 -> 1, 4-7 -> 2, 8+ -> 3
  const std::array<std::size_t, 16> expected{0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  for (std::uint32_t n = 0; n < 16; ++n) {
    const std::uint64_t key = 1000 + n;
    touch_n(*tracker, key, static_cast<int>(n));
    ASSERT_EQ(tracker->estimate(key), n);
    EXPECT_EQ(b.level_for(hash_of(key)), expected[n]) << "estimate " << n;
  }
}

// Low-frequency blocks go first even when they were released more recently;
// within a level, least recent first.
TEST(MultiLevelLruBackend, EvictsLowFrequencyBeforeHighThenLru) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  const std::uint64_t hot = 11, hot2 = 12, warm = 21, cold1 = 31, cold2 = 32, fresh = 41;
  touch_n(*tracker, hot, 10);   // level 3
  touch_n(*tracker, hot2, 9);   // level 3
  touch_n(*tracker, warm, 3);   // level 1
  touch_n(*tracker, cold1, 1);  // level 0
  touch_n(*tracker, cold2, 1);  // level 0
  // fresh: never touched, level 0

  MultiLevelLruBackend b(16, tracker);
  b.insert(0, hash_of(hot));
  b.insert(1, hash_of(warm));
  b.insert(2, hash_of(cold1));
  b.insert(3, hash_of(hot2));
  b.insert(4, hash_of(fresh));
  b.insert(5, hash_of(cold2));
  EXPECT_EQ(b.size(), 6U);
  EXPECT_EQ(b.level_size(0), 3U);
  EXPECT_EQ(b.level_size(1), 1U);
  EXPECT_EQ(b.level_size(2), 0U);
  EXPECT_EQ(b.level_size(3), 2U);
  EXPECT_EQ(b.level_of(3), 3U);

  // The level is fixed at insertion: touching cold1 now does not move it.
  touch_n(*tracker, cold1, 12);

  EXPECT_EQ(drain(b), (std::vector<BlockId>{2, 4, 5, 1, 0, 3}));
  EXPECT_EQ(b.size(), 0U);
}

TEST(MultiLevelLruBackend, RemoveAndReinsertTakesTheCurrentLevel) {
  auto tracker = std::make_shared<FrequencyTracker>(1024);
  MultiLevelLruBackend b(8, tracker);
  b.insert(0, hash_of(100));  // level 0
  b.insert(1, hash_of(101));  // level 0
  b.insert(2, hash_of(102));  // level 0
  b.remove(0);                // matched
  touch_n(*tracker, 100, 5);  // the match and later ones make it warm
  b.insert(0, hash_of(100));  // released again, now level 2
  EXPECT_EQ(b.level_of(0), 2U);
  b.remove(1);
  b.remove(1);  // absent: no effect
  EXPECT_EQ(b.size(), 2U);
  EXPECT_EQ(b.level_size(0), 1U);
  EXPECT_EQ(drain(b), (std::vector<BlockId>{2, 0}));
  EXPECT_THROW(b.insert(8, hash_of(1)), UsageError);
  b.insert(3, hash_of(1));
  EXPECT_THROW(b.insert(3, hash_of(1)), UsageError);
}

// Random operations against a model of four std::lists; prints its seed.
TEST(MultiLevelLruBackend, MatchesReferenceModel) {
  const std::uint64_t seed = test::test_seed64();
  std::mt19937_64 rng(seed);
  constexpr BlockId kCapacity = 64;
  auto tracker = std::make_shared<FrequencyTracker>(4096, 1U << 30);
  MultiLevelLruBackend b(kCapacity, tracker);
  std::array<std::list<BlockId>, MultiLevelLruBackend::kLevels> model;
  std::vector<int> level_of(kCapacity, -1);
  for (int step = 0; step < 20000; ++step) {
    const auto id = static_cast<BlockId>(rng() % kCapacity);
    const std::uint64_t key = 5000 + id;
    switch (rng() % 4) {
      case 0:
        tracker->touch(key);
        break;
      case 1:
        if (level_of[id] < 0) {
          b.insert(id, hash_of(key));
          level_of[id] = static_cast<int>(b.level_for(hash_of(key)));
          model[static_cast<std::size_t>(level_of[id])].push_back(id);
        }
        break;
      case 2:
        b.remove(id);
        if (level_of[id] >= 0) {
          model[static_cast<std::size_t>(level_of[id])].remove(id);
          level_of[id] = -1;
        }
        break;
      default: {
        std::optional<BlockId> expected;
        for (auto& list : model) {
          if (!list.empty()) {
            expected = list.front();
            list.pop_front();
            level_of[*expected] = -1;
            break;
          }
        }
        ASSERT_EQ(b.pop_victim(), expected) << "seed " << seed << " step " << step;
      }
    }
  }
}

}  // namespace multi_level_lru_test
}  // namespace kvbm
