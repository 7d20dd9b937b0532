// src/facade/tiers.h (internal): the facade's tiers, as data.
//
// Every part of the facade (building, the tier boundaries, onboarding,
// shutdown and audit) iterates this table instead of naming G1, G2 and G3:
//
//   TierTypes       the tier markers, fastest first; index 0 is G1, the tier
//                   onboarding copies into and the scheduler computes into
//   describe_tiers  one TierSpec per tier, read from the config: its size,
//                   listeners, storage kind and the mode of the boundary from
//                   the tier above into it
//
// G1-G3 only: G4 is a sidecar of G2 (remote_tier.h), named where it matters
// (docs/architecture.md, "The facade: tiers as data").

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/offload/config.h"
#include "kvbm/pool_listener.h"
#include "kvbm/tier.h"

namespace kvbm::facade {

/// The tiers, fastest first (G1 first).
using TierTypes = std::tuple<G1, G2, G3>;
inline constexpr std::size_t kTierCount = std::tuple_size_v<TierTypes>;
template <std::size_t I>
using TierAt = std::tuple_element_t<I, TierTypes>;
template <std::size_t I>
using Index = std::integral_constant<std::size_t, I>;

/// Calls f(Index<I>{}) for I = 0 .. N-1, in order.
template <std::size_t N, class F>
void for_each_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(Index<I>{}), ...); }
  (std::make_index_sequence<N>{});
}

/// Calls f(Index<I>{}) for the I equal to `i` (< N).
template <std::size_t N, class F>
void visit_index(std::size_t i, F&& f) {
  for_each_index<N>([&](auto I) {
    if (I() == i) f(I);
  });
}

/// Where a tier's blocks live.
enum class StorageKind : std::uint8_t {
  kDevice,      ///< device memory (host memory standing in when no GPU is usable)
  kPinnedHost,  ///< pinned host memory
  kDisk,        ///< one preallocated file, read into G1 through a pinned bounce buffer
};

/// One tier, read from the config.
struct TierSpec {
  std::string_view option;  ///< its config member and option prefix: "device", "host", "disk"
  StorageKind storage = StorageKind::kDevice;
  std::size_t blocks = 0;  ///< 0: the tier is absent
  const TierConfig* size = nullptr;
  const std::vector<std::shared_ptr<PoolListener>>* listeners = nullptr;
  /// The boundary from the tier above into this one (unused for G1).
  OffloadMode mode = OffloadMode::kNone;
  const OffloadPolicyConfig* policy = nullptr;
  PipelineConfig pipeline;  ///< the write-through pipeline's config
};
using TierSpecs = std::array<TierSpec, kTierCount>;

/// The blocks of each tier (0: absent), as check_config() returned them.
using TierSizes = std::array<std::size_t, kTierCount>;

/// Returns the table of `c`'s tiers; `blocks` from check_config().
[[nodiscard]] TierSpecs describe_tiers(const KvBlockManagerConfig& c, const TierSizes& blocks);

/// One pool per tier (empty when the tier is absent).
template <class Tuple>
struct PoolsOf;
template <TierMarker... T>
struct PoolsOf<std::tuple<T...>> {
  using type = std::tuple<std::optional<BlockManager<T>>...>;
};
using Pools = PoolsOf<TierTypes>::type;

}  // namespace kvbm::facade
