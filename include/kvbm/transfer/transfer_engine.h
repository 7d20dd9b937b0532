// kvbm/transfer/transfer_engine.h: the one interface every copy path implements.
//
// A transfer engine moves whole blocks along one path (host -> host, device ->
// host, host -> disk, disk -> device, ...). It is built for a source and a
// destination (their layouts and storage) and takes batches of (source block,
// destination block) pairs. submit() returns at once; the copy runs on the
// engine's own threads or streams, never the caller's, and the returned
// TransferCompletion is signalled exactly once with the outcome: which pairs
// failed (by index in the batch) and why (one TransferError, the first
// failure: kvbm/transfer/transfer_error.h). A pair that failed must not be
// used: its destination holds undefined bytes. The source is never modified.
//
// Errors: a batch that is empty, names a block out of range or names a
// destination block twice is misuse, refused by submit() with UsageError
// before anything starts; every engine makes that one check through
// TransferEngine::check_batch(). Whatever fails after submit() returned
// (I/O, CUDA, verification) comes back in the outcome, never as an exception.
// A caller that must not throw (a worker thread) submits through
// submit_or_refuse(), which turns a refused batch into a failed outcome.
//
// Thread-safety: submit() may be called from several threads; completions
// may be waited on from any thread. Destroying an engine waits for the
// batches it accepted.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/blocks/block_id.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/transfer/transfer_error.h"
#include "kvbm/transfer/transfer_metrics.h"  // TransferCounts

namespace kvbm {

/// Copy source block `src` to destination block `dst`. `hash` is the
/// sequence hash value the bytes belong to: engines that store bytes with
/// their identity (the disk slot's footer) record it on write and refuse to
/// read a slot recorded for another hash, so bytes are never served under a
/// hash they were not written for. Callers without a hash (raw copies, tests)
/// leave it 0, which is then the identity written and expected.
struct TransferPair {
  BlockId src = 0;
  BlockId dst = 0;
  std::uint64_t hash = 0;
  friend bool operator==(const TransferPair&, const TransferPair&) = default;
};

/// What happened to a batch.
struct TransferOutcome {
  std::vector<std::size_t>
      failed;  ///< indices (into the batch) of pairs whose copy failed, ascending
  /// The first failure; set exactly when `failed` is not empty.
  std::optional<TransferError> error;

  [[nodiscard]] bool ok() const noexcept { return failed.empty(); }
  /// Returns the first failure's message; empty when none.
  [[nodiscard]] std::string_view message() const noexcept {
    return error ? std::string_view(error->message) : std::string_view();
  }
  /// Returns the outcome of a batch of `pairs` pairs that all failed with `error`.
  [[nodiscard]] static TransferOutcome all_failed(std::size_t pairs, TransferError error) {
    TransferOutcome o;
    o.failed.resize(pairs);
    for (std::size_t i = 0; i < pairs; ++i) o.failed[i] = i;
    o.error = std::move(error);
    return o;
  }
  /// As all_failed() with kind kNoMemory, for a path where memory already ran
  /// out and nothing may throw: records as much as memory allows.
  [[nodiscard]] static TransferOutcome all_failed_no_memory(std::size_t pairs,
                                                            const char* what) noexcept {
    TransferOutcome o;
    try {
      o.failed.reserve(pairs);
      for (std::size_t i = 0; i < pairs; ++i) o.failed.push_back(i);
      o.error = TransferError{ErrorKind::kNoMemory, 0, what};
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): nothing more can be recorded
    }
    return o;
  }
};

