// kvbm/blocks/weak_block.h: a non-owning reference to a registered block.
//
// A WeakBlock<T> remembers a registered block without keeping it: the block
// may be evicted while only weak references remain. upgrade() returns a
// strong ImmutableBlock<T> when the block is still registered: first through
// the same block (in use or in the inactive pool), then through any block
// registered in the tier under the same sequence hash. After the manager has
// been destroyed, upgrade() returns nullopt.
//
// Thread-safety: a WeakBlock is a value; copies may be upgraded concurrently.

#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "kvbm/blocks/fwd.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// A non-owning reference to a registered block of tier T.
template <TierMarker T>
class WeakBlock {
 public:
  /// Returns the sequence hash of the referenced block.
  [[nodiscard]] const SequenceHash& sequence_hash() const noexcept { return hash_; }
  /// Returns the id of the block this reference was taken from.
  [[nodiscard]] BlockId block_id() const noexcept { return id_; }
  /// Returns a strong reference if the block (or one with the same hash) is
  /// still registered in the tier, else nullopt.
  [[nodiscard]] std::optional<ImmutableBlock<T>> upgrade() const {
    const auto store = store_.lock();
    if (!store) return std::nullopt;
    const auto id = store->upgrade(id_, generation_, hash_);
    if (!id) return std::nullopt;
    return ImmutableBlock<T>(store.get(), *id);
  }

 private:
  friend class ImmutableBlock<T>;
  WeakBlock(std::weak_ptr<detail::BlockStore> store, BlockId id, std::uint32_t generation,
            const SequenceHash& hash) noexcept
      : store_(std::move(store)), id_(id), generation_(generation), hash_(hash) {}

  std::weak_ptr<detail::BlockStore> store_;
  BlockId id_;
  std::uint32_t generation_;
  SequenceHash hash_;
};

}  // namespace kvbm
