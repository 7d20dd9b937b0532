// Offload primitives: the manual clock, cancellation tokens (seal = P3),
// host events, cancellable queues, handles and the config's validation.

#include <atomic>
#include <cerrno>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "offload/offload_test_util.h"

namespace kvbm {
namespace primitives_test {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(ManualClock, MovesOnlyWhenAdvanced) {
  ManualClock clock;
  const auto t0 = clock.now();
  EXPECT_EQ(clock.now(), t0);
  clock.advance(5ms);
  EXPECT_EQ(clock.now() - t0, 5ms);
  EXPECT_THROW(clock.advance(-1ns), UsageError);
}

TEST(ManualClock, AdvanceWakesASubscribedWaiter) {
  auto clock = std::make_shared<ManualClock>();
  std::mutex mu;
  std::condition_variable cv;
  auto sub = clock->subscribe(mu, cv);
  const auto deadline = clock->now() + 10ms;
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    std::unique_lock lock(mu);
    while (clock->now() < deadline) clock->wait_until(lock, cv, deadline);
    woke = true;
  });
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() == 1; }));
  clock->advance(9ms);  // not yet: the waiter goes back to sleep
  clock->advance(1ms);
  waiter.join();
  EXPECT_TRUE(woke);
}

TEST(SteadyClock, WaitUntilReturnsAtTheDeadline) {
  auto clock = Clock::steady();
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock lock(mu);
  const auto deadline = clock->now() + 1ms;
  while (clock->now() < deadline) clock->wait_until(lock, cv, deadline);
  EXPECT_GE(clock->now(), deadline);
}

TEST(CancellationToken, CancelRunsCallbacksOnce) {
  CancellationToken t;
  int runs = 0;
  t.on_cancel([&] { ++runs; });
  const auto id = t.on_cancel([&] { runs += 100; });
  t.remove_callback(id);
  EXPECT_TRUE(t.cancel());
  EXPECT_FALSE(t.cancel());
  EXPECT_TRUE(t.is_cancelled());
  EXPECT_EQ(runs, 1);
  t.on_cancel([&] { ++runs; });  // late: runs at once
  EXPECT_EQ(runs, 2);
}

TEST(CancellationToken, CopiesShareState) {
  CancellationToken a;
  CancellationToken b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(a, b);
  b.cancel();
  EXPECT_TRUE(a.is_cancelled());
}

TEST(CancellationToken, SealAndCancelExcludeEachOther) {
  CancellationToken sealed;
  int runs = 0;
  sealed.on_cancel([&] { ++runs; });
  EXPECT_TRUE(sealed.try_seal());
  EXPECT_TRUE(sealed.try_seal());  // idempotent
  EXPECT_FALSE(sealed.cancel());
  EXPECT_FALSE(sealed.is_cancelled());
  EXPECT_TRUE(sealed.cancel_requested());
  EXPECT_EQ(runs, 0);

  CancellationToken cancelled;
  EXPECT_TRUE(cancelled.cancel());
  EXPECT_FALSE(cancelled.try_seal());
  EXPECT_FALSE(cancelled.is_sealed());
}

TEST(CancellationToken, RacingSealAndCancelHaveOneWinner) {
  for (int i = 0; i < 200; ++i) {
    CancellationToken t;
    std::atomic<bool> sealed{false};
    std::atomic<bool> cancelled{false};
    std::thread a([&] { sealed = t.try_seal(); });
    std::thread b([&] { cancelled = t.cancel(); });
    a.join();
    b.join();
    EXPECT_NE(sealed.load(), cancelled.load());
  }
}

TEST(HostEvent, SignalRunsCallbacksAndWakesWaiters) {
  HostEvent e;
  int runs = 0;
  e.on_met([&] { ++runs; });
  EXPECT_FALSE(e.is_met());
  EXPECT_FALSE(e.wait_for(0ns));
  std::thread t([&] { e.signal(); });
  EXPECT_TRUE(e.wait_for(10s));
  t.join();
  EXPECT_EQ(runs, 1);
  e.signal();
  EXPECT_EQ(runs, 1);
  e.on_met([&] { ++runs; });
  EXPECT_EQ(runs, 2);
}

struct Item {
  int v;
  bool cancelled = false;
  bool sweep() const { return cancelled; }
};

TEST(CancellableQueue, FifoSweepCloseDrain) {
  int pushes = 0;
  CancellableQueue<Item> q([&] { ++pushes; });
  EXPECT_TRUE(q.push(Item{1}));
  EXPECT_TRUE(q.push(Item{2, true}));
  EXPECT_TRUE(q.push(Item{3}));
  EXPECT_EQ(pushes, 3);
  EXPECT_EQ(q.sweep(), 1u);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.try_pop()->v, 1);
  EXPECT_EQ(q.pop()->v, 3);
  EXPECT_FALSE(q.try_pop());
  q.push(Item{4});
  q.close();
  Item refused{5};
  EXPECT_FALSE(q.push(std::move(refused)));
  EXPECT_EQ(refused.v, 5);
  EXPECT_FALSE(q.pop());
  const auto rest = q.drain();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].v, 4);
}

