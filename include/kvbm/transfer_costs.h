// kvbm/transfer_costs.h: what each copy path of a KvBlockManager costs, as measured.
//
// KvBlockManager::transfer_costs() returns a TransferCosts: per copy path
// present, the learned cost of its batches (a TransferCostEstimator's window,
// kvbm/transfer/transfer_cost_estimator.h: median and p99 batch duration,
// throughput, and the model a plan predicts with), and the engine's prefill
// speed (recompute time per token). docs/onboarding.md explains both.
//
// The paths, each measured where its batches complete (one sample per batch,
// timed on KvBlockManagerConfig::clock):
//
//   G2 -> G1, G3 -> G1   onboarding's copies up (the tier's `up` engine)
//   G1 -> G2, G2 -> G3   offload copies down (write-through pipelines,
//                        explicit offloads and the on-eviction copier share
//                        the boundary's engine)
//   G4 -> G2             a G4 fetch: the round trip that lands blocks in G2
//   G2 -> G4             a G4 write batch
//
// (G3 -> G2 has no copy today: G3 is read straight into G1 through the
// bounce buffer, which G3 -> G1 measures.) A manager that moves no bytes
// (move_bytes = false) completes every copy at once and measures none: its
// paths stay unknown (no cost on the copy path of a metadata replay). A
// path with no batch yet is
// unknown: its model says known = false, and the onboarding plan then loads
// what it holds (kvbm/onboard_plan.h).
//
// The same numbers are Prometheus gauges in the manager's registry, refreshed
// as batches complete (at most every 10 ms of the clock per path) and by
// every transfer_costs() call:
//
//   kvbm_transfer_seconds{path, quantile="0.5"|"0.99"}  batch duration
//   kvbm_transfer_bytes_per_second{path}               throughput
//   kvbm_prefill_seconds_per_token                     the prefill estimate (0: unknown)
//
// Thread-safety: plain values.

#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kvbm/tier.h"
#include "kvbm/transfer/transfer_cost_estimator.h"

namespace kvbm {

/// One copy path's measured cost.
struct TransferPathCost {
  TierId from = TierId::kG2;
  TierId to = TierId::kG1;
  std::string path;  ///< copy_path_name(from, to): the `path` label of its series
  /// Per block size measured, smallest first (empty: no batch yet).
  std::vector<TransferCostSummary> sizes;
  /// The model for the manager's block size (known = false: no batch yet).
  TransferCostModel model;
  /// Returns the predicted duration of a batch of `blocks` of the manager's blocks.
  [[nodiscard]] TransferCostPrediction predict(std::size_t blocks) const noexcept {
    return model.predict(blocks);
  }
};

/// The engine's prefill speed: what recomputing a token costs.
struct PrefillCost {
  /// KvBlockManagerConfig::prefill_tokens_per_second (0: not given).
  double configured_tokens_per_second = 0;
  /// KvBlockManager::report_prefill()'s window (a "block" is a token), if any.
  std::optional<TransferCostSummary> reported;
  /// What a plan uses: the reports' model when there are any, else the
  /// configured rate, else unknown (known = false).
  TransferCostModel model;
  /// Returns the predicted duration of a prefill of `tokens` tokens.
  [[nodiscard]] TransferCostPrediction predict(std::size_t tokens) const noexcept {
    return model.predict(tokens);
  }
};

/// What KvBlockManager::transfer_costs() returns; see the file comment.
struct TransferCosts {
  std::size_t block_bytes = 0;          ///< the manager's block size
  std::vector<TransferPathCost> paths;  ///< the paths present, G1 -> G2 first
  PrefillCost prefill;
  /// Returns path `from` -> `to`, or nullptr when the manager has no such copy.
  [[nodiscard]] const TransferPathCost* path(TierId from, TierId to) const noexcept {
    for (const auto& p : paths) {
      if (p.from == from && p.to == to) return &p;
    }
    return nullptr;
  }
};

}  // namespace kvbm
