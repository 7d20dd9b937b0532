// replay/hybrid_tiers.h: G2 and G3 behind G1 for kvbm-replay's hybrid replay.
//
// The tiered replays of run_hybrid_replay() (replay/hybrid_replay.h) run a
// model's groups through a HybridKvBlockManager (kvbm/hybrid/), metadata only:
//
//   tier_capacities    each group's blocks per pooled tier: G1 as the G1-only
//                      replay splits it, G2 and G3 split by the same weights
//   tiered_manager     the manager: those blocks, the offload modes, no bytes
//   collect_tiers      what its stats say per group and tier at the end
//
// Thread-safety: plain functions; a manager is used by one thread at a time here.

#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kvbm/hybrid/hybrid_kv_block_manager.h"
#include "replay/hybrid_replay.h"

namespace kvbm::replay {

/// Returns, per group of `model`, its blocks in G1 (`g1_blocks[g]`), G2 and G3
/// (the config's bytes split as split_g1() splits G1; 0 for an absent tier).
/// Throws UsageError when a present tier would leave a group no block.
[[nodiscard]] std::vector<TierArray<std::size_t>> tier_capacities(
    const HybridModel& model, const std::vector<std::size_t>& g1_blocks,
    const HybridReplayConfig& config);

/// Returns a HybridKvBlockManager for `model` with `blocks` per group and tier,
/// move_bytes false, the config's eviction, snapshot policy and offload modes.
[[nodiscard]] std::unique_ptr<HybridKvBlockManager> tiered_manager(
    const HybridModel& model, const std::vector<TierArray<std::size_t>>& blocks,
    const HybridReplayConfig& config);

/// Fills each group's tier figures of `run` (capacity, held at the end, blocks
/// offloaded per boundary) from the manager's stats.
void collect_tiers(const HybridKvBlockManager& m, HybridRun& run);

}  // namespace kvbm::replay
