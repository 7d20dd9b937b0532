// src/io/bulk_xxh3.h: XXH3-64 of large buffers (block payloads: the disk tier's slot checksum,
// the remote tier's payload checksum), computed with the widest vectors the CPU has.
//
// XXH3 gives the same value whatever the vector width; the library is built for the baseline
// x86-64 (SSE2), where XXH3 runs at about half the speed it reaches with AVX2 on long inputs.
// On x86-64 the AVX2 variant (bulk_xxh3_avx2.cpp, the one file built with -mavx2) is taken
// when the CPU has AVX2, chosen once. Short inputs (headers, keys) keep calling XXH3 inline.
//
// Thread-safety: the functions are pure; a BulkXxh3 is one caller's.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvbm::io {

/// Returns XXH3-64 (no seed) of `bytes`.
[[nodiscard]] std::uint64_t bulk_xxh3(std::span<const std::byte> bytes) noexcept;

/// Returns XXH3-64 (no seed) of the regions' bytes, one after the other.
[[nodiscard]] std::uint64_t bulk_xxh3(std::span<const std::span<const std::byte>> regions) noexcept;

/// XXH3-64 (no seed) of pieces given one after the other: the same value as
/// bulk_xxh3() of their concatenation.
class BulkXxh3 {
 public:
  BulkXxh3() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  [[nodiscard]] std::uint64_t digest() const noexcept;

  static constexpr std::size_t kStateBytes = 576;  // sizeof(XXH3_state_t), checked

 private:
  alignas(64) unsigned char state_[kStateBytes];  // an XXH3_state_t
};

}  // namespace kvbm::io
