// src/router/block_slot_map.h: the router's map from block hash to its entry.
//
// A ProbingTable (kvbm/detail/probing_table.h), like the pool's HashIndex, but
// growing: the router cannot know how many blocks a cluster will hold. It
// doubles when it is 3/4 full, so a lookup stays one multiply, a shift and
// almost always one cache line. A slot is 16 bytes: the key, the row of the
// block's per-instance bits (BlockIndex) and the mask of shared tiers that
// hold the block.
//
// Not thread-safe: the KvIndexer's lock guards it.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvbm/detail/probing_table.h"

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

class BlockSlotMap {
 public:
  BlockSlotMap() : table_(kMinSlots) {}

  /// Returns the slot of `key`, or nullptr.
  [[nodiscard]] const BlockSlot* find(std::uint64_t key) const noexcept { return table_.find(key); }
  [[nodiscard]] BlockSlot* find(std::uint64_t key) noexcept { return table_.find(key); }

  /// Returns the slot of `key`, inserted empty when absent. Invalidates
  /// pointers to other slots (the table may grow).
  BlockSlot& find_or_insert(std::uint64_t key) {
    if (BlockSlot* s = table_.find(key)) return *s;
    if ((table_.size() + 1) * 4 > table_.slot_count() * 3) table_.grow();
    return *table_.find_or_insert(key).first;
  }

  /// Removes `key`; returns whether it was present. Invalidates pointers to slots.
  bool erase(std::uint64_t key) noexcept { return table_.erase(key); }

  /// Calls fn(BlockSlot&) on every used slot. fn must not insert or erase.
  template <class Fn>
  void for_each(Fn&& fn) {
    table_.for_each(std::forward<Fn>(fn));
  }

  [[nodiscard]] std::size_t size() const noexcept { return table_.size(); }
  /// Bytes of the table.
  [[nodiscard]] std::size_t bytes() const noexcept { return table_.bytes(); }

 private:
  static constexpr std::size_t kMinSlots = 64;
  kvbm::detail::ProbingTable<BlockSlot> table_;
};

}  // namespace kvbm::router::impl