/// A one-shot signal carrying a batch's outcome.
class TransferCompletion {
 public:
  /// Records the outcome, runs the callbacks (outside the lock, on this
  /// thread), then wakes waiters: when wait() returns, every callback
  /// registered before it has run, so a waiter may release what the callbacks
  /// use. Only the first call has an effect. A callback must not wait() on
  /// the completion that runs it (it is handed the outcome).
  void complete(TransferOutcome outcome) noexcept {
    std::vector<std::function<void(const TransferOutcome&)>> callbacks;
    {
      detail::LockGuard lock(mu_);
      if (completing_) return;
      completing_ = true;
      outcome_ = std::move(outcome);
      callbacks.swap(callbacks_);
    }
    for (;;) {
      for (auto& cb : callbacks) cb(outcome_);
      callbacks.clear();
      detail::LockGuard lock(mu_);
      if (callbacks_.empty()) {  // none registered while the others ran
        done_ = true;
        break;
      }
      callbacks.swap(callbacks_);
    }
    cv_.notify_all();
  }
  /// Returns true once the outcome is known.
  [[nodiscard]] bool done() const {
    detail::LockGuard lock(mu_);
    return done_;
  }
  /// Blocks until done; returns the outcome.
  const TransferOutcome& wait() const {
    detail::UniqueLock lock(mu_);
    cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return done_; });
    return outcome_;
  }
  /// Blocks until done or the timeout; returns whether it is done.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    detail::UniqueLock lock(mu_);
    return cv_.wait_for(lock.native(), timeout, [&]() KVBM_REQUIRES(mu_) { return done_; });
  }
  /// Runs `cb` with the outcome when done (at once, on this thread, if it
  /// already is; else on the thread that completes). `cb` must not throw.
  void on_complete(std::function<void(const TransferOutcome&)> cb) {
    {
      detail::LockGuard lock(mu_);
      if (!done_) {
        callbacks_.push_back(std::move(cb));
        return;
      }
    }
    cb(outcome_);
  }

 private:
  mutable detail::Mutex mu_;
  mutable std::condition_variable cv_;
  bool completing_ KVBM_GUARDED_BY(mu_) = false;  // set by the first complete()
  bool done_ KVBM_GUARDED_BY(mu_) = false;        // set once the callbacks have run
  TransferOutcome outcome_;  // written once, under mu_, before completing_ is set
  std::vector<std::function<void(const TransferOutcome&)>> callbacks_ KVBM_GUARDED_BY(mu_);
};

/// Moves blocks along one path.
class TransferEngine {
 public:
  virtual ~TransferEngine() = default;
  /// Returns the path's name, e.g. "host_to_disk"; used in metrics and logs.
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Starts copying every pair; returns the batch's completion. Throws
  /// UsageError (before starting anything) when the batch is empty, a block
  /// id is out of range or a destination block appears twice (check_batch).
  [[nodiscard]] virtual std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) = 0;
  /// Returns what the engine has moved since it was built, as its
  /// kvbm_transfer_*_total{path=name()} series count it (the same counters,
  /// read); nullopt when it publishes none (built without a registry, or an
  /// engine that is counted in its parts, as a bounce engine in its hops).
  [[nodiscard]] virtual std::optional<TransferCounts> counts() const noexcept {
    return std::nullopt;
  }

 protected:
  /// The one batch check of every engine's submit(): throws UsageError,
  /// naming `engine` and the offending pair, unless `pairs` is not empty,
  /// every source id is below `src_blocks`, every destination id below
  /// `dst_blocks`, and no destination id appears twice (two copies into one
  /// block would race).
  static void check_batch(std::string_view engine, std::span<const TransferPair> pairs,
                          std::size_t src_blocks, std::size_t dst_blocks);
};

/// Submits `pairs` to `engine`. When submit() throws a std::exception (the
/// engine refused the batch, or memory ran out before anything started),
/// returns a completion that is already done, every pair failed with
/// ErrorKind::kRefused (kNoMemory for std::bad_alloc) and the exception's
/// message, instead of throwing: for callers on a worker thread or with
/// blocks to hand back whatever happens. Throws only std::bad_alloc (no
/// memory for that completion).
[[nodiscard]] std::shared_ptr<TransferCompletion> submit_or_refuse(
    TransferEngine& engine, std::span<const TransferPair> pairs);

}  // namespace kvbm
