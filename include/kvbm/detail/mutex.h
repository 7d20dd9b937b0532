// kvbm/detail/mutex.h: a std::mutex (and a std::shared_mutex) that clang's
// thread-safety analysis sees.
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
//
// detail::SharedMutex is a std::shared_mutex annotated the same way: writers
// hold it through WriterLock, readers share it through ReaderLock, and a
// member function that only reads says KVBM_REQUIRES_SHARED(mu_).

#pragma once

#include <mutex>
#include <shared_mutex>

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

/// A std::shared_mutex annotated as a capability: one writer or many readers.
class KVBM_CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() KVBM_ACQUIRE() { mu_.lock(); }
  void unlock() KVBM_RELEASE() { mu_.unlock(); }
  void lock_shared() KVBM_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() KVBM_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

/// Holds a SharedMutex exclusively for its lifetime (std::unique_lock's role).
class KVBM_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) KVBM_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() KVBM_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

/// Holds a SharedMutex shared for its lifetime (std::shared_lock's role).
class KVBM_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) KVBM_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() KVBM_RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace kvbm::detail
