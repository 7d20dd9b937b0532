// src/facade/tier_memory.h (internal): where each tier's blocks live.
//
// build_memory() allocates a tier's memory by its StorageKind (device, pinned
// host, a disk file with its pinned bounce buffer) and lays it out. Metadata
// only (move_bytes false): nothing is allocated; memory tiers get a layout at
// a made-up address, so that engines and tests see the same block sizes.
// What cannot be allocated is a UsageError naming the tier's size option.

#pragma once

#include <memory>
#include <optional>

#include "facade/tiers.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/storage/layout.h"
#include "kvbm/storage/storage.h"

namespace kvbm::facade {

/// One tier's memory; members are destroyed bottom-up (layouts before memory).
struct TierMemory {
  std::unique_ptr<Storage> memory;      ///< a memory tier's blocks
  std::unique_ptr<DiskStorage> file;    ///< a disk tier's blocks
  std::unique_ptr<Storage> bounce;      ///< a disk tier's pinned staging blocks (reads into G1)
  std::optional<Layout> layout;         ///< where a memory tier's blocks are
  std::optional<Layout> bounce_layout;  ///< where the staging blocks are
  bool emulated = false;                ///< device tier: host memory standing in for a GPU
};

/// Builds the memory of tier `spec` (present) of `c` into `out`.
void build_memory(const KvBlockManagerConfig& c, const TierSpec& spec, TierMemory& out);

}  // namespace kvbm::facade
