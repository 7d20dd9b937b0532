// src/facade/cut_prefix.h (internal): the prefix a cut onboarding hands back.
//
// When an onboarding is cut (facade/onboard_state.h: take_arrived(), or its
// deadline), its leading records whose copies are back become the prefix.
// take() moves their G1 blocks (hits) and targets (arrived copies) out of the
// records, under the state's mutex, so that nothing else touches the records
// afterwards; register_in() then stages and registers the copies in G1 in one
// batch, outside that mutex (registering takes the pool's lock), and returns
// the prefix up to the first position left without a block (a copy G1 did not
// register), releasing the ones after it last position first.
//
// Thread-safety: none; one cut uses it.

#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "facade/onboard_records.h"
#include "kvbm/block_manager.h"
#include "kvbm/tier_array.h"

namespace kvbm::facade {

/// The leading records of a cut onboarding; see the file comment.
class CutPrefix {
 public:
  /// Takes the G1 blocks and targets of records [0, k), each a G1 hit or an
  /// arrived copy.
  void take(OnboardRecords& records, std::size_t k);
  /// Registers the copies in `g1`; returns the prefix, counting it per tier it
  /// came from in `per_tier` and listing those tiers in `origins`.
  [[nodiscard]] std::vector<ImmutableBlock<G1>> register_in(BlockManager<G1>& g1,
                                                            TierArray<std::size_t>& per_tier,
                                                            std::vector<TierId>& origins) noexcept;

 private:
  std::vector<std::optional<ImmutableBlock<G1>>> blocks_;  // per position: a hit, or its copy
  std::vector<TierId> from_;                               // per position
  std::vector<MutableBlock<G1>> targets_;                  // the copies, in order
  std::vector<SequenceHash> hashes_;                       // of each target
  std::vector<std::size_t> at_;                            // position of each target
};

}  // namespace kvbm::facade
