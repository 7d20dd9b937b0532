// kvbm/eviction/backend.h: the interface of an inactive-pool eviction backend.
//
// The inactive pool holds registered blocks that no handle references: they
// stay matchable by sequence hash until the pool needs their slot back. A
// backend decides the order in which they are given up. The block store calls
// every member with its tier lock held, so a backend needs no locking of its
// own and must never call back into the store, log or block.
//
// Block ids are dense indices in [0, capacity). A block is inserted when its
// last strong handle is dropped, removed when a match takes it back, and
// popped when an allocation evicts it.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "kvbm/blocks/block_id.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// Which eviction backend a pool uses.
enum class EvictionPolicy : std::uint8_t {
  kLru,            ///< least recently released first
  kMultiLevelLru,  ///< LRU within frequency levels, the least frequent level first
  kLineage,        ///< LRU among leaves: a block goes only when no child of it is cached
};

/// Returns the policy's name as used in configuration and logs.
constexpr std::string_view to_string(EvictionPolicy p) noexcept {
  switch (p) {
    case EvictionPolicy::kLru:
      return "lru";
    case EvictionPolicy::kMultiLevelLru:
      return "multi_level_lru";
    case EvictionPolicy::kLineage:
      return "lineage";
  }
  return "unknown";
}

/// Orders the inactive pool of one tier. Not thread-safe: the store's lock
/// serialises every call.
class EvictionBackend {
 public:
  virtual ~EvictionBackend() = default;

  /// Returns the backend's policy.
  [[nodiscard]] virtual EvictionPolicy policy() const noexcept = 0;

  /// Adds a block that has just become inactive. Precondition: id < capacity
  /// and the block is not in the pool.
  virtual void insert(BlockId id, const SequenceHash& hash) = 0;

  /// Removes a block that a match or upgrade takes back. Precondition: the
  /// block is in the pool.
  virtual void remove(BlockId id) noexcept = 0;

  /// Hint: remove() may follow soon for each of `ids` (a match found them;
  /// some may not be in the pool). A backend may start loading what those
  /// calls will touch; it must change nothing and should not wait on memory
  /// (prefetches, not loads). The default does nothing, so a custom backend
  /// need not override it.
  virtual void prefetch_remove(std::span<const BlockId> /*ids*/) const noexcept {}

  /// Removes and returns the next block to evict, or nullopt when no block
  /// may be evicted now.
  virtual std::optional<BlockId> pop_victim() noexcept = 0;

  /// Returns the block pop_victim() would return now, without removing it,
  /// or nullopt when the backend cannot tell cheaply (the default). The store
  /// uses it only to prefetch what the next eviction will touch.
  [[nodiscard]] virtual std::optional<BlockId> peek_victim() const noexcept { return std::nullopt; }

  /// Returns the number of blocks in the pool.
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;

  /// Returns how many blocks pop_victim() could hand out right now; equal to
  /// size() except for backends that protect some blocks (lineage).
  [[nodiscard]] virtual std::size_t evictable() const noexcept { return size(); }

  /// Told when a block with this hash is registered in the tier (whether it
  /// is in use or inactive), and when it leaves the tier. Only lineage uses it.
  virtual void on_registered(const SequenceHash& /*hash*/) {}
  virtual void on_unregistered(const SequenceHash& /*hash*/) noexcept {}
};

}  // namespace kvbm
