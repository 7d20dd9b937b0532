// Tests of TransferCostEstimator (kvbm/transfer/transfer_cost_estimator.h):
// the fitted line (latency and time per block), median and p99 of fed
// batches, throughput, per block size (and the scaled fallback), the window
// forgetting old batches, determinism, and concurrent recording.

#include "kvbm/transfer/transfer_cost_estimator.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvbm {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

constexpr std::size_t kBytes = 4096;

TEST(TransferCostEstimatorTest, UnknownUntilABatchIsRecorded) {
  TransferCostEstimator e;
  const auto p = e.predict(10, kBytes);
  EXPECT_FALSE(p.known);
  EXPECT_EQ(p.expected, nanoseconds(0));
  EXPECT_TRUE(e.summary().empty());
  e.record(0, kBytes, milliseconds(5));  // no blocks: ignored
  EXPECT_FALSE(e.predict(10, kBytes).known);
  e.record(2, kBytes, milliseconds(4));
  EXPECT_TRUE(e.predict(10, kBytes).known);
  EXPECT_EQ(e.predict(0, kBytes).expected, nanoseconds(0));  // nothing to move: free
}

// Batches of 1..8 blocks costing exactly 1 ms + 0.5 ms per block: the line is
// found, and predictions beyond the window's sizes follow it.
TEST(TransferCostEstimatorTest, FitsLatencyAndTimePerBlock) {
  TransferCostEstimator e;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t n = 1; n <= 8; ++n) e.record(n, kBytes, microseconds(1000 + 500 * n));
  }
  const auto m = e.model(kBytes);
  EXPECT_NEAR(m.latency_s, 1e-3, 1e-9);
  EXPECT_NEAR(m.per_block_s, 0.5e-3, 1e-9);
  const auto p = e.predict(100, kBytes);
  EXPECT_NEAR(static_cast<double>(p.expected.count()), 51e6, 1e3);
  EXPECT_EQ(p.tail, p.expected);  // every batch on the line: ratios all 1
}

// One size only: latency and time per block cannot be told apart; the cost
// is per block. p50 and p99 of the batches' durations are nearest-rank.
TEST(TransferCostEstimatorTest, MedianAndTailOfOneSize) {
  TransferCostEstimator e(100);
  for (int i = 0; i < 98; ++i) e.record(4, kBytes, milliseconds(4));
  e.record(4, kBytes, milliseconds(40));   // the 99th smallest
  e.record(4, kBytes, milliseconds(400));  // the largest
  const auto s = e.summary();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].batches, 100u);
  EXPECT_EQ(s[0].p50, milliseconds(4));
  EXPECT_EQ(s[0].p99, milliseconds(40));
  const auto p = e.predict(8, kBytes);
  // The line is the least-squares per-block cost; the median ratio brings the
  // expected case back to the typical batch, the p99 ratio to the 40 ms one.
  EXPECT_NEAR(static_cast<double>(p.expected.count()), 8e6, 1e3);
  EXPECT_NEAR(static_cast<double>(p.tail.count()), 80e6, 1e3);
}

TEST(TransferCostEstimatorTest, ThroughputIsBytesOverTimeInTheWindow) {
  TransferCostEstimator e;
  e.record(10, kBytes, milliseconds(10));  // 40960 B in 10 ms
  e.record(30, kBytes, milliseconds(10));  // 122880 B in 10 ms
  const auto s = e.summary();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(s[0].bytes_per_second, 40.0 * kBytes / 0.02, 1e-6);
}

// Each block size has its own window; a size never measured is predicted from
// the busiest size, its time per block scaled by the bytes.
TEST(TransferCostEstimatorTest, PerBlockSizeAndScaledFallback) {
  TransferCostEstimator e;
  for (int i = 0; i < 5; ++i) e.record(10, 1000, milliseconds(10));  // 1 ms per block
  for (int i = 0; i < 3; ++i) e.record(10, 8000, milliseconds(80));  // 8 ms per block
  EXPECT_EQ(e.predict(5, 1000).expected, milliseconds(5));
  EXPECT_EQ(e.predict(5, 8000).expected, milliseconds(40));
  EXPECT_EQ(e.predict(5, 2000).expected, milliseconds(10));  // from the 1000-byte size
  const auto s = e.summary();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].block_bytes, 1000u);
  EXPECT_EQ(s[1].block_bytes, 8000u);
}

// The window keeps the last `window` batches: a path that became fast is
// predicted fast once the slow batches have left it.
TEST(TransferCostEstimatorTest, TheWindowForgetsOldBatches) {
  TransferCostEstimator e(16);
  for (int i = 0; i < 16; ++i) e.record(1, kBytes, milliseconds(100));
  EXPECT_EQ(e.predict(1, kBytes).expected, milliseconds(100));
  for (int i = 0; i < 8; ++i) e.record(1, kBytes, milliseconds(1));
  EXPECT_EQ(e.predict(1, kBytes).tail, milliseconds(100));  // half the window is still slow
  for (int i = 0; i < 8; ++i) e.record(1, kBytes, milliseconds(1));
  EXPECT_EQ(e.predict(1, kBytes).expected, milliseconds(1));
  EXPECT_EQ(e.predict(1, kBytes).tail, milliseconds(1));
  const auto s = e.summary();
  EXPECT_EQ(s[0].batches, 16u);
  EXPECT_EQ(s[0].recorded, 32u);
}

TEST(TransferCostEstimatorTest, DeterministicGivenTheBatches) {
  auto feed = [](TransferCostEstimator& e) {
    std::uint64_t x = 12345;
    for (int i = 0; i < 500; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      e.record(1 + (x >> 60), kBytes, microseconds(100 + ((x >> 32) % 5000)));
    }
  };
  TransferCostEstimator a(64), b(64);
  feed(a);
  feed(b);
  for (std::size_t n : {1u, 7u, 64u}) {
    EXPECT_EQ(a.predict(n, kBytes).expected, b.predict(n, kBytes).expected);
    EXPECT_EQ(a.predict(n, kBytes).tail, b.predict(n, kBytes).tail);
  }
  EXPECT_GE(a.predict(7, kBytes).tail, a.predict(7, kBytes).expected);
}

// Recording from several threads while others predict: every batch is
// counted (TSan checks the rest).
TEST(TransferCostEstimatorTest, ConcurrentRecordAndPredict) {
  TransferCostEstimator e(32);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&e, t] {
      for (int i = 0; i < 1000; ++i) {
        if (t % 2 == 0) {
          e.record(2, kBytes, microseconds(200));
        } else {
          (void)e.predict(3, kBytes);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto s = e.summary();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].recorded, 2000u);
  EXPECT_EQ(e.predict(3, kBytes).expected, microseconds(300));
}

}  // namespace
}  // namespace kvbm
