// src/disk/disk_engine_impl.h: what the two disk I/O engines share (private to src/).
//
// DiskEngine forwards to a DiskEngineImpl: the thread pool (disk_engine.cpp)
// or the io_uring ring (disk_uring.cpp). Both queue DiskBatches, run their
// pairs stage by stage (one stage for reads and scratch writes; invalidate,
// payload, header for persistent writes, an fdatasync after each) and hand a
// finished batch to DiskEngineBase::finish(), which builds the outcome and
// counts it. docs/disk_tier.md ("The disk engines") has the model.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "disk/disk_intake.h"
#include "kvbm/disk/disk_engine.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm::detail {

/// The engine behind a DiskEngine: options checked, counters, outcome.
class DiskEngineImpl {
 public:
  /// Throws UsageError when the layout's config differs from the storage's or
  /// queue_depth is out of range.
  DiskEngineImpl(DiskDirection direction, Layout host, DiskStorage& disk,
                 const DiskEngineOptions& options);
  virtual ~DiskEngineImpl() = default;
  DiskEngineImpl(const DiskEngineImpl&) = delete;
  DiskEngineImpl& operator=(const DiskEngineImpl&) = delete;

  /// Queues a batch the engine has checked (TransferEngine::check_batch).
  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair> pairs);
  [[nodiscard]] virtual std::size_t workers() const noexcept = 0;
  [[nodiscard]] virtual DiskIoEngine io_engine() const noexcept = 0;

  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  [[nodiscard]] std::size_t queue_depth() const noexcept { return queue_depth_; }
  [[nodiscard]] std::size_t src_blocks() const noexcept;
  [[nodiscard]] std::size_t dst_blocks() const noexcept;
  [[nodiscard]] DiskEngineStats stats() const noexcept;
  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept;

 protected:
  /// Builds a batch of `pairs` and returns it with its first stage in `stage`.
  std::shared_ptr<DiskBatch> make_batch(std::span<const TransferPair> pairs, DiskStage& stage);
  /// Appends the regions of the host block of `pair` to `out` (cleared first).
  void host_regions(const TransferPair& pair, std::vector<Region>& out) const;
  /// Builds the outcome, counts it, logs a failure and completes the batch.
  void finish(DiskBatch& batch) noexcept;
  /// After the last pair of `stage` ran: the stage's fdatasync; returns the
  /// next stage, or kOnce when the batch is done (then call finish()).
  DiskStage end_stage(DiskBatch& batch, DiskStage stage) noexcept;
  /// Runs by whoever finished the last pair of `stage`: end_stage(), then the
  /// next stage queued at the front of intake_, or finish().
  void next_stage(const std::shared_ptr<DiskBatch>& batch, DiskStage stage) noexcept;

  const DiskDirection direction_;
  const Layout host_;
  DiskStorage& disk_;
  const std::string name_;
  const std::size_t queue_depth_;
  std::atomic<std::uint64_t> unstaged_writes_{0};
  DiskIntake intake_;  // the engine's takers stop it before they are joined

 private:
  std::unique_ptr<TransferMetrics> metrics_;  // null: no registry
  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> blocks_{0};
  std::atomic<std::uint64_t> failed_blocks_{0};
  std::atomic<std::uint64_t> bytes_{0};
};

/// Returns the thread-pool engine.
std::unique_ptr<DiskEngineImpl> make_pool_engine(DiskDirection direction, Layout host,
                                                 DiskStorage& disk,
                                                 const DiskEngineOptions& options);

/// Returns the io_uring engine, or null when this build or the kernel has
/// none (io_uring_available() says why).
std::unique_ptr<DiskEngineImpl> make_uring_engine(DiskDirection direction, Layout host,
                                                  DiskStorage& disk,
                                                  const DiskEngineOptions& options);

/// Whether a ring can be had, probed once per process; `why` when not.
bool io_uring_available(std::string* why) noexcept;

}  // namespace kvbm::detail
