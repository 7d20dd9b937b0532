#include "kvbm/offload/cancel_sweeper.h"

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"

namespace kvbm {

CancelSweeper::CancelSweeper(std::shared_ptr<Clock> clock, std::chrono::nanoseconds interval)
    : clock_(std::move(clock)), interval_(interval) {
  KVBM_CHECK(clock_ != nullptr, "CancelSweeper: the clock is null");
  KVBM_CHECK(interval_.count() > 0, "CancelSweeper: sweep_interval must be positive (got ",
             interval_.count(), " ns)");
}

void CancelSweeper::add_target(std::function<std::size_t()> sweep) {
  KVBM_CHECK(loop_ == nullptr, "CancelSweeper::add_target after start()");
  KVBM_CHECK(sweep != nullptr, "CancelSweeper::add_target: empty target");
  targets_.push_back(std::move(sweep));
}

std::size_t CancelSweeper::sweep_once() {
  std::size_t n = 0;
  {
    detail::LockGuard one(sweep_mu_);
    for (const auto& t : targets_) n += t();
  }
  {
    detail::LockGuard lock(mu_);
    ++passes_;
    swept_ += n;
  }
  passes_cv_.notify_all();
  return n;
}

void CancelSweeper::start() {
  KVBM_CHECK(loop_ == nullptr, "CancelSweeper::start called twice");
  loop_ = std::make_unique<detail::PeriodicWorker>("cancel sweeper", clock_, interval_,
                                                   [this] { sweep_once(); });
}

void CancelSweeper::stop() {
  if (loop_) loop_->stop();
}

std::uint64_t CancelSweeper::passes() const {
  detail::LockGuard lock(mu_);
  return passes_;
}

std::uint64_t CancelSweeper::swept() const {
  detail::LockGuard lock(mu_);
  return swept_;
}

bool CancelSweeper::wait_passes(std::uint64_t n, std::chrono::nanoseconds timeout) const {
  detail::UniqueLock lock(mu_);
  return passes_cv_.wait_for(lock.native(), timeout,
                             [&]() KVBM_REQUIRES(mu_) { return passes_ >= n; });
}

}  // namespace kvbm
