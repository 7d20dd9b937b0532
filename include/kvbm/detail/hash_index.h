// kvbm/detail/hash_index.h: the pool's map from sequence hash to block id.
//
// A ProbingTable (kvbm/detail/probing_table.h) sized once: a pool never holds more registered
// hashes than it has blocks, so the table is built with at least twice that many slots (a power of
// two) and never grows or rehashes. A lookup is one multiply, a shift and, almost always, one cache
// line; std::unordered_map pays a division for the bucket and a pointer chase per node.
//
// Keys are any 64-bit values (sequence hashes, or small integers a caller
// chose): they are mixed by a Fibonacci multiply before picking the slot.
//
// Not thread-safe: the pool's lock guards it.

#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kvbm/blocks/block_id.h"
#include "kvbm/detail/huge_page_allocator.h"
#include "kvbm/detail/probing_table.h"

namespace kvbm::detail {

class HashIndex {
 public:
  /// A table for at most `max_entries` keys.
  explicit HashIndex(std::size_t max_entries)
      : table_(std::bit_ceil(std::max<std::size_t>(2 * max_entries, 8))),
        max_entries_(max_entries) {}

  /// Returns the block of `key`, or nullptr.
  [[nodiscard]] const BlockId* find(std::uint64_t key) const noexcept {
    const Slot* s = table_.find(key);
    return s != nullptr ? &s->value : nullptr;
  }
  [[nodiscard]] bool contains(std::uint64_t key) const noexcept { return find(key) != nullptr; }

  /// Asks for the cache line where `key` is looked up, ahead of a find,
  /// try_emplace or erase. Touches only the table's fixed address and size,
  /// so it may be called without the lock that guards the entries.
  void prefetch(std::uint64_t key) const noexcept { table_.prefetch(key); }

  /// Inserts key -> value unless the key is present; returns the value now
  /// stored and whether it was inserted. Precondition: size() < max_entries
  /// or the key is present.
  std::pair<BlockId, bool> try_emplace(std::uint64_t key, BlockId value) noexcept {
    auto [s, inserted] = table_.find_or_insert(key);
    if (inserted) s->value = value;
    return {s->value, inserted};
  }

  /// Removes `key`; returns whether it was present.
  bool erase(std::uint64_t key) noexcept { return table_.erase(key); }

  [[nodiscard]] std::size_t size() const noexcept { return table_.size(); }
  [[nodiscard]] std::size_t max_entries() const noexcept { return max_entries_; }
  /// Bytes of the table.
  [[nodiscard]] std::size_t bytes() const noexcept { return table_.bytes(); }

 private:
  struct Slot {
    std::uint64_t key = 0;
    BlockId value = 0;
    std::uint32_t used = 0;
  };

  ProbingTable<Slot, HugePageAllocator<Slot>> table_;  // huge pages once >= 2 MiB
  std::size_t max_entries_;
};

}  // namespace kvbm::detail
