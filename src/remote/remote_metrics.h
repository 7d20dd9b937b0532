// src/remote/remote_metrics.h: the Prometheus series of one RemoteStore.
//
// Built once at construction (when a registry is given), removed at
// destruction; a call adds its counts once, never per block.
//
// Thread-safety: record(), set_servers_available() and set_state() from any thread.

#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "kvbm/remote/remote_store.h"

namespace prometheus {
class Registry;
}

namespace kvbm::remote {

enum class RemoteOp : std::uint8_t { kExists, kGet, kPut };

/// What one call did.
struct RemoteCallCounts {
  std::uint64_t hits = 0, misses = 0, puts = 0, failed_puts = 0, read_bytes = 0, written_bytes = 0;
  std::array<std::uint64_t, kRemoteStatusCount> by_status{};
  std::array<std::uint64_t, kRemoteRefusalCount> refused{};  ///< kAccessDenied blocks, by kind
};

class RemoteMetrics {
 public:
  /// A null registry: every call does nothing.
  RemoteMetrics(std::shared_ptr<prometheus::Registry> registry, const std::string& pool);
  ~RemoteMetrics();
  RemoteMetrics(const RemoteMetrics&) = delete;
  RemoteMetrics& operator=(const RemoteMetrics&) = delete;

  void record(RemoteOp op, double seconds, const RemoteCallCounts& counts) noexcept;
  void set_servers_available(std::size_t n) noexcept;
  /// kvbm_remote_state{state}: 1 for `state`, 0 for the others.
  void set_state(RemoteState state) noexcept;

 private:
  struct Series;
  std::unique_ptr<Series> s_;
};

}  // namespace kvbm::remote
