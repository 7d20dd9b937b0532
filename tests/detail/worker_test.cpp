// Tests of kvbm/detail/worker.h: jobs run in order on one thread, wait_idle()
// returns once every earlier job ran, stop() runs what is queued and refuses
// the rest, and a job that throws is dropped without ending the worker.

#include "kvbm/detail/worker.h"

#include <atomic>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvbm::detail {
namespace {

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

}  // namespace
}  // namespace kvbm::detail
