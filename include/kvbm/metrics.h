// kvbm/metrics.h: Prometheus metrics of one block pool.
//
// Every pool publishes the counters and gauges below into a prometheus-cpp
// registry that the host application may pass in (or one the pool creates).
// Each series carries the label `pool` (the tier name, "G1", "G2", ...). The
// series are created once when the pool is built; hot paths only add to
// counters and store gauge values. The series are removed from the registry
// when the pool is destroyed.
//
//   counters: kvbm_allocations_total, kvbm_allocations_from_reset_total,
//             kvbm_evictions_total, kvbm_registrations_total,
//             kvbm_duplicate_blocks_total, kvbm_registration_dedup_total,
//             kvbm_stagings_total, kvbm_match_hashes_requested_total,
//             kvbm_match_blocks_returned_total, kvbm_scan_hashes_requested_total,
//             kvbm_scan_blocks_returned_total
//   gauges:   kvbm_inflight_mutable, kvbm_inflight_immutable,
//             kvbm_reset_pool_size, kvbm_inactive_pool_size
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
}

namespace kvbm {

/// Counter increments gathered during one pool operation; also the
/// counters' totals (PoolMetrics::counts()).
struct PoolCounterDelta {
  std::uint64_t allocations = 0;
  std::uint64_t allocations_from_reset = 0;
  std::uint64_t evictions = 0;
  std::uint64_t registrations = 0;
  std::uint64_t duplicate_blocks = 0;
  std::uint64_t registration_dedup = 0;
  std::uint64_t stagings = 0;
  std::uint64_t match_hashes_requested = 0;
  std::uint64_t match_blocks_returned = 0;
  std::uint64_t scan_hashes_requested = 0;
  std::uint64_t scan_blocks_returned = 0;
};

/// The metric series of one pool in a prometheus-cpp registry.
class PoolMetrics {
 public:
  /// Creates the pool's series in `registry` with label pool=`pool`.
  /// Throws UsageError when the registry already holds series for that pool
  /// name (two pools must not share a label set).
  PoolMetrics(std::shared_ptr<prometheus::Registry> registry, std::string_view pool);
  ~PoolMetrics();
  PoolMetrics(const PoolMetrics&) = delete;
  PoolMetrics& operator=(const PoolMetrics&) = delete;

  /// Adds the non-zero fields of `delta` to the counters.
  void add(const PoolCounterDelta& delta) noexcept;
  /// Adds one to kvbm_stagings_total.
  void add_staging() noexcept;
  /// Returns every counter's value since the pool was built (the series'
  /// values, read; each atomically, the set not one snapshot).
  [[nodiscard]] PoolCounterDelta counts() const noexcept;

  /// Sets the gauges. Cheap atomic stores.
  void set_inflight_mutable(std::uint64_t v) noexcept;
  void set_inflight_immutable(std::uint64_t v) noexcept;
  void set_reset_pool_size(std::uint64_t v) noexcept;
  void set_inactive_pool_size(std::uint64_t v) noexcept;

  /// Returns the registry the series live in.
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& registry() const noexcept;
  /// Returns the value of the `pool` label.
  [[nodiscard]] const std::string& pool() const noexcept;

 private:
  struct Series;
  std::unique_ptr<Series> s_;
};

}  // namespace kvbm
