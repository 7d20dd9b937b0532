// kvbm/clock.h: the injectable time source of kvbm.
//
// A component takes its clock from its kvbm::Env (kvbm/env.h). Its users: the
// offload pipelines (batcher, policy evaluator, transfer executor and its
// space wait, cancel sweeper), the remote store's decisions (a call's
// deadline, a server's backoff, a cluster map's refresh; its socket waits keep
// a real bound of the same length), the KV event publisher's flusher, every
// detail::PeriodicWorker loop, and the router side: the indexer's silence,
// the KvRouter's approximate TTL, the event feed and the ZMQ subscriber.
// kvbm-replay's cluster model drives a ManualClock in trace time.
//
// Every timed decision of the pipeline (a batch flushed after flush_interval,
// a sweep every sweep_interval, a policy over policy_timeout) reads a Clock,
// never the system clock directly, so tests can drive time by hand:
//
//     auto clock = std::make_shared<ManualClock>();
//     ... build the pipeline with .clock(clock) ...
//     clock->advance(10ms);   // wakes every stage waiting on a deadline
//
// A Clock has now() and wait_until(lock, cv, deadline): block on `cv` until
// notified or until the clock reaches `deadline` (spurious returns allowed;
// callers loop). SteadyClock maps that onto std::chrono::steady_clock.
// ManualClock's time moves only by advance(): a thread that waits on a
// (mutex, condition variable) pair first subscribes the pair (subscribe(),
// once, for as long as it uses it), and advance() notifies every subscribed
// pair under its mutex, so no wake-up is lost.
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <utility>

namespace kvbm {

/// A time source that stages wait on; see the file comment.
class Clock {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~Clock() = default;
  /// Returns the current time.
  [[nodiscard]] virtual time_point now() const noexcept = 0;
  /// Blocks on `cv` (with `lock` held by the caller, as for
  /// condition_variable::wait) until notified or until now() >= deadline.
  /// May return spuriously; the caller re-checks its condition.
  virtual void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          time_point deadline) = 0;

  /// Keeps a (mutex, condition variable) pair subscribed until destroyed.
  class Subscription {
   public:
    Subscription() = default;
    explicit Subscription(std::function<void()> unsubscribe)
        : unsubscribe_(std::move(unsubscribe)) {}
    Subscription(Subscription&& o) noexcept : unsubscribe_(std::exchange(o.unsubscribe_, {})) {}
    Subscription& operator=(Subscription&& o) noexcept {
      if (this != &o) {
        reset();
        unsubscribe_ = std::exchange(o.unsubscribe_, {});
      }
      return *this;
    }
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    ~Subscription() { reset(); }
    /// Unsubscribes now; afterwards the pair may be destroyed.
    void reset() noexcept {
      if (unsubscribe_) std::exchange(unsubscribe_, {})();
    }

   private:
    std::function<void()> unsubscribe_;
  };

  /// Subscribes `mu`/`cv` to be notified (with `mu` taken and released
  /// first) whenever the clock's time jumps. Needed before wait_until on a
  /// clock whose time does not flow by itself; a no-op for SteadyClock. Call
  /// it without holding `mu`.
  [[nodiscard]] virtual Subscription subscribe(std::mutex& mu, std::condition_variable& cv) {
    (void)mu;
    (void)cv;
    return {};
  }

  /// The process-wide steady clock.
  [[nodiscard]] static std::shared_ptr<Clock> steady();
};

/// std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const noexcept override;
  void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                  time_point deadline) override;
};

/// A clock that moves only when told to: for tests.
class ManualClock final : public Clock {
 public:
  /// Starts at `start` (default: an arbitrary fixed point, not zero).
  explicit ManualClock(time_point start = time_point(std::chrono::hours(1)));

  [[nodiscard]] time_point now() const noexcept override;
  void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                  time_point deadline) override;
  [[nodiscard]] Subscription subscribe(std::mutex& mu, std::condition_variable& cv) override;

  /// Moves time forward by `d` (>= 0) and wakes every waiter.
  void advance(duration d);
  /// Returns the number of threads blocked in wait_until right now.
  [[nodiscard]] std::size_t waiters() const;
  /// Returns how many times advance() was called.
  [[nodiscard]] std::uint64_t advances() const noexcept {
    return advances_.load(std::memory_order_relaxed);
  }

 private:
  struct Waiter {
    std::mutex* mu;
    std::condition_variable* cv;
  };
  std::atomic<std::int64_t> now_ns_;
  std::atomic<std::uint64_t> advances_{0};
  std::atomic<std::size_t> waiting_{0};
  // Taken before a subscriber's mutex, never after; shared so that a
  // Subscription may outlive the clock.
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::list<Waiter>> subscribers_ = std::make_shared<std::list<Waiter>>();
};

}  // namespace kvbm
