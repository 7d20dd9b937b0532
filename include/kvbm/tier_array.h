// kvbm/tier_array.h: per-tier data, indexed by TierId.
//
// A TierArray<T> holds one T per built-in tier (G1..G4, kvbm/tier.h), indexed
// by the tier's id, so code that keeps something per tier (a block count, a
// cost, a row of the facade) names the tier and never an offset:
//
//   TierArray<std::size_t> hits{};
//   ++hits[TierId::kG2];
//   for (const TierId t : kTierIds) print(to_string(t), hits[t]);
//   std::size_t all = total(hits);
//
// Iterating a TierArray visits its values in tier order, fastest first (the
// order of kTierIds). It is an aggregate: `TierArray<double>{{0, 0.05, 0.2,
// 0.3}}` gives G1..G4 in order. The facade's tables, the router's counts and
// costs, the onboarding counts and the replay's figures all use it, so a new
// tier is one more id here and nowhere else.
//
// Thread-safety: a plain value.

#pragma once

#include <array>
#include <cstddef>

#include "kvbm/tier.h"

namespace kvbm {

/// Every built-in tier, fastest first.
inline constexpr std::array<TierId, 4> kTierIds = {TierId::kG1, TierId::kG2, TierId::kG3,
                                                   TierId::kG4};
/// The number of built-in tiers.
inline constexpr std::size_t kTierCount = kTierIds.size();

/// One T per tier, indexed by TierId; see the file comment.
template <class T>
struct TierArray {
  using value_type = T;
  using iterator = typename std::array<T, kTierCount>::iterator;
  using const_iterator = typename std::array<T, kTierCount>::const_iterator;

  std::array<T, kTierCount> items{};

  /// Returns the position of tier `t` in `items` (G1: 0).
  [[nodiscard]] static constexpr std::size_t index(TierId t) noexcept {
    return static_cast<std::size_t>(t) - 1;
  }
  /// Returns the number of tiers (kTierCount).
  [[nodiscard]] static constexpr std::size_t size() noexcept { return kTierCount; }
  /// Returns the tiers in the order iteration visits them (kTierIds).
  [[nodiscard]] static constexpr const std::array<TierId, kTierCount>& ids() noexcept {
    return kTierIds;
  }

  [[nodiscard]] constexpr T& operator[](TierId t) noexcept { return items[index(t)]; }
  [[nodiscard]] constexpr const T& operator[](TierId t) const noexcept { return items[index(t)]; }

  [[nodiscard]] constexpr iterator begin() noexcept { return items.begin(); }
  [[nodiscard]] constexpr iterator end() noexcept { return items.end(); }
  [[nodiscard]] constexpr const_iterator begin() const noexcept { return items.begin(); }
  [[nodiscard]] constexpr const_iterator end() const noexcept { return items.end(); }

  /// Sets every tier's value to `v`.
  constexpr void fill(const T& v) { items.fill(v); }

  friend constexpr bool operator==(const TierArray&, const TierArray&) = default;
};

/// Returns the sum of `a`'s values over every tier.
template <class T>
[[nodiscard]] constexpr T total(const TierArray<T>& a) noexcept {
  T sum{};
  for (const T& v : a) sum += v;
  return sum;
}

}  // namespace kvbm
