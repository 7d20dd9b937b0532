// kvbm/offload/offload_metrics.h: Prometheus counters of one offload pipeline.
//
// Every series carries the label `pipeline` (the pipeline's name, e.g.
// "G1_to_G2"); the policy series also carry `policy` (the policy's name):
//
//   kvbm_offload_enqueued_blocks_total              blocks handed to enqueue()
//   kvbm_offload_blocks_total{outcome=...}          blocks by final outcome:
//       transferred, already_present, filtered, evicted, no_space, copy_failed
//   kvbm_offload_cancelled_containers_total         containers cancelled
//   kvbm_offload_batches_total                      batches handed to the engine
//   kvbm_offload_policy_passed_blocks_total{policy}    blocks the policy passed
//   kvbm_offload_policy_filtered_blocks_total{policy}  blocks it filtered
//   kvbm_offload_policy_timeouts_total{policy}         calls over policy_timeout
//
// A policy's filtered count includes the blocks of calls that timed out, so
// "why did nothing reach the disk tier?" is answered by these series. Series
// are created at construction (policies when registered) and removed at
// destruction.
//
// Thread-safety: the add_* members and counts() may be called from any
// thread; register_policy() too.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvbm/offload/transfer_handle.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// The values of one pipeline's counters (OffloadMetrics::counts()).
struct OffloadCounts {
  std::uint64_t enqueued = 0;              ///< blocks handed to enqueue()
  std::uint64_t transferred = 0;           ///< copied and registered in the destination
  std::uint64_t already_present = 0;       ///< the destination held them; not copied
  std::uint64_t filtered = 0;              ///< a policy filtered them (timeouts included)
  std::uint64_t evicted = 0;               ///< evicted from the source before their copy started
  std::uint64_t no_space = 0;              ///< the destination had no block for them
  std::uint64_t copy_failed = 0;           ///< the engine failed their copy; not registered
  std::uint64_t cancelled_containers = 0;  ///< containers cancelled
  std::uint64_t batches = 0;               ///< batches handed to the engine

  /// Adds every field of `o`.
  OffloadCounts& operator+=(const OffloadCounts& o) noexcept {
    enqueued += o.enqueued;
    transferred += o.transferred;
    already_present += o.already_present;
    filtered += o.filtered;
    evicted += o.evicted;
    no_space += o.no_space;
    copy_failed += o.copy_failed;
    cancelled_containers += o.cancelled_containers;
    batches += o.batches;
    return *this;
  }
  friend bool operator==(const OffloadCounts&, const OffloadCounts&) = default;
};

/// The series of one offload pipeline; see the file comment.
class OffloadMetrics {
 public:
  /// Creates the series with pipeline=`pipeline` in `registry`. Throws
  /// UsageError when the registry is null or already holds a pipeline of
  /// that name.
  OffloadMetrics(std::shared_ptr<prometheus::Registry> registry, std::string_view pipeline);
  ~OffloadMetrics();
  OffloadMetrics(const OffloadMetrics&) = delete;
  OffloadMetrics& operator=(const OffloadMetrics&) = delete;

  /// Creates (once per name) the series of a policy; returns its index for
  /// add_policy().
  std::size_t register_policy(std::string_view policy);
  /// Adds one evaluation of policy `index`.
  void add_policy(std::size_t index, std::uint64_t passed, std::uint64_t filtered,
                  bool timed_out) noexcept;
  /// Adds `n` blocks ending with `o`.
  void add_blocks(BlockOutcome o, std::uint64_t n) noexcept;
  void add_enqueued(std::uint64_t blocks) noexcept;
  void add_cancelled() noexcept;
  void add_batch() noexcept;
  /// Returns the counters' values (each read atomically; not one snapshot).
  /// The policy series are not included.
  [[nodiscard]] OffloadCounts counts() const noexcept;

  /// Returns the registry the series live in.
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& registry() const noexcept;
  /// Returns the value of the `pipeline` label.
  [[nodiscard]] const std::string& pipeline() const noexcept;

 private:
  struct Series;
  std::unique_ptr<Series> s_;
};

}  // namespace kvbm
