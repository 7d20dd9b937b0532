// kvbm/offload/transfer_handle.h: the caller's view of one enqueued container.
//
// OffloadPipeline::enqueue returns a TransferHandle. Through it the caller
// follows the container (status()), waits for it (wait(), wait_for()), reads
// what became of each block (report()) and cancels it (cancel()).
//
// Status moves forward only:
//
//     kQueued -> kWaiting -> kBatched -> kTransferring -> kDone | kFailed
//         \__________\___________\______________________-> kCancelled
//
//   kQueued        in the policy stage's queue or being evaluated
//   kWaiting       waiting for its precondition (forward pass done)
//   kBatched       in the batcher or waiting for a transfer slot
//   kTransferring  committed (P3): its blocks are pinned and being copied
//   kDone          every block ended as transferred, already present,
//                  filtered or evicted (nothing failed)
//   kFailed        at least one block could not be offloaded: it did not
//                  fit in the destination (kNoSpace) or its copy failed
//                  (kCopyFailed); failed_blocks() names them
//   kCancelled     cancelled before the commitment point; nothing was copied
//                  and no block of the container is held
//
// Waiting (wait(), or wait_for() with a positive timeout) also asks the
// pipeline not to hold the container back for batching: its batch is
// flushed as soon as it reaches the batcher, without waiting for
// min_batch_size blocks or the flush_interval. Batching trades latency for
// throughput only while nobody waits.
//
// cancel() (P1: the container is the unit of cancellation) returns only
// when every block of the container has been released: at once when the
// container had not passed the commitment point, else after its transfer
// completed (the committed container is never abandoned half-way).
//
// Thread-safety: copies of a handle share one state; every member may be
// called from any thread. Dropping every handle does not cancel.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/offload/cancel.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

class OffloadMetrics;

/// Where a container is; see the file comment.
enum class TransferStatus : std::uint8_t {
  kQueued,
  kWaiting,
  kBatched,
  kTransferring,
  kDone,
  kFailed,
  kCancelled,
};

/// Returns "queued", "waiting", ... .
[[nodiscard]] std::string_view to_string(TransferStatus s) noexcept;
/// Returns true for kDone, kFailed and kCancelled.
[[nodiscard]] constexpr bool is_terminal(TransferStatus s) noexcept {
  return s == TransferStatus::kDone || s == TransferStatus::kFailed ||
         s == TransferStatus::kCancelled;
}

/// What became of one block.
enum class BlockOutcome : std::uint8_t {
  kTransferred,     ///< copied and registered in the destination
  kAlreadyPresent,  ///< the destination already held the hash at transfer time; not copied
  kFiltered,        ///< a policy filtered it (or timed out)
  kEvicted,         ///< evicted from the source before the commitment point; dropped
  kNoSpace,         ///< the destination had no block for it (failure)
  kCopyFailed,      ///< the engine reported its copy failed; not registered (failure)
};

/// Returns "transferred", "already_present", ... (the metrics label).
[[nodiscard]] std::string_view to_string(BlockOutcome o) noexcept;
/// Returns true for the outcomes that make a container kFailed.
[[nodiscard]] constexpr bool is_failure(BlockOutcome o) noexcept {
  return o == BlockOutcome::kNoSpace || o == BlockOutcome::kCopyFailed;
}

/// One block's outcome.
struct BlockResult {
  SequenceHash hash;
  BlockOutcome outcome = BlockOutcome::kTransferred;
  friend bool operator==(const BlockResult&, const BlockResult&) = default;
};

/// What became of a container's blocks, in the order they were resolved.
/// Complete once the status is kDone or kFailed; a cancelled container lists
/// only what was resolved before the cancellation (e.g. filtered blocks).
struct OffloadReport {
  std::vector<BlockResult> blocks;
  std::optional<Error> error;  ///< the first copy error reported by the engine, if any

  /// Returns how many blocks ended with `o`.
  [[nodiscard]] std::size_t count(BlockOutcome o) const noexcept;
  /// Returns the hashes of the blocks that ended with `o`, in order.
  [[nodiscard]] std::vector<SequenceHash> hashes(BlockOutcome o) const;
  /// Returns the blocks whose outcome is a failure.
  [[nodiscard]] std::vector<BlockResult> failed() const;
};

namespace detail {

/// What a handle's first wait reaches: the pipeline's wake-up, until the
/// pipeline shuts down (not part of the public API).
struct WaitLink {
  detail::Mutex mu;
  std::function<void()> wake KVBM_GUARDED_BY(mu);  // empty once cut

