// kvbm/detail/mutex.h: a std::mutex that clang's thread-safety analysis sees.
//
// libstdc++'s std::mutex and its lock types carry no annotations, so
// KVBM_GUARDED_BY(mu_) on a member guarded by a std::mutex cannot be checked.
// detail::Mutex is a std::mutex with the annotations (kvbm/detail/
// thread_annotations.h); detail::LockGuard and detail::UniqueLock are
// std::lock_guard and std::unique_lock over it. They cost nothing: every
// member is an inline call to the standard type.
//
// Waiting on a std::condition_variable goes through UniqueLock::native():
//
//   detail::UniqueLock lock(mu_);
//   cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return stop_; });

#pragma once

#include <mutex>

#include "kvbm/detail/thread_annotations.h"

namespace kvbm::detail {

/// A std::mutex annotated as a capability.
class KVBM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() KVBM_ACQUIRE() { mu_.lock(); }
  void unlock() KVBM_RELEASE() { mu_.unlock(); }
  [[nodiscard]] bool try_lock() KVBM_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  /// The standard mutex, for std::unique_lock and condition variables.
  [[nodiscard]] std::mutex& native() noexcept { return mu_; }

 private:
  std::mutex mu_;
};

/// std::lock_guard over a Mutex: holds it for its lifetime.
class KVBM_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Mutex& mu) KVBM_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~LockGuard() KVBM_RELEASE() { mu_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& mu_;
};

/// std::unique_lock over a Mutex: holds it from construction, may unlock and
/// lock again, releases it (if held) on destruction.
class KVBM_SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) KVBM_ACQUIRE(mu) : lock_(mu.native()) {}
  ~UniqueLock() KVBM_RELEASE() = default;
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() KVBM_ACQUIRE() { lock_.lock(); }
  void unlock() KVBM_RELEASE() { lock_.unlock(); }
  /// The standard lock, for std::condition_variable::wait (which gives the
  /// mutex back before it returns, so the analysis' view stays right).
  [[nodiscard]] std::unique_lock<std::mutex>& native() noexcept { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kvbm::detail
