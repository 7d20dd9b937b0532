// kvbm/disk/disk_engine.h: transfer engines between host memory and a disk pool.
//
// DiskWriteEngine copies blocks of a host layout into slots of a DiskStorage
// (host -> disk, "host_to_disk"); DiskReadEngine copies slots back into a host
// layout (disk -> host, "disk_to_host"). Both implement TransferEngine: submit()
// validates the batch, queues it and returns at once; the I/O runs on the
// engine's own worker threads, never the caller's, and never blocks submit().
//
// Each worker thread owns one staging buffer of slot_bytes(), aligned for
// O_DIRECT, and takes one pair at a time (pairs of all queued batches in FIFO
// order). A write checksums the block's regions (XXH3-64) and writes them
// with the slot's padding and footer in one pwritev straight from host memory
// when DiskStorage::can_write_from() allows it (always with buffered I/O;
// with O_DIRECT when every region is 4 KiB aligned, as page-aligned pinned
// buffers with 32 KiB regions are); otherwise it gathers the regions into the
// staging buffer, seals it and writes it with one pwrite. A read preads the
// slot into the staging buffer, verifies footer and checksum, and only then
// scatters it into the host block's regions: a failed read leaves the
// destination block untouched.
//
// On a persistent DiskStorage a write batch runs in three stages, each pair
// of the batch through each stage before the next begins, with one
// fdatasync of the file between stages: (1) the header sector of every
// destination slot whose header may be live is overwritten with zeros;
// (2) the payloads (data and padding, straight from host memory when
// allowed) are written; (3) the header sectors are written. The batch
// completes after the last fdatasync, so a completed pair is durable, and a
// crash at any instant leaves each slot absent or whole (docs/disk_tier.md).
// A stage with nothing to write (no live header) is skipped with its sync.
// A pair that fails in a stage is skipped by the later ones (its slot is
// left absent); a failed fdatasync fails every pair still standing.
//
// Queue depth and workers: at most `queue_depth` preads/pwrites are in flight
// at once (a semaphore around the syscall). The default has twice as many
// workers as that, so that while queue_depth workers wait on the disk the
// others gather and checksum their next blocks: the CPU work overlaps the I/O
// and the disk always has queue_depth requests, as fio's psync jobs would.
// With workers == queue_depth every worker alternates CPU work and I/O, and
// the disk idles while it computes.
//
// Failure is per pair: EINTR is retried and a short transfer continued
// (inside kvbm::io::pread_full / pwrite_full); any other error (EIO, ENOSPC,
// a short transfer that cannot continue, a bad footer or checksum) marks that
// pair, and only that pair, failed in the batch's TransferOutcome (indices
// ascending; `error` is the lowest failed index's TransferError: kind kIo or
// kNoSpace with the errno value, kCorrupt for a slot that failed
// verification). The source is never
// written. Failed pairs are counted in stats() and, when options.registry is
// set, in kvbm_transfer_failed_blocks_total{path=name}, and logged once per
// batch.
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
class DiskEngineCore;
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
  /// Returns the number of worker threads.
  [[nodiscard]] std::size_t workers() const noexcept;
  /// Returns the most I/Os in flight at once.
  [[nodiscard]] std::size_t queue_depth() const noexcept;
  /// Returns which way it copies.
  [[nodiscard]] DiskDirection direction() const noexcept { return direction_; }

 private:
  DiskDirection direction_;
  std::unique_ptr<detail::DiskEngineCore> core_;
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