TEST(CancellableQueue, CloseWakesABlockedPop) {
  CancellableQueue<Item> q;
  std::thread t([&] { EXPECT_FALSE(q.pop()); });
  q.close();
  t.join();
}

TEST(TransferHandle, StatusMovesForwardOnly) {
  auto s = std::make_shared<detail::OffloadState>(2);
  TransferHandle h(s);
  EXPECT_EQ(h.status(), TransferStatus::kQueued);
  s->advance(TransferStatus::kBatched);
  s->advance(TransferStatus::kWaiting);
  EXPECT_EQ(h.status(), TransferStatus::kBatched);
  s->add_result(test::seq(0), BlockOutcome::kTransferred);
  s->add_result(test::seq(1), BlockOutcome::kCopyFailed);
  s->add_error(Error{ErrorKind::kIo, EIO, "boom"});
  EXPECT_FALSE(h.wait_for(0ns));
  s->finish();
  EXPECT_EQ(h.status(), TransferStatus::kFailed);
  EXPECT_TRUE(h.wait_for(0ns));
  s->finish_cancelled();  // terminal stays
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  ASSERT_EQ(h.failed_blocks().size(), 1u);
  EXPECT_EQ(h.failed_blocks()[0].hash, test::seq(1));
  ASSERT_TRUE(h.report().error.has_value());
  EXPECT_EQ(h.report().error->message, "boom");
  EXPECT_EQ(h.report().error->kind, ErrorKind::kIo);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 1u);
  EXPECT_FALSE(h.cancel());  // already ended
}

TEST(TransferHandle, CancelBeforeSealEndsAtOnce) {
  auto s = std::make_shared<detail::OffloadState>(1);
  TransferHandle h(s);
  EXPECT_TRUE(h.cancel());
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
  EXPECT_TRUE(h.token().is_cancelled());
}

TEST(TransferHandle, CancelAfterSealWaitsForCompletion) {
  auto s = std::make_shared<detail::OffloadState>(1);
  TransferHandle h(s);
  ASSERT_TRUE(s->token.try_seal());
  std::atomic<bool> returned{false};
  std::thread t([&] {
    EXPECT_FALSE(h.cancel());
    returned = true;
  });
  ASSERT_TRUE(test::eventually([&] { return s->token.cancel_requested(); }));
  EXPECT_FALSE(returned);
  s->add_result(test::seq(0), BlockOutcome::kTransferred);
  s->finish();
  t.join();
  EXPECT_EQ(h.status(), TransferStatus::kDone);
}

TEST(TransferHandle, EmptyHandleThrows) {
  TransferHandle h;
  EXPECT_FALSE(h.valid());
  EXPECT_THROW((void)h.status(), UsageError);
}

TEST(PipelineConfig, DefaultsAreTheSpecs) {
  const PipelineConfig c;
  EXPECT_EQ(c.batch_config.max_batch_size, 64u);
  EXPECT_EQ(c.batch_config.min_batch_size, 8u);
  EXPECT_EQ(c.batch_config.flush_interval, 10ms);
  EXPECT_EQ(c.policy_timeout, 100ms);
  EXPECT_EQ(c.sweep_interval, 10ms);
  EXPECT_EQ(c.max_concurrent_transfers, 1u);
  EXPECT_NO_THROW(c.validate());
}

TEST(PipelineConfig, ValidationNamesTheOption) {
  auto expect_error = [](const PipelineConfig& c, const char* option) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted an invalid " << option;
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(option));
    }
  };
  PipelineConfig c;
  c.batch_config.max_batch_size = 0;
  expect_error(c, "batch_config.max_batch_size");
  c = {};
  c.batch_config.min_batch_size = 0;
  expect_error(c, "batch_config.min_batch_size");
  c = {};
  c.batch_config.min_batch_size = 65;
  expect_error(c, "batch_config.min_batch_size");
  c = {};
  c.batch_config.flush_interval = 0ns;
  expect_error(c, "batch_config.flush_interval");
  c = {};
  c.policy_timeout = -1ms;
  expect_error(c, "policy_timeout");
  c = {};
  c.sweep_interval = 0ns;
  expect_error(c, "sweep_interval");
  c = {};
  c.max_concurrent_transfers = 0;
  expect_error(c, "max_concurrent_transfers");
}

TEST(CancelSweeper, SweepsEveryIntervalOnTheClock) {
  auto clock = std::make_shared<ManualClock>();
  CancellableQueue<Item> q;
  CancelSweeper sweeper(clock, 10ms);
  sweeper.add_target([&] { return q.sweep(); });
  sweeper.start();
  q.push(Item{1, true});
  q.push(Item{2});
  clock->advance(9ms);
  EXPECT_EQ(sweeper.passes(), 0u);
  clock->advance(1ms);
  ASSERT_TRUE(sweeper.wait_passes(1, 10s));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(sweeper.swept(), 1u);
  EXPECT_EQ(sweeper.sweep_once(), 0u);
  sweeper.stop();
  EXPECT_THROW(CancelSweeper(clock, 0ns), UsageError);
}

}  // namespace primitives_test
}  // namespace kvbm
