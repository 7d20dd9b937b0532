// src/facade/onboard_cut.h (internal): where an onboarding stops loading (kvbm/onboard_plan.h).
//
// choose_cut() turns a walk (facade/onboard_plan.h: the runs of the prefix
// found, per tier) and the cost models into an OnboardPlan: for every cut k
// from the leading G1 hits to the whole prefix found, the loads' expected and
// tail time and the recompute time of the rest, the k the mode asks for
// (kvbm/onboard_plan.h says how). One pass over the positions; no lock, no
// I/O.
//
// Thread-safety: a pure function.

#pragma once

#include <cstddef>
#include <cstdint>

#include "facade/onboard_plan.h"
#include "kvbm/onboard_plan.h"
#include "kvbm/tier_array.h"
#include "kvbm/transfer/transfer_cost_estimator.h"

namespace kvbm::facade {

/// The cost models a plan reads.
struct CutCosts {
  TierArray<TransferCostModel> up{};  ///< per tier below G1: into G1 (G4: its fetch into G2)
  TransferCostModel prefill;          ///< per token
  std::uint32_t block_size = 1;       ///< tokens per block
};

/// The plan of `walk` (the prefix found) over `blocks` asked for; see the file comment.
[[nodiscard]] OnboardPlan choose_cut(const Plan& walk, std::size_t blocks, const CutCosts& costs,
                                     const OnboardOptions& options);

}  // namespace kvbm::facade
