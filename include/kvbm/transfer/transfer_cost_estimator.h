// kvbm/transfer/transfer_cost_estimator.h: what one copy path costs, learned from its batches.
//
// A TransferCostEstimator keeps, per block size (bytes per block: a hybrid
// manager's groups differ), a window of the path's most recent batches: how
// many blocks each moved and how long it took. Older batches fall out of the
// window, so the estimate follows the path as it changes (a disk queue that
// fills, a network that slows down). From the window it answers:
//
//   predict(blocks, bytes)  the expected (median) and tail (p99) duration of
//                           a batch of that many blocks of that size
//   summary()               per block size: batches in the window, the batch
//                           duration's median and p99, and the throughput
//                           (bytes moved / time spent, over the window)
//
// The model. A batch costs a fixed latency plus a time per block: the
// window's least-squares line through (blocks, duration), kept to a latency
// >= 0 and a time per block >= 0: through the origin when the fitted latency
// would be negative or every batch has one size (then latency and time per
// block cannot be told apart: the cost is taken as per block), flat when the
// slope would be negative. Each batch's duration over the line's value for its
// size is its ratio; predict(n) is the line at n times the ratios' median
// (expected) and p99 (tail), so one slow batch in a hundred moves the tail,
// not the median (quantiles by nearest rank: p99 of 100 ratios is the
// 99th smallest). A block size with no batches is predicted from the size
// with the most batches, its time per block scaled by the bytes; with no
// batches at all the estimate is unknown (known = false).
//
// Deterministic: the same batches recorded in the same order give the same
// answers (no clock is read here; the caller measures each batch on its own
// clock, so a test feeds a ManualClock's durations). A "block" may be any
// unit: the facade's prefill estimate feeds tokens with a size of 1.
//
// Cost: record() writes one slot of a ring under a mutex (the copy path's
// only cost); the model is refitted lazily, by the first predict() or
// summary() after a record (O(window log window)).
//
// Thread-safety: every member from any thread.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "kvbm/detail/mutex.h"

namespace kvbm {

/// The predicted duration of one batch.
struct TransferCostPrediction {
  bool known = false;                   ///< false: no batch measured yet (durations are 0)
  std::chrono::nanoseconds expected{};  ///< the median case
  std::chrono::nanoseconds tail{};      ///< the p99 case (>= expected)
};

/// A batch cost model, fitted from a window (see the file comment); a plain value.
struct TransferCostModel {
  bool known = false;
  double latency_s = 0;    ///< fixed cost per batch, seconds
  double per_block_s = 0;  ///< cost per block, seconds
  double ratio_p50 = 1;    ///< median of measured / fitted
  double ratio_p99 = 1;    ///< p99 of measured / fitted
  /// Returns the predicted duration of a batch of `blocks` (0 blocks: free).
  [[nodiscard]] TransferCostPrediction predict(std::size_t blocks) const noexcept;
};

/// One block size's window, summarized.
struct TransferCostSummary {
  std::size_t block_bytes = 0;
  std::size_t batches = 0;         ///< batches in the window
  std::uint64_t recorded = 0;      ///< batches recorded since construction
  std::chrono::nanoseconds p50{};  ///< median batch duration
  std::chrono::nanoseconds p99{};  ///< p99 batch duration
  double bytes_per_second = 0;     ///< window bytes / window seconds (0: unknown)
  TransferCostModel model;         ///< what predict() uses
};

/// Online cost estimate of one copy path; see the file comment.
class TransferCostEstimator {
 public:
  /// Keeps the last `window` (>= 1) batches per block size.
  explicit TransferCostEstimator(std::size_t window = 128);

  /// Records one finished batch of `blocks` blocks of `block_bytes` bytes
  /// that took `duration` (negative counts as 0; a batch of 0 blocks is ignored).
  void record(std::size_t blocks, std::size_t block_bytes,
              std::chrono::nanoseconds duration) noexcept;
  /// Returns the predicted duration of a batch of `blocks` of `block_bytes`.
  [[nodiscard]] TransferCostPrediction predict(std::size_t blocks, std::size_t block_bytes) const;
  /// Returns the model predict() uses for `block_bytes` (known = false: none).
  [[nodiscard]] TransferCostModel model(std::size_t block_bytes) const;
  /// Returns every block size's summary, smallest size first.
  [[nodiscard]] std::vector<TransferCostSummary> summary() const;
  /// Returns the window length.
  [[nodiscard]] std::size_t window() const noexcept { return window_; }

 private:
  struct Sample {
    std::size_t blocks = 0;
    std::int64_t ns = 0;
  };
  struct Size {
    std::vector<Sample> ring;  // up to window_ samples; `next` is the oldest once full
    std::size_t next = 0;
    std::uint64_t recorded = 0;
    bool dirty = true;
    TransferCostSummary fitted;
  };
  const TransferCostSummary& refit(std::size_t block_bytes, Size& s) const KVBM_REQUIRES(mu_);
  TransferCostModel model_locked(std::size_t block_bytes) const KVBM_REQUIRES(mu_);

  const std::size_t window_;
  mutable detail::Mutex mu_;
  mutable std::map<std::size_t, Size> sizes_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm
