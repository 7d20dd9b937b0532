// kvbm/detail/hash_index.h: the pool's map from sequence hash to block id.
//
// An open-addressing table with linear probing and backward-shift deletion
// (no tombstones), sized once: a pool never holds more registered hashes than
// it has blocks, so the table is built with at least twice that many slots
// (a power of two) and never grows or rehashes. A lookup is one multiply, a
// shift and, almost always, one cache line; std::unordered_map pays a
// division for the bucket and a pointer chase per node.
//
// Keys are any 64-bit values (sequence hashes, or small integers a caller
// chose): they are mixed by a Fibonacci multiply before picking the slot.
//
// Not thread-safe: the pool's lock guards it.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvbm/blocks/block_id.h"
#include "kvbm/detail/huge_page_allocator.h"

namespace kvbm::detail {

/// Asks for the cache line at `p`, which is about to be written (a hint).
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__GNUC__)
  __builtin_prefetch(p, 1);
#else
  (void)p;
#endif
}

class HashIndex {
 public:
  /// A table for at most `max_entries` keys.
  explicit HashIndex(std::size_t max_entries)
      : slots_(std::bit_ceil(std::max<std::size_t>(2 * max_entries, 8))),
        mask_(slots_.size() - 1),
        shift_(static_cast<unsigned>(64 - std::countr_zero(slots_.size()))),
        max_entries_(max_entries) {}

  /// Returns the block of `key`, or nullptr.
  [[nodiscard]] const BlockId* find(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.used == 0) return nullptr;
      if (s.key == key) return &s.value;
    }
  }
  [[nodiscard]] bool contains(std::uint64_t key) const noexcept { return find(key) != nullptr; }

  /// Asks for the cache line where `key` is looked up, ahead of a find,
  /// try_emplace or erase. Touches only the table's fixed address and size,
  /// so it may be called without the lock that guards the entries.
  void prefetch(std::uint64_t key) const noexcept { prefetch_for_write(&slots_[home(key)]); }

  /// Inserts key -> value unless the key is present; returns the value now
  /// stored and whether it was inserted. Precondition: size() < max_entries
  /// or the key is present.
  std::pair<BlockId, bool> try_emplace(std::uint64_t key, BlockId value) noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.used == 0) {
        s = {key, value, 1};
        ++size_;
        return {value, true};
      }
      if (s.key == key) return {s.value, false};
    }
  }

  /// Removes `key`; returns whether it was present.
  bool erase(std::uint64_t key) noexcept {
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].used == 0) return false;
      if (slots_[i].key == key) break;
    }
    // Backward shift: pull later members of the probe run into the hole when
    // the hole lies between their home slot and where they sit.
    std::size_t hole = i;
    for (std::size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
      const Slot& s = slots_[j];
      if (s.used == 0) break;
      const std::size_t h = home(s.key);
      const bool movable = ((j - h) & mask_) >= ((j - hole) & mask_);
      if (movable) {
        slots_[hole] = s;
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t max_entries() const noexcept { return max_entries_; }
  /// Bytes of the table.
  [[nodiscard]] std::size_t bytes() const noexcept { return slots_.size() * sizeof(Slot); }

 private:
  struct Slot {
    std::uint64_t key = 0;
    BlockId value = 0;
    std::uint32_t used = 0;
  };

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;  // huge pages once >= 2 MiB
  std::size_t mask_;
  unsigned shift_;
  std::size_t max_entries_;
  std::size_t size_ = 0;
};

}  // namespace kvbm::detail
