// One thread that runs posted jobs in order (kvbm/detail/worker.h).

#include "kvbm/detail/worker.h"

#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"

namespace kvbm::detail {

Worker::Worker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

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
  idle_cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return jobs_.empty() && !running_; });
}

void Worker::stop() {
  {
    LockGuard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Worker::run() noexcept {
  for (;;) {
    std::function<void()> job;
    {
      UniqueLock lock(mu_);
      running_ = false;
      if (jobs_.empty()) idle_cv_.notify_all();
      cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopped, every job run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = true;
    }
    try {
      job();
    } catch (const std::exception& e) {
      try {
        logger()->error("{}: a job threw and was dropped: {}", name_, e.what());
      } catch (...) {  // NOLINT(bugprone-empty-catch): logging never ends the worker
      }
    } catch (...) {
      try {
        logger()->error("{}: a job threw and was dropped", name_);
      } catch (...) {  // NOLINT(bugprone-empty-catch): logging never ends the worker
      }
    }
  }
}

}  // namespace kvbm::detail
