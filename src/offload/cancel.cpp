#include "kvbm/offload/cancel.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/offload/precondition.h"

namespace kvbm {

struct CancellationToken::State {
  detail::Mutex mu;
  std::atomic<bool> cancelled{false};  // written under mu
  std::atomic<bool> requested{false};
  std::atomic<bool> sealed{false};  // written under mu
  CallbackId next_id KVBM_GUARDED_BY(mu) = 1;
  std::vector<std::pair<CallbackId, std::function<void()>>> callbacks KVBM_GUARDED_BY(mu);
};

CancellationToken::CancellationToken() : s_(std::make_shared<State>()) {}

bool CancellationToken::cancel() const {
  std::vector<std::pair<CallbackId, std::function<void()>>> callbacks;
  {
    detail::LockGuard lock(s_->mu);
    s_->requested.store(true, std::memory_order_release);
    if (s_->cancelled.load(std::memory_order_relaxed) ||
        s_->sealed.load(std::memory_order_relaxed)) {
      return false;
    }
    s_->cancelled.store(true, std::memory_order_release);
    callbacks.swap(s_->callbacks);
  }
  for (auto& [id, cb] : callbacks) cb();
  return true;
}

bool CancellationToken::is_cancelled() const noexcept {
  return s_->cancelled.load(std::memory_order_acquire);
}

bool CancellationToken::cancel_requested() const noexcept {
  return s_->requested.load(std::memory_order_acquire);
}

bool CancellationToken::try_seal() const {
  detail::LockGuard lock(s_->mu);
  if (s_->cancelled.load(std::memory_order_relaxed)) return false;
  if (!s_->sealed.load(std::memory_order_relaxed)) {
    s_->sealed.store(true, std::memory_order_release);
    s_->callbacks.clear();  // can never run now
  }
  return true;
}

bool CancellationToken::is_sealed() const noexcept {
  return s_->sealed.load(std::memory_order_acquire);
}

CancellationToken::CallbackId CancellationToken::on_cancel(std::function<void()> cb) const {
  {
    detail::LockGuard lock(s_->mu);
    if (s_->sealed.load(std::memory_order_relaxed)) return 0;
    if (!s_->cancelled.load(std::memory_order_relaxed)) {
      const CallbackId id = s_->next_id++;
      s_->callbacks.emplace_back(id, std::move(cb));
      return id;
    }
  }
  cb();
  return 0;
}

void CancellationToken::remove_callback(CallbackId id) const noexcept {
  if (id == 0) return;
  std::function<void()> dropped;  // destroyed outside the lock
  detail::LockGuard lock(s_->mu);
  auto& cbs = s_->callbacks;
  for (auto it = cbs.begin(); it != cbs.end(); ++it) {
    if (it->first == id) {
      dropped = std::move(it->second);
      cbs.erase(it);
      break;
    }
  }
}

void HostEvent::signal() {
  std::vector<std::function<void()>> callbacks;
  {
    detail::LockGuard lock(mu_);
    if (met_) return;
    met_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& cb : callbacks) cb();
}

bool HostEvent::is_met() const {
  detail::LockGuard lock(mu_);
  return met_;
}

void HostEvent::on_met(std::function<void()> cb) {
  {
    detail::LockGuard lock(mu_);
    if (!met_) {
      callbacks_.push_back(std::move(cb));
      return;
    }
  }
  cb();
}

bool HostEvent::wait_for(std::chrono::nanoseconds timeout) const {
  detail::UniqueLock lock(mu_);
  return cv_.wait_for(lock.native(), timeout, [&]() KVBM_REQUIRES(mu_) { return met_; });
}

}  // namespace kvbm
