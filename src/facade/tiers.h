// src/facade/tiers.h (internal): the facade's tiers, as data.
//
// A tier is named by its TierId (kvbm/tier.h) everywhere in the facade; its
// per-tier data is a TierArray (kvbm/tier_array.h) indexed by it. describe_tiers() reads one
// TierSpec per tier from the config: its size, storage, listeners, the tier
// above it (where its blocks come down from) and the mode of that boundary.
// The rows that act on the tiers are in facade/tier.h.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/offload/config.h"
#include "kvbm/pool_listener.h"
#include "kvbm/tier.h"
#include "kvbm/tier_array.h"

namespace kvbm::facade {

/// Calls f(marker) with the marker of a pooled tier (G1, G2 or G3).
template <class F>
decltype(auto) with_marker(TierId t, F&& f) {
  switch (t) {
    case TierId::kG1:
      return f(G1{});
    case TierId::kG2:
      return f(G2{});
    case TierId::kG3:
      return f(G3{});
    case TierId::kG4:
      break;
  }
  KVBM_CHECK(false, "KvBlockManager: tier ", to_string(t), " has no pool");
}

/// Where a tier's blocks live.
enum class StorageKind : std::uint8_t {
  kDevice,      ///< device memory (host memory standing in when no GPU is usable)
  kPinnedHost,  ///< pinned host memory
  kDisk,        ///< one preallocated file, read into G1 through a pinned bounce buffer
  kRemote,      ///< a store shared by instances; no pool (its blocks land in `above`)
};

/// One tier, read from the config.
struct TierSpec {
  TierId id = TierId::kG1;
  std::string_view option;  ///< its config member and option prefix: "device", "host", ...
  StorageKind storage = StorageKind::kDevice;
  bool present = false;
  std::size_t blocks = 0;  ///< a pooled tier's blocks
  const TierConfig* size = nullptr;
  const std::vector<std::shared_ptr<PoolListener>>* listeners = nullptr;
  /// The tier its blocks come down from (and a remote tier's land in).
  TierId above = TierId::kG1;
  /// The mode of the boundary from `above` (unused for G1).
  OffloadMode mode = OffloadMode::kNone;
  const OffloadPolicyConfig* policy = nullptr;
  PipelineConfig pipeline;  ///< the write-through pipeline's config
};
using TierSpecs = TierArray<TierSpec>;

/// The blocks of G1, G2 and G3 (0: absent), as check_config() returned them.
struct TierSizes {
  std::size_t device = 0, host = 0, disk = 0;
};

/// Returns the table of `c`'s tiers; `blocks` from check_config().
[[nodiscard]] TierSpecs describe_tiers(const KvBlockManagerConfig& c, const TierSizes& blocks);

}  // namespace kvbm::facade
