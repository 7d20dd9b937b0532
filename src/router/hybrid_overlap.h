// src/router/hybrid_overlap.h: one instance's overlap for a hybrid model.
//
// The longest cut every group can serve (kvbm/groups/hit_rules.h's
// longest_common_hit over a presence callback), then its blocks of
// `hash_block` tokens counted by tier: position p (of the cut's
// cut / hash_block positions) counts in the slowest of the tiers that hold the
// blocks the groups read for it, that is, the blocks of needed_blocks() that
// cover p; a position no group reads (below a window's tail, say) counts in
// G1, since nothing need be brought for it.
//
// Thread-safety: a pure function; `held` is called on the caller's thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "kvbm/groups/hit_rules.h"
#include "kvbm/router/overlap.h"
#include "kvbm/tier.h"

namespace kvbm::router::impl {

/// Returns the fastest tier holding block `block` of group `group`, or nullopt.
using HeldTier = std::function<std::optional<TierId>(std::size_t group, std::size_t block)>;

/// Fills `out.prefix_blocks` and `out.per_tier` with the longest common cut of
/// at most `max_tokens` tokens, in blocks of `hash_block` tokens (it divides
/// every group's block size). See the file comment.
void hybrid_overlap(std::span<const GroupRule> rules, std::uint32_t hash_block,
                    std::size_t max_tokens, const HeldTier& held, InstanceOverlap& out);

}  // namespace kvbm::router::impl
