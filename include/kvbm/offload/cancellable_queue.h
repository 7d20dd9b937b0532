// kvbm/offload/cancellable_queue.h: the queue between two pipeline stages.
//
// A CancellableQueue<T> is a FIFO whose items can be cancelled while queued:
// sweep() removes every item whose `bool sweep()` member returns true (a
// cancelled container ends its handle and goes; a batch drops its cancelled
// containers and goes when empty). The CancelSweeper calls sweep()
// periodically, so a cancelled container does not sit in a queue.
//
// pop() blocks until an item arrives or the queue is closed; try_pop() does
// not block. An optional `on_push` callback runs after every successful push,
// outside the queue's lock (a consumer waiting on its own condition variable
// uses it to wake up). After close(), push() refuses items (returns false,
// leaving the item with the caller) and pop() returns nullopt.
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kvbm/detail/mutex.h"

namespace kvbm {

/// A closable FIFO with cancellation sweeps; see the file comment.
template <class T>
class CancellableQueue {
 public:
  /// A queue that runs `on_push` (if any) after every push.
  explicit CancellableQueue(std::function<void()> on_push = {}) : on_push_(std::move(on_push)) {}
  CancellableQueue(const CancellableQueue&) = delete;
  CancellableQueue& operator=(const CancellableQueue&) = delete;

  /// Appends `item` (moved from only on success); returns false when closed.
  bool push(T&& item) {
    {
      detail::LockGuard lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
    if (on_push_) on_push_();
    return true;
  }
  /// Blocks until an item is available (returns it) or the queue is closed
  /// (returns nullopt, even if items remain: drain() takes those).
  std::optional<T> pop() {
    detail::UniqueLock lock(mu_);
    cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return closed_ || !items_.empty(); });
    if (closed_) return std::nullopt;
    return take_front_locked();
  }
  /// Returns the first item, or nullopt when the queue is empty or closed.
  std::optional<T> try_pop() {
    detail::LockGuard lock(mu_);
    if (closed_ || items_.empty()) return std::nullopt;
    return take_front_locked();
  }
  /// Removes the items whose sweep() returns true; returns how many.
  std::size_t sweep() {
    detail::LockGuard lock(mu_);
    return std::erase_if(items_, [](T& item) { return item.sweep(); });
  }
  /// Refuses further pushes and wakes pop(). Idempotent.
  void close() {
    {
      detail::LockGuard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  /// Takes every queued item (also after close()).
  std::vector<T> drain() {
    detail::LockGuard lock(mu_);
    std::vector<T> out;
    out.reserve(items_.size());
    for (auto& item : items_) out.push_back(std::move(item));
    items_.clear();
    return out;
  }
  /// Returns the number of queued items.
  [[nodiscard]] std::size_t size() const {
    detail::LockGuard lock(mu_);
    return items_.size();
  }
  /// Returns true once close() was called.
  [[nodiscard]] bool closed() const {
    detail::LockGuard lock(mu_);
    return closed_;
  }

 private:
  T take_front_locked() KVBM_REQUIRES(mu_) {
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  const std::function<void()> on_push_;
  mutable detail::Mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_ KVBM_GUARDED_BY(mu_);
  bool closed_ KVBM_GUARDED_BY(mu_) = false;
};

}  // namespace kvbm
