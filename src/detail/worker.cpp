// The background loops of kvbm (kvbm/detail/worker.h).

#include "kvbm/detail/worker.h"

#include <pthread.h>

#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm::detail {
namespace {

// Runs `f`; what it throws is logged under `name` and dropped.
void run_logged(const std::string& name, const char* what,
                const std::function<void()>& f) noexcept {
  try {
    f();
  } catch (const std::exception& e) {
    try {
      logger()->error("{}: a {} threw and was dropped: {}", name, what, e.what());
    } catch (...) {  // NOLINT(bugprone-empty-catch): logging never ends the worker
    }
  } catch (...) {
    try {
      logger()->error("{}: a {} threw and was dropped", name, what);
    } catch (...) {  // NOLINT(bugprone-empty-catch): logging never ends the worker
    }
  }
}

// Names the calling thread after its worker (the first 15 bytes: what Linux keeps), so that
// top, gdb and /proc/<pid>/task/<tid>/comm tell kvbm's threads apart.
void name_this_thread(const std::string& name) noexcept {
  (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace

Worker::Worker(std::string name, std::size_t threads) : name_(std::move(name)) {
  KVBM_CHECK(threads >= 1, "Worker '", name_, "': needs at least one thread");
  threads_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  } catch (...) {  // system_error or bad_alloc: stop the threads started, rethrow
    stop();
    throw;
  }
}

Worker::~Worker() { stop(); }

bool Worker::post(std::function<void()> job) {
  {
    LockGuard lock(mu_);
    if (stop_) return false;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void Worker::wait_idle() {
  UniqueLock lock(mu_);
  idle_cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return jobs_.empty() && running_ == 0; });
}

void Worker::stop() {
  {
    LockGuard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  LockGuard joining(join_mu_);
  for (auto& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
}

void Worker::run() noexcept {
  name_this_thread(name_);
  bool ran = false;  // this thread has ended a job since it last looked
  for (;;) {
    std::function<void()> job;
    {
      UniqueLock lock(mu_);
      if (ran) --running_;
      if (jobs_.empty() && running_ == 0) idle_cv_.notify_all();
      cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopped, every job run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
    }
    run_logged(name_, "job", job);
    ran = true;
  }
}

PeriodicWorker::PeriodicWorker(std::string name, std::shared_ptr<Clock> clock,
                               Clock::duration period, std::function<void()> tick)
    : name_(std::move(name)), clock_(std::move(clock)), period_(period), tick_(std::move(tick)) {
  KVBM_CHECK(clock_ != nullptr, name_, ": the clock is null");
  KVBM_CHECK(period_.count() > 0, name_, ": the period must be positive (got ", period_.count(),
             " ns)");
  KVBM_CHECK(tick_ != nullptr, name_, ": the tick is empty");
  subscription_ = clock_->subscribe(mu_.native(), cv_);
  const Clock::time_point first = clock_->now() + period_;  // not when the thread gets going
  thread_ = std::thread([this, first] { run(first); });
}

PeriodicWorker::~PeriodicWorker() { stop(); }

void PeriodicWorker::wake() {
  {
    LockGuard lock(mu_);
    if (woken_) return;
    woken_ = true;
  }
  cv_.notify_all();
}

void PeriodicWorker::stop() {
  {
    LockGuard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  LockGuard joining(join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  subscription_.reset();
}

std::uint64_t PeriodicWorker::ticks() const {
  LockGuard lock(mu_);
  return ticks_;
}

void PeriodicWorker::run(Clock::time_point next) noexcept {
  name_this_thread(name_);
  UniqueLock lock(mu_);
  while (!stop_) {
    if (!woken_ && clock_->now() < next) {
      clock_->wait_until(lock.native(), cv_, next);
      continue;
    }
    woken_ = false;
    // The next tick is due one period after this one began: a clock moved
    // while the tick ran (a test's ManualClock, say) is not lost.
    const Clock::time_point began = clock_->now();
    lock.unlock();
    run_logged(name_, "tick", tick_);
    lock.lock();
    ++ticks_;
    next = began + period_;
  }
}

}  // namespace kvbm::detail
