// kvbm/transfer/transfer_metrics.h: Prometheus counters of one transfer path.
//
// Every transfer engine may publish three counters into a prometheus-cpp
// registry, each with the label `path` (the engine's name, e.g.
// "host_to_host", "device_to_host", "host_to_disk"):
//
//   kvbm_transfer_blocks_total         pairs copied successfully
//   kvbm_transfer_bytes_total          bytes of those pairs
//   kvbm_transfer_failed_blocks_total  pairs whose copy failed
//
// The series are created once, at construction, and removed from the
// registry at destruction. An engine calls add() once per finished batch,
// never per copy operation.
//
// Thread-safety: add() and counts() may be called from any thread.

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
}

namespace kvbm {

/// The values of one path's counters (TransferMetrics::counts()).
struct TransferCounts {
  std::uint64_t blocks = 0;         ///< pairs copied successfully
  std::uint64_t bytes = 0;          ///< bytes of those pairs
  std::uint64_t failed_blocks = 0;  ///< pairs whose copy failed
  friend bool operator==(const TransferCounts&, const TransferCounts&) = default;
};

/// The counters of one transfer path in a prometheus-cpp registry.
class TransferMetrics {
 public:
  /// Creates the series with label path=`path` in `registry`. Throws
  /// UsageError when `registry` is null or already holds series for `path`
  /// (two engines sharing a registry need distinct names).
  TransferMetrics(std::shared_ptr<prometheus::Registry> registry, std::string_view path);
  ~TransferMetrics();
  TransferMetrics(const TransferMetrics&) = delete;
  TransferMetrics& operator=(const TransferMetrics&) = delete;

  /// Adds one finished batch: `blocks` pairs and `bytes` bytes copied, and
  /// `failed_blocks` pairs that failed.
  void add(std::uint64_t blocks, std::uint64_t bytes, std::uint64_t failed_blocks) noexcept;
  /// Returns the counters' values (each read atomically; not one snapshot).
  [[nodiscard]] TransferCounts counts() const noexcept;

  /// Returns the registry the series live in.
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& registry() const noexcept;
  /// Returns the value of the `path` label.
  [[nodiscard]] const std::string& path() const noexcept;

 private:
  struct Series;
  std::unique_ptr<Series> s_;
};

}  // namespace kvbm
