// kvbm/router/overlap.h: what an instance holds of one request's prefix.
//
// KvIndexer::overlaps() walks a request's block hashes from the first and
// answers, per instance, how many leading blocks the instance could serve
// without recomputing them, and from which tiers: a block counts in the
// fastest tier the instance holds it in (G1 before G2 before G3), or in G4
// when only a shared tier holds it. The walk for an instance stops at the
// first block it cannot serve, exactly as KvBlockManager::onboard() stops.
//
// Thread-safety: plain value types.

#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvbm/tier.h"
#include "kvbm/tier_array.h"

namespace kvbm::router {

/// Dense id of an instance in one KvIndexer (0, 1, 2, ... in add order).
using InstanceId = std::uint32_t;

/// Blocks per tier, indexed by TierId (kvbm/tier_array.h).
using TierBlockCounts = TierArray<std::size_t>;

/// The prefix of one request that one instance holds.
struct InstanceOverlap {
  InstanceId instance = 0;
  std::size_t prefix_blocks = 0;  ///< leading blocks it can serve (sum of per_tier)
  TierBlockCounts per_tier{};     ///< those blocks by the fastest tier holding them
  bool stale = false;             ///< the instance's entries are stale (see KvIndexer)
};

/// The answer to one query: one entry per live instance, in InstanceId order.
struct OverlapScores {
  std::vector<InstanceOverlap> instances;
  std::size_t request_blocks = 0;  ///< hashes asked about
};

}  // namespace kvbm::router
