// kvbm/blocks/immutable_block.h: a registered, shared block.
//
// An ImmutableBlock<T> is a strong, copyable reference to a block registered
// in its tier: its contents are final and other requests can find it by
// sequence hash. While any strong reference exists the block cannot be
// evicted. Dropping the last one moves the block to the inactive pool, where
// it stays matchable until an allocation needs its slot (a duplicate, under
// DuplicatePolicy::kAllow, goes straight back to the reset pool instead).
// downgrade() gives a WeakBlock<T> that does not hold the block.
//
// Thread-safety: copies of one handle may be used and dropped concurrently on
// any thread, also after the manager has been destroyed.

#pragma once

#include <cstdint>
#include <utility>

#include "kvbm/blocks/fwd.h"
#include "kvbm/error.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

namespace detail {
class ReleaseBatch;
}  // namespace detail

/// A strong, shared reference to a registered block of tier T.
template <TierMarker T>
class [[nodiscard]] ImmutableBlock {
 public:
  ImmutableBlock(const ImmutableBlock& other) noexcept : store_(other.store_), id_(other.id_) {
    if (store_ != nullptr) store_->acquire(id_);
  }
  ImmutableBlock& operator=(const ImmutableBlock& other) noexcept {
    if (this != &other) {
      if (other.store_ != nullptr) other.store_->acquire(other.id_);
      reset();
      store_ = other.store_;
      id_ = other.id_;
    }
    return *this;
  }
  ImmutableBlock(ImmutableBlock&& other) noexcept
      : store_(std::exchange(other.store_, nullptr)), id_(other.id_) {}
  ImmutableBlock& operator=(ImmutableBlock&& other) noexcept {
    if (this != &other) {
      reset();
      store_ = std::exchange(other.store_, nullptr);
      id_ = other.id_;
    }
    return *this;
  }
  ~ImmutableBlock() { reset(); }

  /// Returns false for a moved-from handle.
  [[nodiscard]] bool valid() const noexcept { return store_ != nullptr; }
  /// Returns the block's index in its pool.
  [[nodiscard]] BlockId block_id() const {
    check("block_id");
    return id_;
  }
  /// Returns the block's sequence hash.
  [[nodiscard]] const SequenceHash& sequence_hash() const {
    check("sequence_hash");
    return store_->slot_hash(id_);
  }
  /// Returns the number of strong references to the block (a snapshot).
  [[nodiscard]] std::uint32_t use_count() const {
    check("use_count");
    return store_->ref_count(id_);
  }
  /// Returns a non-owning reference that can be upgraded while the block (or
  /// another block with the same hash) stays registered in the tier.
  [[nodiscard]] WeakBlock<T> downgrade() const;

  friend bool operator==(const ImmutableBlock& a, const ImmutableBlock& b) noexcept {
    return a.store_ == b.store_ && (a.store_ == nullptr || a.id_ == b.id_);
  }

 private:
  friend class BlockManager<T>;
  friend class WeakBlock<T>;
  friend class detail::ReleaseBatch;
  // Adopts a strong reference the store already counted.
  ImmutableBlock(detail::BlockStore* store, BlockId id) noexcept : store_(store), id_(id) {}

  void check(const char* call) const {
    KVBM_CHECK(store_ != nullptr, "ImmutableBlock::", call, "() called on a moved-from handle");
  }
  void reset() noexcept {
    if (store_ != nullptr) std::exchange(store_, nullptr)->release_immutable(id_);
  }

  detail::BlockStore* store_;
  BlockId id_;
};

}  // namespace kvbm

#include "kvbm/blocks/weak_block.h"  // NOLINT(misc-header-include-cycle)

namespace kvbm {

template <TierMarker T>
WeakBlock<T> ImmutableBlock<T>::downgrade() const {
  check("downgrade");
  return WeakBlock<T>(store_->weak_from_this(), id_, store_->generation(id_),
                      store_->slot_hash(id_));
}

}  // namespace kvbm