  void notify() {
    detail::LockGuard lock(mu);
    if (wake) wake();
  }
  void cut() {
    detail::LockGuard lock(mu);
    wake = nullptr;
  }
};

/// The state a handle and its container share (not part of the public API).
class OffloadState {
 public:
  /// A state for `block_count` blocks; its final outcome is counted in
  /// `metrics` when that still exists.
  explicit OffloadState(std::size_t block_count, std::weak_ptr<OffloadMetrics> metrics = {})
      : block_count_(block_count), metrics_(std::move(metrics)) {}

  /// The container's token (P2: the container carries a copy).
  const CancellationToken token;

  /// Moves the status forward to `s` (never backward, never out of a
  /// terminal state, never to a terminal state: use finish*).
  void advance(TransferStatus s);
  /// Records blocks' outcomes.
  void add_result(const SequenceHash& hash, BlockOutcome o);
  /// Records the engine's error (the first one wins).
  void add_error(Error error);
  /// Ends as kFailed when a failure was recorded, else kDone. Idempotent.
  void finish();
  /// Ends as kCancelled unless already terminal.
  void finish_cancelled();

  [[nodiscard]] TransferStatus status() const;
  [[nodiscard]] OffloadReport report() const;
  [[nodiscard]] std::size_t block_count() const noexcept { return block_count_; }
  /// Waits until terminal or the timeout; returns the status.
  TransferStatus wait_for(std::chrono::nanoseconds timeout) const;
  /// Waits until terminal; returns the status.
  TransferStatus wait() const;

  /// Sets whom the first wait tells that someone waits (the pipeline sets
  /// it before the state is shared).
  void set_wait_link(std::weak_ptr<WaitLink> link) { wait_link_ = std::move(link); }
  /// Returns true once someone waited (or waits) for the container.
  [[nodiscard]] bool waited() const noexcept { return waited_.load(std::memory_order_acquire); }

 private:
  void finish_locked(TransferStatus s) KVBM_REQUIRES(mu_);
  void note_waiter() const;

  const std::size_t block_count_;
  const std::weak_ptr<OffloadMetrics> metrics_;
  mutable detail::Mutex mu_;
  mutable std::condition_variable cv_;
  TransferStatus status_ KVBM_GUARDED_BY(mu_) = TransferStatus::kQueued;
  bool failed_ KVBM_GUARDED_BY(mu_) = false;
  OffloadReport report_ KVBM_GUARDED_BY(mu_);
  std::weak_ptr<WaitLink> wait_link_;  // fixed before sharing
  mutable std::atomic<bool> waited_{false};
};

}  // namespace detail

/// The caller's handle on one enqueued container; see the file comment.
class TransferHandle {
 public:
  /// An empty handle (valid() is false); every other member throws UsageError.
  TransferHandle() = default;
  /// Wraps a container's state (used by the pipeline).
  explicit TransferHandle(std::shared_ptr<detail::OffloadState> state) : s_(std::move(state)) {}

  /// Returns false for a default-constructed handle.
  [[nodiscard]] bool valid() const noexcept { return s_ != nullptr; }
  /// Returns the current status.
  [[nodiscard]] TransferStatus status() const;
  /// Returns the number of blocks enqueued.
  [[nodiscard]] std::size_t block_count() const;
  /// Blocks until the container reaches a terminal status; returns it.
  /// Its batch is flushed without waiting for more blocks (file comment).
  TransferStatus wait() const;
  /// Blocks until terminal or `timeout` (real time) passes; returns true
  /// when terminal. A positive timeout flushes like wait().
  bool wait_for(std::chrono::nanoseconds timeout) const;
  /// Cancels the container (P1) and returns once none of its blocks is held:
  /// true when it was cancelled, false when it had already passed the
  /// commitment point (cancel then waits for it to complete) or had ended.
  bool cancel() const;
  /// Returns the blocks' outcomes so far (complete once terminal).
  [[nodiscard]] OffloadReport report() const;
  /// Returns the blocks that failed (kNoSpace, kCopyFailed).
  [[nodiscard]] std::vector<BlockResult> failed_blocks() const;
  /// Returns the container's cancellation token.
  [[nodiscard]] const CancellationToken& token() const;

 private:
  void check(const char* call) const;
  std::shared_ptr<detail::OffloadState> s_;
};

}  // namespace kvbm
