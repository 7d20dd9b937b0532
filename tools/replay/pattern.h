// replay/pattern.h: the bytes a replayed block holds.
//
// A "computed" block's regions are filled with 64-bit words derived from its
// sequence hash and the region's index (layer x outer_dim + outer), so that a
// block copied to the wrong place, or a stale or torn copy, fails verify().
//
// Thread-safety: pure functions.

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvbm::replay {

/// Returns the first word of region `region` of the block with hash `hash`.
[[nodiscard]] constexpr std::uint64_t pattern_seed(std::uint64_t hash,
                                                   std::uint64_t region) noexcept {
  std::uint64_t z = hash + 0x9E3779B97F4A7C15ULL * (region + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Returns word `i` of a region whose seed is `seed`.
[[nodiscard]] constexpr std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t i) noexcept {
  return seed ^ (i * 0xD6E8FEB86659FD93ULL);
}

/// Fills `size` bytes at `dst` with the pattern of (hash, region).
inline void fill_pattern(void* dst, std::size_t size, std::uint64_t hash,
                         std::uint64_t region) noexcept {
  const std::uint64_t seed = pattern_seed(hash, region);
  auto* p = static_cast<unsigned char*>(dst);
  const std::size_t words = size / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = pattern_word(seed, i);
    std::memcpy(p + i * 8, &w, 8);
  }
  if (const std::size_t tail = size % 8; tail != 0) {
    const std::uint64_t w = pattern_word(seed, words);
    std::memcpy(p + words * 8, &w, tail);
  }
}

/// Returns true when `size` bytes at `src` hold the pattern of (hash, region).
[[nodiscard]] inline bool check_pattern(const void* src, std::size_t size, std::uint64_t hash,
                                        std::uint64_t region) noexcept {
  const std::uint64_t seed = pattern_seed(hash, region);
  const auto* p = static_cast<const unsigned char*>(src);
  const std::size_t words = size / 8;
  std::uint64_t diff = 0;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    diff |= w ^ pattern_word(seed, i);
  }
  if (const std::size_t tail = size % 8; tail != 0) {
    std::uint64_t w = 0;
    std::uint64_t want = pattern_word(seed, words);
    std::memcpy(&w, p + words * 8, tail);
    std::uint64_t mask = (std::uint64_t{1} << (8 * tail)) - 1;
    diff |= (w ^ want) & mask;
  }
  return diff == 0;
}

}  // namespace kvbm::replay
