#include "kvbm/clock.h"

#include "kvbm/error.h"

namespace kvbm {

std::shared_ptr<Clock> Clock::steady() {
  static const std::shared_ptr<Clock> kClock = std::make_shared<SteadyClock>();
  return kClock;
}

Clock::time_point SteadyClock::now() const noexcept {
  return std::chrono::time_point_cast<duration>(std::chrono::steady_clock::now());
}

void SteadyClock::wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                             time_point deadline) {
  if (deadline == time_point::max()) {
    cv.wait(lock);
  } else {
    cv.wait_until(lock, deadline);
  }
}

ManualClock::ManualClock(time_point start) : now_ns_(start.time_since_epoch().count()) {}

Clock::time_point ManualClock::now() const noexcept {
  return time_point(duration(now_ns_.load(std::memory_order_acquire)));
}

void ManualClock::wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                             time_point deadline) {
  // now_ns_ is written before advance() takes the subscribers' mutexes, and
  // the caller holds its mutex from its own check through this test into
  // cv.wait: an advance either is seen here or notifies the wait.
  if (now() >= deadline) return;
  waiting_.fetch_add(1, std::memory_order_relaxed);
  cv.wait(lock);
  waiting_.fetch_sub(1, std::memory_order_relaxed);
}

Clock::Subscription ManualClock::subscribe(std::mutex& mu, std::condition_variable& cv) {
  std::list<Waiter>::iterator it;
  {
    std::lock_guard lock(*mu_);
    it = subscribers_->insert(subscribers_->end(), Waiter{&mu, &cv});
  }
  return Subscription([m = mu_, subs = subscribers_, it] {
    std::lock_guard lock(*m);
    subs->erase(it);
  });
}

void ManualClock::advance(duration d) {
  KVBM_CHECK(d.count() >= 0, "ManualClock::advance: time only moves forward (got ", d.count(),
             " ns)");
  now_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  advances_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(*mu_);
  for (const Waiter& w : *subscribers_) {
    { std::lock_guard sub(*w.mu); }
    w.cv->notify_all();
  }
}

std::size_t ManualClock::waiters() const { return waiting_.load(std::memory_order_relaxed); }

}  // namespace kvbm
