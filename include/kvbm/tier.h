// kvbm/tier.h: tier markers.
//
// A block handle is templated over an empty marker type naming the storage
// tier it lives in, so a device block can never be handed to a host pool by
// accident: `MutableBlock<G1>` and `MutableBlock<G2>` are unrelated types.
// The library ships markers for the device (G1), pinned host (G2), disk (G3)
// and remote (G4) tiers; any empty class type works too. A marker may declare
// `static constexpr std::string_view kName` to name its pool in metrics and
// logs; without it the pool is named "custom" unless the builder sets a name.

#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvbm {

/// What a tier marker needs: an empty, trivially copyable class type.
template <class T>
concept TierMarker = std::is_class_v<T> && std::is_empty_v<T> && std::is_trivially_copyable_v<T> &&
    std::is_default_constructible_v<T>;

/// Device memory tier (GPU HBM).
struct G1 {
  static constexpr std::string_view kName = "G1";
};
/// Pinned host memory tier.
struct G2 {
  static constexpr std::string_view kName = "G2";
};
/// Local disk tier.
struct G3 {
  static constexpr std::string_view kName = "G3";
};
/// Remote tier: a store shared by engine instances (kvbm/remote/). It has no
/// pool of its own (the store evicts by itself); the marker names it.
struct G4 {
  static constexpr std::string_view kName = "G4";
};

/// The built-in tiers as a value, for reports (e.g. where an onboarded block
/// came from); the numbers are the tiers' levels.
enum class TierId : std::uint8_t { kG1 = 1, kG2 = 2, kG3 = 3, kG4 = 4 };

/// Returns "G1", "G2", "G3" or "G4".
[[nodiscard]] constexpr std::string_view to_string(TierId t) noexcept {
  switch (t) {
    case TierId::kG1:
      return G1::kName;
    case TierId::kG2:
      return G2::kName;
    case TierId::kG3:
      return G3::kName;
    case TierId::kG4:
      return G4::kName;
  }
  return "unknown";
}

/// The built-in markers whose tier is a pool in a KvBlockManager: G1, G2, G3
/// (G4 has none).
template <class T>
concept PooledTier = std::same_as<T, G1> || std::same_as<T, G2> || std::same_as<T, G3>;

/// Returns the TierId of a built-in marker (G1..G4).
template <TierMarker T>
requires PooledTier<T> || std::same_as<T, G4>
constexpr TierId tier_id_of() noexcept {
  if constexpr (std::same_as<T, G1>) {
    return TierId::kG1;
  } else if constexpr (std::same_as<T, G2>) {
    return TierId::kG2;
  } else if constexpr (std::same_as<T, G3>) {
    return TierId::kG3;
  } else {
    return TierId::kG4;
  }
}

/// Returns the default pool name of a tier marker: its kName, or "custom".
template <TierMarker T>
constexpr std::string_view tier_name() noexcept {
  if constexpr (requires {
                  { T::kName } -> std::convertible_to<std::string_view>;
                }) {
    return T::kName;
  } else {
    return "custom";
  }
}

/// Returns the name of the copy path from tier `from` to tier `to`, e.g.
/// "G1_to_G2": the `path` label of the engine a KvBlockManager builds for it,
/// the `pipeline` label of the offloads along it (the facade appends
/// "_explicit" or "_on_eviction" for those mechanisms), and its name in
/// KvBlockManagerStats::transfers. Every place that names a path between
/// tiers calls this (docs/metrics.md, "Names of tiers and paths").
[[nodiscard]] inline std::string copy_path_name(TierId from, TierId to) {
  return std::string(to_string(from)) + "_to_" + std::string(to_string(to));
}

/// Returns the name of the copy path between two tier markers' pools:
/// copy_path_name() for the built-in markers, "<kName>_to_<kName>" for others.
template <TierMarker From, TierMarker To>
[[nodiscard]] std::string copy_path_name() {
  return std::string(tier_name<From>()) + "_to_" + std::string(tier_name<To>());
}

}  // namespace kvbm
