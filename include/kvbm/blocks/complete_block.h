// kvbm/blocks/complete_block.h: a staged block, ready to register.
//
// A CompleteBlock<T> holds a block whose contents are final and which carries
// its sequence hash, but which is not yet visible to matching. Register it
// with BlockManager<T>::register_block to get an ImmutableBlock<T>. Dropping
// it returns the block to the reset pool.
//
// Thread-safety: as MutableBlock.

#pragma once

#include <utility>

#include "kvbm/blocks/fwd.h"
#include "kvbm/error.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// A staged block of tier T: final contents, known sequence hash.
template <TierMarker T>
class [[nodiscard]] CompleteBlock {
 public:
  CompleteBlock(CompleteBlock&& other) noexcept
      : store_(std::exchange(other.store_, nullptr)), id_(other.id_), hash_(other.hash_) {}
  CompleteBlock& operator=(CompleteBlock&& other) noexcept {
    if (this != &other) {
      reset();
      store_ = std::exchange(other.store_, nullptr);
      id_ = other.id_;
      hash_ = other.hash_;
    }
    return *this;
  }
  CompleteBlock(const CompleteBlock&) = delete;
  CompleteBlock& operator=(const CompleteBlock&) = delete;
  ~CompleteBlock() { reset(); }

  /// Returns false for a moved-from handle.
  [[nodiscard]] bool valid() const noexcept { return store_ != nullptr; }
  /// Returns the block's index in its pool.
  [[nodiscard]] BlockId block_id() const {
    check("block_id");
    return id_;
  }
  /// Returns the sequence hash the block was staged with.
  [[nodiscard]] const SequenceHash& sequence_hash() const {
    check("sequence_hash");
    return hash_;
  }
  /// Returns the block to the writable state (drops the staged hash).
  MutableBlock<T> reset_to_mutable() && {
    check("reset_to_mutable");
    return MutableBlock<T>(std::exchange(store_, nullptr), id_);
  }
  MutableBlock<T> reset_to_mutable() & = delete;

 private:
  friend class BlockManager<T>;
  friend class MutableBlock<T>;
  CompleteBlock(detail::BlockStore* store, BlockId id, const SequenceHash& hash) noexcept
      : store_(store), id_(id), hash_(hash) {}

  void check(const char* call) const {
    KVBM_CHECK(store_ != nullptr, "CompleteBlock::", call, "() called on a moved-from handle");
  }
  void reset() noexcept {
    if (store_ != nullptr) std::exchange(store_, nullptr)->release_mutable(id_);
  }
  // Gives up ownership without returning the block (registration took it).
  detail::BlockStore* release_to_registry() noexcept { return std::exchange(store_, nullptr); }

  detail::BlockStore* store_;
  BlockId id_;
  SequenceHash hash_;
};

}  // namespace kvbm

#include "kvbm/blocks/mutable_block.h"  // NOLINT(misc-header-include-cycle)
