// src/facade/tier_engines.h (internal): the engines of each tier below G1.
//
// Each tier below G1 has two engines: `down` copies into it from the tier
// above (what its boundary offloads with), `up` copies from it into G1 (what
// onboarding reads with). Which engines they are follows the tier's
// StorageKind and whether G1 is emulated: CUDA or host copies between G1 and
// pinned host memory, disk writes from the tier above, disk reads through a
// pinned bounce buffer into G1. Metadata only: engines that complete every
// batch at once.

#pragma once

#include <memory>
#include <vector>

#include "facade/tier_memory.h"
#include "facade/tiers.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm::facade {

/// One tier's engines; `up` is destroyed before the parts it is built from.
struct TierEngines {
  std::vector<std::unique_ptr<TransferEngine>> parts;  ///< what `up` is made of (disk reads)
  std::shared_ptr<TransferEngine> down;                ///< the tier above -> this tier
  std::shared_ptr<TransferEngine> up;                  ///< this tier -> G1
};

/// What build_engines() needs to know of the tiers around a tier.
struct EngineContext {
  const KvBlockManagerConfig& config;
  const TierSpecs& specs;
  const TierArray<TierMemory>& memory;
};

/// Builds the engines of pooled tier `t` (below G1, present) into `out`.
void build_engines(const EngineContext& ctx, TierId t, TierEngines& out);

}  // namespace kvbm::facade
