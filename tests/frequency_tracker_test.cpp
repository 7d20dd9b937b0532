#include "kvbm/frequency_tracker.h"

#include <cstdint>
#include <iostream>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "test_util.h"

namespace kvbm {
namespace frequency_tracker_test {

TEST(FrequencyTracker, RejectsZeroCapacityAndSampleSize) {
  EXPECT_THROW(FrequencyTracker(0), UsageError);
  EXPECT_THROW(FrequencyTracker(16, 0), UsageError);
}

TEST(FrequencyTracker, SizesTableAndDefaultSample) {
  const FrequencyTracker small(1);
  EXPECT_EQ(small.counters(), 8U * 16U);  // one line at least
  EXPECT_EQ(small.sample_size(), 10U);

  const FrequencyTracker t(1000);
  EXPECT_EQ(t.capacity(), 1000U);
  EXPECT_EQ(t.counters(), 1024U * 16U);  // next power of two of words
  EXPECT_EQ(t.sample_size(), 10000U);

  const FrequencyTracker preset(TrackerCapacity::kSmall);
  EXPECT_EQ(preset.capacity(), static_cast<std::size_t>(TrackerCapacity::kSmall));
}

TEST(FrequencyTracker, CountsUpAndSaturatesAtFifteen) {
  FrequencyTracker t(1024);
  const std::uint64_t key = 0xfeedfacecafebeefULL;
  EXPECT_EQ(t.estimate(key), 0U);
  for (std::uint32_t i = 1; i <= 15; ++i) {
    t.touch(key);
    EXPECT_EQ(t.estimate(key), i);
  }
  for (int i = 0; i < 20; ++i) {
    t.touch(key);
  }
  EXPECT_EQ(t.estimate(key), FrequencyTracker::kMaxCount);
  EXPECT_EQ(t.halvings(), 0U);
}

TEST(FrequencyTracker, NeverUnderCountsAmongFewKeys) {
  FrequencyTracker t(256);
  std::unordered_map<std::uint64_t, std::uint32_t> truth;
  for (std::uint64_t key = 1; key <= 40; ++key) {
    const std::uint32_t n = static_cast<std::uint32_t>(key % 16);
    for (std::uint32_t i = 0; i < n; ++i) {
      t.touch(key);
    }
    truth[key] = n;
  }
  ASSERT_EQ(t.halvings(), 0U);
  int exact = 0;
  for (const auto& [key, n] : truth) {
    EXPECT_GE(t.estimate(key), n) << "key " << key;
    exact += t.estimate(key) == n ? 1 : 0;
  }
  // With 4096 counters for 40 keys, collisions on all four counters are rare.
  EXPECT_GE(exact, 38);
}

TEST(FrequencyTracker, HalvesEveryCounterAfterSampleSizeTouches) {
  FrequencyTracker t(64, 100);
  const std::uint64_t key = 42;
  const std::uint64_t other = 4242;
  for (int i = 0; i < 6; ++i) {
    t.touch(other);
  }
  for (int i = 0; i < 93; ++i) {
    t.touch(key);
  }
  EXPECT_EQ(t.estimate(key), 15U);
  EXPECT_EQ(t.estimate(other), 6U);
  EXPECT_EQ(t.halvings(), 0U);

  t.touch(key);  // the 100th touch crosses the sample size
  EXPECT_EQ(t.halvings(), 1U);
  EXPECT_EQ(t.estimate(key), 7U);
  EXPECT_EQ(t.estimate(other), 3U);

  // The sample count was halved to 50: the next halving comes 50 touches later.
  for (int i = 0; i < 49; ++i) {
    t.touch(other);
  }
  EXPECT_EQ(t.halvings(), 1U);
  EXPECT_EQ(t.estimate(other), 15U);
  t.touch(other);
  EXPECT_EQ(t.halvings(), 2U);
  EXPECT_EQ(t.estimate(key), 3U);
  EXPECT_EQ(t.estimate(other), 7U);
}

TEST(FrequencyTracker, ClearZeroesCountsAndSample) {
  FrequencyTracker t(64, 100);
  for (int i = 0; i < 60; ++i) {
    t.touch(7);
  }
  t.clear();
  EXPECT_EQ(t.estimate(7), 0U);
  EXPECT_EQ(t.nonzero_counters(), 0U);
  for (int i = 0; i < 99; ++i) {
    t.touch(7);
  }
  EXPECT_EQ(t.halvings(), 0U);  // the sample count restarted from zero
}

// A sketch whose line-selection bits overlap its counter-selection bits
// reaches only a fraction of its counters. 10,000 distinct keys make 40,000
// increments into 16,384 counters: with independent bits about
// 1 - exp(-40000 / 16384) = 91% of the counters end up nonzero.
TEST(FrequencyTracker, DistinctKeysSpreadOverAllCounters) {
  FrequencyTracker t(1024);
  const std::uint64_t seed = test::test_seed64();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 10000; ++i) {
    t.touch(rng());
  }
  ASSERT_EQ(t.halvings(), 0U);
  const double used = static_cast<double>(t.nonzero_counters()) / static_cast<double>(t.counters());
  EXPECT_GT(used, 0.85) << "seed " << seed;
}

// Sequential keys, as a test or a naive caller might use, must spread too.
TEST(FrequencyTracker, SequentialKeysSpreadOverAllCounters) {
  FrequencyTracker t(1024);
  for (std::uint64_t key = 0; key < 10000; ++key) {
    t.touch(key);
  }
  const double used = static_cast<double>(t.nonzero_counters()) / static_cast<double>(t.counters());
  EXPECT_GT(used, 0.85);
}

TEST(FrequencyTracker, ConcurrentTouchesAreNotLost) {
  FrequencyTracker t(1 << 16);  // sample size far above the touches below
  constexpr int kThreads = 4;
  const std::uint64_t hot = 0x1234;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&t, id] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(id));
      for (int i = 0; i < 3; ++i) {
        t.touch(hot);
      }
      for (int i = 0; i < 20000; ++i) {
        t.touch(rng());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(t.halvings(), 0U);
  EXPECT_GE(t.estimate(hot), 12U);  // 4 threads x 3 touches, none lost
}

TEST(FrequencyTracker, ConcurrentTouchesWithAging) {
  FrequencyTracker t(64);  // ages every 640 touches
  constexpr int kThreads = 4;
  constexpr int kTouches = 50000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&t, id] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(id) + 100);
      for (int i = 0; i < kTouches; ++i) {
        t.touch(i % 2 == 0 ? 99 : rng() % 512);
        if (i % 1000 == 0) {
          EXPECT_LE(t.estimate(99), FrequencyTracker::kMaxCount);
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  const auto total = static_cast<std::uint64_t>(kThreads) * kTouches;
  EXPECT_GE(t.halvings(), total / t.sample_size() / 2);  // each halving frees half a sample
  EXPECT_LE(t.halvings(), total / (t.sample_size() / 2));
  EXPECT_GE(t.estimate(99), 5U);  // half of all touches: stays high despite aging
}

}  // namespace frequency_tracker_test
}  // namespace kvbm
