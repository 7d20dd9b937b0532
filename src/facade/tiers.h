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

#include "facade/config.h"
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

/// What a tier is, whatever the config: the tier description. A new kind of
/// tier is one more row here (and its row class, facade/tier.h).
struct TierKind {
  std::string_view option;  ///< its named config field: "device", "host", "disk", "remote"
  StorageKind storage = StorageKind::kDevice;
  /// The tier its blocks come down from (and a remote tier's land in; G1: itself).
  TierId above = TierId::kG1;
};
inline constexpr TierArray<TierKind> kTierKinds{{{
    {"device", StorageKind::kDevice, TierId::kG1},
    {"host", StorageKind::kPinnedHost, TierId::kG1},
    {"disk", StorageKind::kDisk, TierId::kG2},
    {"remote", StorageKind::kRemote, TierId::kG2},
}}};

/// One tier: its description and its entry of the config.
struct TierSpec {
  TierId id = TierId::kG1;
  StorageKind storage = StorageKind::kDevice;
  bool present = false;
  std::size_t blocks = 0;  ///< a pooled tier's blocks
  /// The tier its blocks come down from (and a remote tier's land in).
  TierId above = TierId::kG1;
  /// Its entry (KvBlockManagerConfig::tiers; null when absent) and parts of it.
  const TierEntry* entry = nullptr;
  const TierConfig* size = nullptr;
  const std::vector<std::shared_ptr<PoolListener>>* listeners = nullptr;
  /// The mode of the boundary from `above` (kNone for G1 and absent tiers).
  OffloadMode mode = OffloadMode::kNone;
  const OffloadPolicyConfig* policy = nullptr;
  PipelineConfig pipeline;                   ///< the write-through pipeline's config
  const DiskTierOptions* disk = nullptr;     ///< G3's own options
  const RemoteTierConfig* remote = nullptr;  ///< G4's own options
  detail::TierOptionNames names;             ///< how its options are named in messages
};
using TierSpecs = TierArray<TierSpec>;

/// Returns the table of `c`'s tiers, read from its entries (`c` as
/// check_config() left it, which also gave `checked`).
[[nodiscard]] TierSpecs describe_tiers(const KvBlockManagerConfig& c,
                                       const detail::CheckedTiers& checked);

}  // namespace kvbm::facade
