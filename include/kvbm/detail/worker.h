// kvbm/detail/worker.h: the background loops of kvbm, written once.
//
// Worker: threads that run posted jobs (the G4 fetch worker, the bounce
// engine's driver, the G4 writer, the host engine's copy threads). post()
// queues a job and wakes a thread, wait_idle() returns once every job posted
// before it has run, stop() refuses new jobs, lets the queued ones run, and
// joins. With one thread (the default) jobs run in posting order.
//
// PeriodicWorker: one thread that calls a tick every `period` on a kvbm::Clock
// and at once when wake()d (the cancel sweeper, the KV event flusher). The
// next tick is due one period after the last one ended; wakes that come
// before a tick starts are one tick. A ManualClock drives it by advance().
//
// For both, a job or tick that throws is logged and dropped, and the thread
// goes on; the destructor stops. Each thread is named after its worker (the
// first 15 bytes of `name`, as Linux keeps them: /proc/self/task/*/comm).
//
// These two are the only places kvbm starts a thread (besides the io_uring
// ring's own): every background loop is a Worker job or a PeriodicWorker tick,
// made through kvbm::Env (kvbm/env.h) where a component takes one. A loop that
// runs for the component's life is posted once as the one job of its own
// Worker and ends when its stop condition holds; stop() then joins.
// Thread-safety: every member may be called from any thread but the worker's
// own (a job that waits for its own worker deadlocks); wake() takes only the
// worker's own mutex, so it may be called under a caller's lock.

#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"

namespace kvbm::detail {

/// Threads running posted jobs; see the file comment.
class Worker {
 public:
  /// Starts `threads` (>= 1) threads. `name` appears in the log line of a
  /// job that throws. Throws UsageError for 0 threads, and what starting a
  /// thread throws (the ones started are stopped first).
  explicit Worker(std::string name, std::size_t threads = 1);
  /// stop().
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Queues `job`; returns false (the job dropped, not run) once stop() began.
  bool post(std::function<void()> job);
  /// Returns once every job posted before the call has run.
  void wait_idle();
  /// Refuses new jobs, waits for the queued ones to run, joins. Idempotent.
  void stop();
  /// Returns the number of threads.
  [[nodiscard]] std::size_t threads() const noexcept { return threads_.size(); }

 private:
  void run() noexcept;

  std::string name_;
  Mutex mu_;
  std::condition_variable cv_;       // a job, or stop
  std::condition_variable idle_cv_;  // the queue ran empty and no job runs
  std::deque<std::function<void()>> jobs_ KVBM_GUARDED_BY(mu_);
  std::size_t running_ KVBM_GUARDED_BY(mu_) = 0;  // jobs taken and not yet ended
  bool stop_ KVBM_GUARDED_BY(mu_) = false;
  Mutex join_mu_;                     // one stop() joins, a concurrent one waits for it
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

/// One thread ticking every period of a Clock, or when woken; see the file comment.
class PeriodicWorker {
 public:
  /// Starts the thread; the first tick is due one period from now (or at the
  /// first wake()). Throws UsageError when the clock is null, the period is
  /// not positive or the tick is empty.
  PeriodicWorker(std::string name, std::shared_ptr<Clock> clock, Clock::duration period,
                 std::function<void()> tick);
  /// stop().
  ~PeriodicWorker();
  PeriodicWorker(const PeriodicWorker&) = delete;
  PeriodicWorker& operator=(const PeriodicWorker&) = delete;

  /// Asks for a tick as soon as the thread can run one.
  void wake();
  /// Joins: a tick under way ends, no other starts. Idempotent.
  void stop();
  /// Returns the number of ticks that have ended.
  [[nodiscard]] std::uint64_t ticks() const;

 private:
  void run(Clock::time_point next) noexcept;

  std::string name_;
  const std::shared_ptr<Clock> clock_;
  const Clock::duration period_;
  const std::function<void()> tick_;
  mutable Mutex mu_;
  std::condition_variable cv_;  // a wake, stop, or (ManualClock) an advance
  bool woken_ KVBM_GUARDED_BY(mu_) = false;
  bool stop_ KVBM_GUARDED_BY(mu_) = false;
  std::uint64_t ticks_ KVBM_GUARDED_BY(mu_) = 0;
  Mutex join_mu_;  // one stop() joins, a concurrent one waits for it
  Clock::Subscription subscription_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvbm::detail
