// Tests of kvbm/detail/worker.h. Worker: jobs run in order on one thread (or
// together on several), wait_idle() returns once every earlier job ran, stop()
// runs what is queued and refuses the rest, and a job that throws is dropped
// without ending the worker. PeriodicWorker: a tick every period of a
// ManualClock, or at once on wake(), none after stop().

#include "kvbm/detail/worker.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/clock.h"
#include "kvbm/error.h"
#include "test_util.h"

namespace kvbm::detail {
namespace worker_test {

TEST(Worker, RunsJobsInOrderOnOneThreadAndWaitIdleSeesThemAll) {
  Worker w("test worker");
  std::vector<int> order;  // written by the worker only
  std::thread::id ran_on;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(w.post([&, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    }));
  }
  w.wait_idle();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(Worker, StopRunsWhatIsQueuedThenRefuses) {
  Worker w("test worker");
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<int> ran{0};
  ASSERT_TRUE(w.post([open] { open.wait(); }));  // holds the worker
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(w.post([&] { ++ran; }));
  std::thread stopper([&] { w.stop(); });
  // stop() refuses new jobs as soon as it begins; wait for that, then open the gate.
  while (w.post([] {})) std::this_thread::yield();
  gate.set_value();
  stopper.join();
  EXPECT_EQ(ran.load(), 10) << "a queued job was dropped by stop()";
  EXPECT_FALSE(w.post([&] { ++ran; }));
  w.stop();  // idempotent
  w.wait_idle();
}

TEST(Worker, AJobThatThrowsIsDroppedAndTheWorkerGoesOn) {
  Worker w("test worker");
  std::atomic<int> ran{0};
  ASSERT_TRUE(w.post([] { throw std::runtime_error("boom"); }));
  ASSERT_TRUE(w.post([] { throw 42; }));
  ASSERT_TRUE(w.post([&] { ++ran; }));
  w.wait_idle();
  EXPECT_EQ(ran.load(), 1);
}

TEST(Worker, ThreadsRunJobsTogether) {
  constexpr std::size_t kThreads = 4;
  Worker w("test pool", kThreads);
  EXPECT_EQ(w.threads(), kThreads);
  std::mutex mu;
  std::condition_variable cv;
  std::size_t arrived = 0;
  std::atomic<std::size_t> met{0};
  // Each job waits for all of them: they meet only if every thread runs one.
  for (std::size_t i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(w.post([&] {
      std::unique_lock lock(mu);
      ++arrived;
      cv.notify_all();
      if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == kThreads; })) ++met;
    }));
  }
  w.wait_idle();
  EXPECT_EQ(met.load(), kThreads);
  EXPECT_THROW(Worker("no threads", 0), UsageError);
}

TEST(PeriodicWorker, TicksEveryPeriodOfItsClock) {
  using namespace std::chrono_literals;
  auto clock = std::make_shared<ManualClock>();
  const Clock::time_point t0 = clock->now();
  std::mutex mu;
  std::vector<Clock::time_point> at;  // when each tick ran
  PeriodicWorker p("test ticker", clock, 10ms, [&] {
    std::lock_guard lock(mu);
    at.push_back(clock->now());
  });
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() == 1; }));
  clock->advance(9ms);  // not yet due
  clock->advance(1ms);
  ASSERT_TRUE(test::eventually([&] { return p.ticks() == 1; }));
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() == 1; }));  // the next is 10ms on
  EXPECT_EQ(p.ticks(), 1u);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(at.at(0), t0 + 10ms) << "ticked before its period was up";
  }
  clock->advance(10ms);
  ASSERT_TRUE(test::eventually([&] { return p.ticks() == 2; }));
  p.stop();
  clock->advance(1h);
  p.wake();
  EXPECT_EQ(p.ticks(), 2u) << "a tick after stop()";
}

TEST(PeriodicWorker, WakeTicksAtOnceAndATickThatThrowsIsDropped) {
  using namespace std::chrono_literals;
  auto clock = std::make_shared<ManualClock>();
  std::atomic<int> calls{0};
  PeriodicWorker p("test ticker", clock, 1h, [&] {
    if (calls.fetch_add(1) == 0) throw std::runtime_error("boom");
  });
  p.wake();
  ASSERT_TRUE(test::eventually([&] { return p.ticks() == 1; }));
  p.wake();  // the thread goes on after the throw
  ASSERT_TRUE(test::eventually([&] { return p.ticks() == 2; }));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_THROW(PeriodicWorker("bad", clock, 0ns, [] {}), UsageError);
  EXPECT_THROW(PeriodicWorker("bad", nullptr, 1ms, [] {}), UsageError);
  EXPECT_THROW(PeriodicWorker("bad", clock, 1ms, {}), UsageError);
}

}  // namespace worker_test
}  // namespace kvbm::detail
