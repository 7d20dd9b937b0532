// kvbm/transfer/host_engine.h: copies between two host-addressable layouts.
//
// HostTransferEngine moves blocks between two layouts whose bytes the CPU can
// address: pinned or plain host memory (G2), and the device tier when it is
// emulated in host memory (G1 without a GPU). submit() validates the batch,
// plans the copies (plan_copies(): one per block between two fully contiguous
// layouts, else one per region, adjacent copies merged) and hands them to
// the engine's own worker threads; it never copies on the caller's thread.
// A batch of at least 2 x min_bytes_per_thread is split, by bytes, over up to
// `threads` workers; a smaller one runs on one worker. Host copies cannot
// fail, so every completion reports success.
//
// Lifetime: the engine does not own the memory its layouts describe; that
// memory (a Storage) must outlive the engine. Destroying the engine waits for
// every accepted batch to complete. Do not destroy an engine from one of its
// completion callbacks (they run on its workers).
//
// Thread-safety: submit() may be called from several threads at once.
// Completion callbacks run on a worker thread, outside every engine lock.

#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvbm/storage/layout.h"
#include "kvbm/transfer/transfer_engine.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// The function that copies one piece: memcpy's contract (no overlap).
using HostCopyFn = void (*)(void* dst, const void* src, std::size_t bytes) noexcept;

/// Options of a HostTransferEngine.
struct HostEngineOptions {
  /// The most worker threads an engine takes.
  static constexpr std::size_t kMaxThreads = 256;
  /// Worker threads (0 .. kMaxThreads); 0 picks min(4, hardware threads).
  std::size_t threads = 0;
  /// A batch is split over several workers only so far as each gets at least
  /// this many bytes.
  std::size_t min_bytes_per_thread = std::size_t{1} << 20;
  /// The path's name: name() and the `path` label of the metrics.
  std::string name = "host_to_host";
  /// Where to publish kvbm_transfer_*_total{path=name}; none when null.
  std::shared_ptr<prometheus::Registry> registry;
  /// The copy function; null means std::memcpy. A hook for tests.
  HostCopyFn copy = nullptr;
};

/// A TransferEngine for host-addressable source and destination layouts.
class HostTransferEngine final : public TransferEngine {
 public:
  /// Starts the workers. Throws UsageError when the layouts' configs differ
  /// or an option is out of range (min_bytes_per_thread 0, threads > 256, an
  /// empty name), and when the registry already holds series for `name`.
  HostTransferEngine(Layout src, Layout dst, HostEngineOptions options = {});
  /// Waits for every accepted batch, then stops the workers.
  ~HostTransferEngine() override;
  HostTransferEngine(const HostTransferEngine&) = delete;
  HostTransferEngine& operator=(const HostTransferEngine&) = delete;

  [[nodiscard]] std::string_view name() const noexcept override;
  /// Copies src block pairs[i].src to dst block pairs[i].dst for every i, on
  /// the workers. Throws UsageError, having started nothing, when the batch
  /// is empty, an id is out of range, or a destination block appears twice.
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override;
  /// Returns the counts of its series; nullopt without options.registry.
  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept override;

  /// Returns the number of worker threads.
  [[nodiscard]] std::size_t threads() const noexcept;
  /// Returns the source layout.
  [[nodiscard]] const Layout& src() const noexcept;
  /// Returns the destination layout.
  [[nodiscard]] const Layout& dst() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm
