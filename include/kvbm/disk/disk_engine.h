// kvbm/disk/disk_engine.h: transfer engines between host memory and a disk pool.
//
// DiskWriteEngine copies blocks of a host layout into slots of a DiskStorage
// ("host_to_disk"); DiskReadEngine copies slots back into a host layout
// ("disk_to_host"). Both are TransferEngines: submit() validates the batch,
// queues it and returns at once; the I/O runs on the engine's own worker
// threads (at most queue_depth syscalls in flight), never the caller's; or,
// with DiskIoEngine::kIoUring, on one thread that keeps queue_depth I/Os in
// flight in an io_uring and verifies completed reads while the others are
// still in flight. A read
// verifies a slot before it writes the destination, so a failed read leaves
// the destination block untouched; the source is never written. On a
// persistent DiskStorage a write batch follows the crash-consistent order
// (invalidate, payload, header, an fdatasync after each): a completed pair is
// durable. docs/disk_tier.md ("The disk engines", "Write order") has the
// staging, the worker model and the failure handling.
//
// Errors: failure is per pair, in the batch's TransferOutcome (kIo or kNoSpace
// with the errno value, kCorrupt for a slot that failed verification); EINTR
// and short transfers are retried inside. Failed pairs are counted in stats()
// and, with options.registry, kvbm_transfer_failed_blocks_total{path=name}.
//
// Lifetime: the engine holds a reference to the DiskStorage and the host
// layout's memory; both must outlive it. Destroying the engine waits for every
// batch it accepted.
// Thread-safety: submit() and stats() may be called from any thread. Pairs in
// flight at the same time must not name the same destination block (submit()
// refuses duplicates within one batch); concurrent batches that write and read
// the same slot see either version or a checksum failure, never torn data.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kvbm/disk/disk_storage.h"
#include "kvbm/storage/layout.h"
#include "kvbm/transfer/transfer_engine.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// How a disk engine runs.
struct DiskEngineOptions {
  /// The largest queue_depth.
  static constexpr std::size_t kMaxQueueDepth = 256;
  /// The most workers.
  static constexpr std::size_t kMaxWorkers = 512;
  /// Most whole-slot preads/pwrites in flight at once. Must be in [1, kMaxQueueDepth].
  std::size_t queue_depth = 4;
  /// Worker threads (each with one staging buffer of slot_bytes()); 0 means
  /// 2 x queue_depth. Must be 0 or in [queue_depth, kMaxWorkers].
  std::size_t workers = 0;
  /// The path's name: name() and the `path` label of the metrics. Empty:
  /// "host_to_disk" or "disk_to_host".
  std::string name{};
  /// Where to publish kvbm_transfer_{blocks,bytes,failed_blocks}_total{path=name}
  /// (kvbm/transfer/transfer_metrics.h); none when null.
  std::shared_ptr<prometheus::Registry> registry{};
  /// What issues the I/O. The thread pool's `workers` are ignored by io_uring.
  DiskIoEngine io_engine = DiskIoEngine::kAuto;
};

/// Counters of a disk engine since it was built. Each field is read
/// atomically; the set is not one snapshot.
struct DiskEngineStats {
  std::uint64_t batches = 0;        ///< batches completed
  std::uint64_t blocks = 0;         ///< pairs copied successfully
  std::uint64_t failed_blocks = 0;  ///< pairs that failed (I/O error or checksum mismatch)
  std::uint64_t bytes = 0;          ///< block bytes copied by successful pairs
  std::uint64_t unstaged_writes =
      0;  ///< successful writes made straight from host memory (no staging copy)
};

/// Which way a disk engine copies.
enum class DiskDirection : std::uint8_t {
  kToDisk,    ///< host blocks into disk slots (pairs: src host, dst disk)
  kFromDisk,  ///< disk slots into host blocks (pairs: src disk, dst host), verified
};

namespace detail {
class DiskEngineImpl;
}  // namespace detail

/// Copies blocks between a host layout and the slots of a disk pool, one way.
class DiskEngine : public TransferEngine {
 public:
  /// Starts the worker threads. Throws UsageError when the layout's config
  /// differs from the storage's, an option is out of range, or the registry
  /// already holds series for the name.
  /// Precondition: `host`'s addresses are host memory this process may read
  /// (kToDisk) or write (kFromDisk).
  DiskEngine(DiskDirection direction, Layout host, DiskStorage& disk,
             DiskEngineOptions options = {});
  /// Waits for every accepted batch, then stops the workers.
  ~DiskEngine() override;
  DiskEngine(const DiskEngine&) = delete;
  DiskEngine& operator=(const DiskEngine&) = delete;

  /// Returns options.name, by default "host_to_disk" or "disk_to_host".
  [[nodiscard]] std::string_view name() const noexcept override;
  /// Queues pairs. Throws UsageError when the batch is empty, an id is out of
  /// range or a destination block repeats.
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override;
  /// Returns the counts of its series; nullopt without options.registry.
  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept override;
  /// Returns the engine's counters.
  [[nodiscard]] DiskEngineStats stats() const noexcept;
  /// Returns the number of worker threads (1 with io_uring: the ring's).
  [[nodiscard]] std::size_t workers() const noexcept;
  /// Returns the engine in use: kThreadPool or kIoUring, never kAuto.
  [[nodiscard]] DiskIoEngine io_engine() const noexcept;
  /// Returns true when this build has io_uring and the kernel grants a ring
  /// (probed once per process); otherwise `why`, when given, says why not.
  [[nodiscard]] static bool io_uring_available(std::string* why = nullptr);
  /// Returns the most I/Os in flight at once.
  [[nodiscard]] std::size_t queue_depth() const noexcept;
  /// Returns which way it copies.
  [[nodiscard]] DiskDirection direction() const noexcept { return direction_; }

 private:
  DiskDirection direction_;
  std::unique_ptr<detail::DiskEngineImpl> core_;
};

/// A DiskEngine that writes host blocks into disk slots (kToDisk).
class DiskWriteEngine final : public DiskEngine {
 public:
  DiskWriteEngine(Layout host_src, DiskStorage& dst, DiskEngineOptions options = {})
      : DiskEngine(DiskDirection::kToDisk, std::move(host_src), dst, std::move(options)) {}
};

/// A DiskEngine that reads disk slots into host blocks (kFromDisk).
class DiskReadEngine final : public DiskEngine {
 public:
  DiskReadEngine(DiskStorage& src, Layout host_dst, DiskEngineOptions options = {})
      : DiskEngine(DiskDirection::kFromDisk, std::move(host_dst), src, std::move(options)) {}
};

}  // namespace kvbm
