// kvbm/offload/cancel_sweeper.h: removes cancelled containers from the queues.
//
// A cancelled container ends its handle at once (it holds no block), but it
// may still sit in a queue or in the batcher. The CancelSweeper calls each
// of its targets (a function that sweeps one queue and returns how many
// items it removed) every `interval` on the clock, on its own thread (a
// detail::PeriodicWorker), so
// cancelled containers leave the pipeline promptly and never take a place
// in a batch. sweep_once() runs one pass on the calling thread.
//
// Thread-safety: add_target() before start(); the rest from any thread.
// Targets run on the sweeper's thread and must not throw.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"

namespace kvbm {

/// Sweeps cancelled items out of queues periodically; see the file comment.
class CancelSweeper {
 public:
  /// Throws UsageError when the clock is null or the interval not positive.
  CancelSweeper(std::shared_ptr<Clock> clock, std::chrono::nanoseconds interval);
  /// Stops the thread.
  ~CancelSweeper() = default;
  CancelSweeper(const CancelSweeper&) = delete;
  CancelSweeper& operator=(const CancelSweeper&) = delete;

  /// Adds a target; only before start().
  void add_target(std::function<std::size_t()> sweep);
  /// Runs every target once; returns the number of items removed.
  std::size_t sweep_once();
  /// Starts the periodic thread (the first pass comes one interval later).
  void start();
  /// Stops and joins the thread (a pass under way ends first). Idempotent.
  void stop();

  /// Returns the number of passes run (by the thread or sweep_once()).
  [[nodiscard]] std::uint64_t passes() const;
  /// Returns the number of items removed so far.
  [[nodiscard]] std::uint64_t swept() const;
  /// Blocks until at least `n` passes have run or `timeout` (real time)
  /// passes; returns whether they have.
  bool wait_passes(std::uint64_t n, std::chrono::nanoseconds timeout) const;
  [[nodiscard]] std::chrono::nanoseconds interval() const noexcept { return interval_; }

 private:
  std::shared_ptr<Clock> clock_;
  const std::chrono::nanoseconds interval_;
  std::vector<std::function<std::size_t()>> targets_;
  mutable detail::Mutex mu_;
  mutable std::condition_variable passes_cv_;  // wakes wait_passes()
  std::uint64_t passes_ KVBM_GUARDED_BY(mu_) = 0;
  std::uint64_t swept_ KVBM_GUARDED_BY(mu_) = 0;
  detail::Mutex sweep_mu_;                        // one pass at a time
  std::unique_ptr<detail::PeriodicWorker> loop_;  // from start(); last: stops first
};

}  // namespace kvbm
