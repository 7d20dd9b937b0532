// replay/result_paths.h: the transfer paths a replay result reports.
//
// A result names four tier paths (G1->G2, G2->G3, G2->G1, G3->G1) and every
// engine path the manager's stats list. collect_paths() fills both from the
// stats: what the engines counted on each tier path, or, where no engine counts
// it (metadata only), the boundary's transferred blocks for the offloads and the
// onboarding handles' counts for the loads.
//
// Thread-safety: a pure function of its arguments.

#pragma once

#include <array>
#include <cstdint>

#include "kvbm/kv_block_manager_stats.h"
#include "replay/replay.h"

namespace kvbm::replay {

/// Fills r.engine_paths and r.paths (and r.lost_to_lag) from `stats`;
/// `onboarded_blocks` are the blocks onboarded from G2 and from G3.
void collect_paths(const KvBlockManagerStats& stats, ReplayResult& r,
                   const std::array<std::uint64_t, 2>& onboarded_blocks);

}  // namespace kvbm::replay
