// kvbm/admission.h: admitting a request in one call.
//
// Admission is "reuse what any tier holds, allocate the rest". On the facade
// that is onboard(), wait for it, take its blocks, then allocate_blocks() for
// what is left; admit() does all of it in one call, so that serving a request
// takes two (as in vLLM's get_computed_blocks + allocate_slots):
//
//   auto a = kvbm::admit(*kv, seq);             // 1: prefix + fresh blocks, or nullopt
//   if (!a) { /* G1 is full: keep the request waiting */ }
//   // ... the forward pass computes into a->fresh ...
//   auto done = kv->register_blocks(std::move(completed), pass_done);  // 2
//
// admit() waits for the prefix's copies from G2 and G3. A scheduler that wants
// to overlap them with other work calls onboard() itself and allocates after.
//
// Thread-safety: as KvBlockManager; admit() may be called from several
// threads at once (each admission is all or nothing on its own, but two may
// race for the last free blocks, and one then returns nullopt).

#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/blocks/release_order.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/tier.h"
#include "kvbm/token_block_sequence.h"

namespace kvbm {

/// What admit() hands over: the cached prefix and the blocks to compute the rest into.
/// Dropping it releases the prefix last block first (kvbm/blocks/release_order.h).
struct Admission {
  /// The longest prefix of the request any tier held, as registered G1 blocks, in order.
  std::vector<ImmutableBlock<G1>> prefix;
  /// Fresh G1 blocks for the rest: blocks_needed - prefix.size() of them (possibly none).
  std::vector<MutableBlock<G1>> fresh;
  /// Where the prefix came from (G1 hits, copies from G2 and G3, and what was cut).
  OnboardCounts counts;

  Admission() = default;
  Admission(Admission&&) noexcept = default;
  Admission& operator=(Admission&& other) noexcept {
    release_tail_first(prefix);
    prefix = std::move(other.prefix);
    fresh = std::move(other.fresh);
    counts = other.counts;
    return *this;
  }
  ~Admission() { release_tail_first(prefix); }
};

/// Admits a request: onboards the longest prefix of `hashes` that G1, G2 or G3
/// holds (waiting for its copies), then allocates G1 blocks for the rest of the
/// request, `blocks_needed - prefix.size()` of them.
///
/// Preconditions: blocks_needed >= hashes.size() (the full blocks, plus one
/// for a partial tail or the next token if wanted) and blocks_needed <= the
/// G1 pool's size; otherwise throws UsageError, taking nothing.
/// Returns nullopt when G1 cannot hold the rest: the caller then holds nothing
/// new (the onboarded prefix stays cached in G1, matchable by the next try).
[[nodiscard]] std::optional<Admission> admit(KvBlockManager& kv,
                                             std::span<const SequenceHash> hashes,
                                             std::size_t blocks_needed);

/// Admits the request `seq`: admit(kv, seq.sequence_hashes(), n) where n is
/// seq.num_blocks(), plus one when seq has a partial tail block.
[[nodiscard]] std::optional<Admission> admit(KvBlockManager& kv, const TokenBlockSequence& seq);

}  // namespace kvbm
