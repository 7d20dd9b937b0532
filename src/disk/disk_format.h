// src/disk/disk_format.h: the on-disk records of a disk pool file (private to src/).
//
// Both records are 64 bytes, in host byte order, each ending in an XXH3-64
// of the bytes before it. docs/disk_tier.md draws the file.

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>

#include "kvbm/disk/disk_storage.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm::detail {

inline constexpr std::uint64_t kSlotMagic =
    0x544F4C534D42564BULL;  // "KVBMSLOT" as little-endian bytes
inline constexpr std::uint64_t kFileMagic = 0x454C49464D42564BULL;  // "KVBMFILE"

/// The last 64 bytes of a slot's header sector (the first 4032 are zero).
struct SlotHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;
  std::uint64_t block_bytes;
  std::uint64_t slot;
  std::uint64_t checksum;         // XXH3-64 of the block's bytes
  std::uint64_t hash;             // the sequence hash the bytes belong to
  std::uint64_t fingerprint;      // DiskStorage::layout_fingerprint() of the writer
  std::uint64_t header_checksum;  // XXH3-64 of the bytes above
};
static_assert(sizeof(SlotHeader) == DiskStorage::kHeaderBytes);
inline constexpr std::size_t kHeaderHashedBytes = offsetof(SlotHeader, header_checksum);

/// The first 64 bytes of the file's last 4 KiB (the rest are zero).
struct Superblock {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t superblock_bytes;
  std::uint64_t slot_bytes;
  std::uint64_t block_bytes;
  std::uint64_t num_blocks;
  std::uint64_t fingerprint;
  std::uint64_t reserved;
  std::uint64_t checksum;  // XXH3-64 of the bytes above
};
static_assert(sizeof(Superblock) == 64);
inline constexpr std::size_t kSuperblockHashedBytes = offsetof(Superblock, checksum);

/// Reads the header record at the end of a header sector (any size >= 64).
inline SlotHeader load_header(std::span<const std::byte> sector) noexcept {
  SlotHeader h{};
  if (sector.size() >= sizeof h)
    std::memcpy(&h, sector.data() + sector.size() - sizeof h, sizeof h);
  return h;
}

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

/// `bytes` of memory aligned to DiskStorage::kAlignment (what O_DIRECT asks of
/// a buffer), zeroed unless `zero` is false, freed on destruction. Throws
/// std::bad_alloc.
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t bytes, bool zero = true)
      : p(static_cast<std::byte*>(std::aligned_alloc(DiskStorage::kAlignment, bytes))), n(bytes) {
    if (p == nullptr) throw std::bad_alloc();
    if (zero) std::memset(p, 0, n);
  }
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  [[nodiscard]] std::span<std::byte> span() noexcept { return {p, n}; }
  std::byte* p;
  std::size_t n;
};

}  // namespace kvbm::detail
