// kvbm/blocks/release_order.h: releasing a request's blocks, last block first.
//
// A pool evicts its inactive blocks least recently released first. A
// request's blocks are a chain (each hash covers its parent's), and a vector
// of them is destroyed first to last, so dropping the vector makes the chain's
// head the least recent block: it is evicted first, and the tail it leaves is
// cached but unreachable (a prefix match stops at the first miss). A router
// that indexes chains (as vLLM evicts them, tail first) also rejects the
// removals of blocks below a head it already dropped. release_tail_first()
// drops the blocks from the last to the first, so that eviction takes a
// chain's tail first and every cached block stays reachable.
//
// Thread-safety: as dropping the handles one by one.

#pragma once

#include <optional>
#include <vector>

#include "kvbm/blocks/immutable_block.h"

namespace kvbm {

/// Drops `blocks` (a request's blocks, in prefix order) from the last to the
/// first; `blocks` is empty afterwards.
template <TierMarker T>
void release_tail_first(std::vector<ImmutableBlock<T>>& blocks) noexcept {
  while (!blocks.empty()) blocks.pop_back();
}

/// As above, for a request's blocks of which some may be missing.
template <TierMarker T>
void release_tail_first(std::vector<std::optional<ImmutableBlock<T>>>& blocks) noexcept {
  while (!blocks.empty()) blocks.pop_back();
}

}  // namespace kvbm
