// replay/savings.h: what the cache saved a replay, in prefill tokens and an
// estimate of prefill time.
//
// Tokens not recomputed are exact: the prompt tokens of every hit block (a
// request's partial last block counts its own tokens). The time is an
// estimate under a stated cost model:
//
//   saved = hit tokens / prefill_tokens_per_s
//           - (G2 hit bytes / g2_gb_per_s + G3 hit bytes / g3_gb_per_s)
//
// A G1 hit costs nothing; a G2 or G3 hit costs its copy back to G1 at that
// path's bandwidth. Every input is reported beside the figure; a tier whose
// load time exceeds what it saves shows a negative figure (recomputing would
// have been faster).
//
// Thread-safety: plain functions over values.

#pragma once

#include <cstdint>

#include "kvbm/tier_array.h"

namespace kvbm::replay {

/// The cost model's inputs.
struct SavingsInputs {
  double prefill_tokens_per_s = 0;  ///< the model's prefill throughput
  double g2_gb_per_s = 0;           ///< G2 -> G1 bandwidth (10^9 bytes/s)
  double g3_gb_per_s = 0;           ///< G3 -> G1 bandwidth (10^9 bytes/s)
  std::uint64_t block_bytes = 0;    ///< bytes of one block
};

/// The estimate for one replay.
struct Savings {
  std::uint64_t tokens_not_recomputed = 0;  ///< exact
  TierArray<double> recompute_s{};          ///< prefill time of each pooled tier's hit tokens
  TierArray<double> load_s{};               ///< time to bring each tier's hits to G1 (G1: 0)
  double saved_s = 0;                       ///< sum of recompute - load over the tiers
};

/// Computes the estimate from the hits per tier (blocks and tokens) of G1,
/// G2 and G3 (the cost model has no figure for G4: its hits are left out).
[[nodiscard]] Savings estimate_savings(const TierArray<std::uint64_t>& hit_blocks,
                                       const TierArray<std::uint64_t>& hit_tokens,
                                       const SavingsInputs& inputs);

}  // namespace kvbm::replay
