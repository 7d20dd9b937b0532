// kvbm/blocks/mutable_block.h: an allocated, writable block.
//
// A MutableBlock<T> is the first state of a block's life: it was taken from
// the reset pool (or evicted from the inactive pool) by
// BlockManager<T>::allocate_blocks and is exclusively owned by its handle.
// Its contents (the KV data of its tokens) are being written. Staging it with
// the block's sequence hash turns it into a CompleteBlock<T>:
//
//     auto complete = std::move(block).stage(hash, manager.block_size());
//
// Transitions are rvalue-qualified; calling them on an lvalue does not compile.
// A failed transition returns the block inside the error, so it is never lost.
// Dropping the handle returns the block to the reset pool.
//
// Thread-safety: a handle is not shared; it may be moved to and dropped on any
// thread, also after its manager has been destroyed. A moved-from handle is
// empty: valid() is false, its destructor does nothing and any other use
// throws UsageError.

#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kvbm/blocks/fwd.h"
#include "kvbm/error.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// A failed staging: why, and the block, handed back intact.
template <TierMarker T>
struct StageError;

/// An allocated, exclusively owned, writable block of tier T.
template <TierMarker T>
class [[nodiscard]] MutableBlock {
 public:
  MutableBlock(MutableBlock&& other) noexcept
      : store_(std::exchange(other.store_, nullptr)), id_(other.id_) {}
  MutableBlock& operator=(MutableBlock&& other) noexcept {
    if (this != &other) {
      reset();
      store_ = std::exchange(other.store_, nullptr);
      id_ = other.id_;
    }
    return *this;
  }
  MutableBlock(const MutableBlock&) = delete;
  MutableBlock& operator=(const MutableBlock&) = delete;
  ~MutableBlock() { reset(); }

  /// Returns false for a moved-from handle.
  [[nodiscard]] bool valid() const noexcept { return store_ != nullptr; }
  /// Returns the block's index in its pool.
  [[nodiscard]] BlockId block_id() const {
    check("block_id");
    return id_;
  }
  /// Returns the number of tokens the block holds when full.
  [[nodiscard]] std::uint32_t block_size() const {
    check("block_size");
    return store_->block_size();
  }

  /// Stages the block with its sequence hash. `block_size` must equal the
  /// pool's block size; otherwise the error carries the block back.
  Result<CompleteBlock<T>, StageError<T>> stage(const SequenceHash& hash,
                                                std::uint32_t block_size) &&;
  /// Stages from a full token block (anything with tokens() and
  /// sequence_hash()); the token count must equal the pool's block size.
  template <class TokenBlockLike>
  requires requires(const TokenBlockLike& b) {
    { b.tokens().size() } -> std::convertible_to<std::size_t>;
    { b.sequence_hash() } -> std::convertible_to<SequenceHash>;
  }
  Result<CompleteBlock<T>, StageError<T>> complete(const TokenBlockLike& token_block) && {
    return std::move(*this).stage(token_block.sequence_hash(),
                                  static_cast<std::uint32_t>(token_block.tokens().size()));
  }

  // Transitions consume the block: call them on std::move(block).
  Result<CompleteBlock<T>, StageError<T>> stage(const SequenceHash&, std::uint32_t) & = delete;
  template <class TokenBlockLike>
  Result<CompleteBlock<T>, StageError<T>> complete(const TokenBlockLike&) & = delete;

 private:
  friend class BlockManager<T>;
  friend class CompleteBlock<T>;
  MutableBlock(detail::BlockStore* store, BlockId id) noexcept : store_(store), id_(id) {}

  void check(const char* call) const {
    KVBM_CHECK(store_ != nullptr, "MutableBlock::", call, "() called on a moved-from handle");
  }
  void reset() noexcept {
    if (store_ != nullptr) std::exchange(store_, nullptr)->release_mutable(id_);
  }

  detail::BlockStore* store_;
  BlockId id_;
};

template <TierMarker T>
struct StageError {
  MutableBlock<T> block;  ///< the block, unchanged
  std::string reason;     ///< what was wrong
};

}  // namespace kvbm

#include "kvbm/blocks/complete_block.h"

namespace kvbm {

template <TierMarker T>
Result<CompleteBlock<T>, StageError<T>> MutableBlock<T>::stage(const SequenceHash& hash,
                                                               std::uint32_t block_size) && {
  check("stage");
  if (block_size != store_->block_size()) {
    std::string reason =
        detail::concat("block size mismatch: the block holds ", store_->block_size(),
                       " tokens but ", block_size, " were given");
    return StageError<T>{std::move(*this), std::move(reason)};
  }
  store_->note_staged(hash);
  detail::BlockStore* store = std::exchange(store_, nullptr);
  return CompleteBlock<T>(store, id_, hash);
}

}  // namespace kvbm
