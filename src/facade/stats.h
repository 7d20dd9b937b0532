// src/facade/stats.h (internal): KvBlockManager::stats(), read from the parts.
//
// collect_stats() reads the counters the parts already keep: each pool's
// counts and PoolMetrics, each boundary's OffloadMetrics (TierBoundary::counts),
// each engine's TransferMetrics (TransferEngine::counts) and the onboarding
// counters. It adds no count of its own.
//
// Thread-safety: as KvBlockManager::stats() (any thread).

#pragma once

#include "kvbm/kv_block_manager_stats.h"

namespace kvbm {
class KvBlockManagerImpl;
}

namespace kvbm::facade {

/// Returns the stats of `impl`; see kvbm/kv_block_manager_stats.h.
[[nodiscard]] KvBlockManagerStats collect_stats(KvBlockManagerImpl& impl);

}  // namespace kvbm::facade
