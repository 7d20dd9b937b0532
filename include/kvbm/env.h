// kvbm/env.h: the one runtime every component of kvbm runs on, as leveldb's Env.
//
// An Env holds what a component needs from the world outside its own data:
// the time (a kvbm::Clock), the background threads (made as detail::Worker or
// detail::PeriodicWorker, never as a raw std::thread) and the syscalls (an
// io::SyscallTable). KvBlockManagerConfig::env and RemoteStoreOptions::env
// take one; the facade hands its Env to every part it builds: the offload
// pipelines (flush, sweep, policy timeout, the executor's space wait), the
// remote store (its deadlines, backoff and cluster map refresh; its
// per-server queues run on the Env's workers), the disk engines' and the
// disk recovery's threads, and the KV event sink's replay thread.
//
// Time that decides and time that bounds: every *decision* about time (is a
// deadline past, is a backoff over, is a refresh due, is a batch old enough)
// reads env.clock(), so a test drives it with a ManualClock and no sleep. A
// wait on the operating system (poll on a socket, a connect) still needs a
// real bound and takes it from std::chrono::steady_clock, for the same
// duration: with a ManualClock a frozen server still ends a call after its
// real command_timeout, as kTimeout.
//
// Syscalls: an Env given a table sends the remote store's requests (sendmsg)
// through it, for that store alone; the disk tier still calls through the
// process-wide table in force (io::syscalls(), ScopedSyscallOverride).
// Env::standard() is the steady clock and the syscall table in force (the
// real one unless a test overrides it). A null shared_ptr<Env> in an options
// struct means Env::standard().
//
// Lifetime: shared; an Env outlives every worker made from it only through
// the shared_ptr its users keep. Thread-safety: immutable after construction;
// every member may be called from any thread.

#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "kvbm/clock.h"
#include "kvbm/detail/worker.h"
#include "kvbm/io/syscalls.h"

namespace kvbm {

/// The clock, the workers and the syscalls of a component; see the file comment.
class Env {
 public:
  /// An Env on `clock` (null: the steady clock) and `syscalls` (null: the
  /// table in force at each call, io::syscalls()).
  explicit Env(std::shared_ptr<Clock> clock = nullptr,
               const io::SyscallTable* syscalls = nullptr) noexcept
      : clock_(clock ? std::move(clock) : Clock::steady()), syscalls_(syscalls) {}

  /// Returns the process-wide standard Env: the steady clock, the syscalls in force.
  [[nodiscard]] static const std::shared_ptr<Env>& standard() {
    static const std::shared_ptr<Env> kStandard = std::make_shared<Env>();
    return kStandard;
  }
  /// Returns `env`, or standard() when it is null.
  [[nodiscard]] static std::shared_ptr<Env> or_standard(std::shared_ptr<Env> env) {
    if (env) return env;
    return standard();
  }

  /// Returns the clock every timed decision reads.
  [[nodiscard]] const std::shared_ptr<Clock>& clock() const noexcept { return clock_; }
  /// Returns the current time on clock().
  [[nodiscard]] Clock::time_point now() const noexcept { return clock_->now(); }
  /// Returns the syscall table: the one given, else the one in force now.
  [[nodiscard]] const io::SyscallTable& syscalls() const noexcept {
    return syscalls_ != nullptr ? *syscalls_ : io::syscalls();
  }

  /// Starts a worker of `threads` threads running posted jobs (detail::Worker).
  [[nodiscard]] std::unique_ptr<detail::Worker> make_worker(std::string name,
                                                            std::size_t threads = 1) const {
    return std::make_unique<detail::Worker>(std::move(name), threads);
  }
  /// Starts a loop ticking every `period` of clock(), or when woken (detail::PeriodicWorker).
  [[nodiscard]] std::unique_ptr<detail::PeriodicWorker> make_periodic(
      std::string name, Clock::duration period, std::function<void()> tick) const {
    return std::make_unique<detail::PeriodicWorker>(std::move(name), clock_, period,
                                                    std::move(tick));
  }

 private:
  std::shared_ptr<Clock> clock_;
  const io::SyscallTable* syscalls_;
};

}  // namespace kvbm
