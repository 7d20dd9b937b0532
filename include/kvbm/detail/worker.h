// kvbm/detail/worker.h: one thread that runs posted jobs in order.
//
// The job-queue loop several parts of kvbm need (the G4 fetch worker, the
// bounce engine's driver): post() queues a job and wakes the thread,
// wait_idle() returns once every job posted before it has run, stop() refuses
// new jobs, lets the queued ones run, and joins. A job that throws is logged
// and dropped; the worker goes on. The destructor stops.
//
// Thread-safety: post(), wait_idle() and stop() may be called from any thread
// but the worker's own (a job that waits for its own worker deadlocks).

#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "kvbm/detail/mutex.h"

namespace kvbm::detail {

/// One thread running posted jobs in order; see the file comment.
class Worker {
 public:
  /// Starts the thread. `name` appears in the log line of a job that throws.
  explicit Worker(std::string name);
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

 private:
  void run() noexcept;

  std::string name_;
  Mutex mu_;
  std::condition_variable cv_;       // a job, or stop
  std::condition_variable idle_cv_;  // the queue ran empty
  std::deque<std::function<void()>> jobs_ KVBM_GUARDED_BY(mu_);
  bool stop_ KVBM_GUARDED_BY(mu_) = false;
  bool running_ KVBM_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvbm::detail
