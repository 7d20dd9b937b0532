// src/remote/payload_checksum.h: the payload checksum of a remote value (XXH3-64, the format's
// field at offset 40), computed with the widest vectors the CPU has.
//
// XXH3 gives the same value whatever the vector width; the library is built for the baseline
// x86-64 (SSE2), where XXH3 runs at about half the speed it reaches with AVX2. On x86-64 the
// AVX2 variant (payload_checksum_avx2.cpp, the one file built with -mavx2) is taken when the
// CPU has AVX2, chosen once.
//
// Thread-safety: the functions are pure.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvbm::remote {

/// Returns XXH3-64 of `bytes`.
[[nodiscard]] std::uint64_t payload_checksum(std::span<const std::byte> bytes) noexcept;

/// Returns XXH3-64 of the regions' bytes, one after the other.
[[nodiscard]] std::uint64_t payload_checksum(
    std::span<const std::span<const std::byte>> regions) noexcept;

}  // namespace kvbm::remote
