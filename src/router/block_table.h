// src/router/block_table.h: the router's map from block hash to its entry.
//
// An open-addressing table with linear probing and backward-shift deletion
// (no tombstones), like kvbm/detail/hash_index.h, but growing: the router
// cannot know how many blocks a cluster will hold. It doubles when it is 3/4
// full, so a lookup stays one multiply, a shift and almost always one cache
// line. A slot is 16 bytes: the key, the row of the block's per-instance bits
// (BlockIndex) and the mask of shared tiers that hold the block.
//
// Not thread-safe: the KvIndexer's lock guards it.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvbm::router::impl {

/// A row index that means "no instance holds the block in a local tier".
inline constexpr std::uint32_t kNoRow = 0xFFFF'FFFFU;

/// One block's entry.
struct BlockSlot {
  std::uint64_t key = 0;
  std::uint32_t row = kNoRow;  ///< its row of per-instance bits, or kNoRow
  std::uint8_t shared = 0;     ///< bit t set: shared tier t holds it
  std::uint8_t used = 0;
};
static_assert(sizeof(BlockSlot) == 16);

class BlockTable {
 public:
  BlockTable() { reset(kMinSlots); }

  /// Returns the slot of `key`, or nullptr.
  [[nodiscard]] const BlockSlot* find(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const BlockSlot& s = slots_[i];
      if (s.used == 0) return nullptr;
      if (s.key == key) return &s;
    }
  }
  [[nodiscard]] BlockSlot* find(std::uint64_t key) noexcept {
    return const_cast<BlockSlot*>(std::as_const(*this).find(key));
  }

  /// Returns the slot of `key`, inserted empty when absent. Invalidates
  /// pointers to other slots (the table may grow).
  BlockSlot& find_or_insert(std::uint64_t key) {
    if (BlockSlot* s = find(key)) return *s;
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      BlockSlot& s = slots_[i];
      if (s.used == 0) {
        s = BlockSlot{key, kNoRow, 0, 1};
        ++size_;
        return s;
      }
    }
  }

  /// Removes `key`; returns whether it was present. Invalidates pointers to slots.
  bool erase(std::uint64_t key) noexcept {
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].used == 0) return false;
      if (slots_[i].key == key) break;
    }
    std::size_t hole = i;
    for (std::size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
      const BlockSlot& s = slots_[j];
      if (s.used == 0) break;
      const std::size_t h = home(s.key);
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = s;
        hole = j;
      }
    }
    slots_[hole] = BlockSlot{};
    --size_;
    return true;
  }

  /// Calls fn(BlockSlot&) on every used slot. fn must not insert or erase.
  template <class Fn>
  void for_each(Fn&& fn) {
    for (BlockSlot& s : slots_) {
      if (s.used != 0) fn(s);
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Bytes of the table.
  [[nodiscard]] std::size_t bytes() const noexcept { return slots_.size() * sizeof(BlockSlot); }

 private:
  static constexpr std::size_t kMinSlots = 64;

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  void reset(std::size_t slots) {
    slots_.assign(slots, BlockSlot{});
    mask_ = slots - 1;
    shift_ = static_cast<unsigned>(64 - std::countr_zero(slots));
    size_ = 0;
  }

  void grow() {
    std::vector<BlockSlot> old = std::move(slots_);
    reset(old.size() * 2);
    for (const BlockSlot& s : old) {
      if (s.used == 0) continue;
      for (std::size_t i = home(s.key);; i = (i + 1) & mask_) {
        if (slots_[i].used == 0) {
          slots_[i] = s;
          break;
        }
      }
      ++size_;
    }
  }

  std::vector<BlockSlot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace kvbm::router::impl
