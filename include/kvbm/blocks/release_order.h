// kvbm/blocks/release_order.h: releasing a request's blocks, last block first.
//
// A pool evicts its inactive blocks least recently released first. A
// request's blocks are a chain (each hash covers its parent's), and a vector
// of them is destroyed first to last, so dropping the vector makes the chain's
// head the least recent block: it is evicted first, and the tail it leaves is
// cached but unreachable (a prefix match stops at the first miss). A router
// that indexes chains (as vLLM evicts them, tail first) also rejects the
// removals of blocks below a head it already dropped. release_tail_first()
// drops the blocks from the last to the first, so that eviction takes a
// chain's tail first and every cached block stays reachable.
//
// The handles are dropped in batches of consecutive blocks of one pool: one
// lock acquisition and one gauge update per batch instead of one per block,
// with the same transitions in the same order as dropping them one by one.
//
// Thread-safety: as dropping the handles one by one.

#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvbm/blocks/immutable_block.h"

namespace kvbm {

namespace detail {

/// Collects the references of handles dropped one after another and hands
/// each run of one pool's blocks (up to kCapacity) to the pool in one call.
/// Never allocates; whatever is collected is released by flush() or the
/// destructor, in the order it was collected.
class ReleaseBatch {
 public:
  static constexpr std::size_t kCapacity = 64;

  ReleaseBatch() = default;
  ReleaseBatch(const ReleaseBatch&) = delete;
  ReleaseBatch& operator=(const ReleaseBatch&) = delete;
  ~ReleaseBatch() { flush(); }

  /// Takes the handle's reference (the handle is moved-from afterwards).
  template <TierMarker T>
  void add(ImmutableBlock<T>& block) noexcept {
    if (block.store_ == nullptr) return;
    if (block.store_ != store_ || n_ == ids_.size()) flush();
    store_ = std::exchange(block.store_, nullptr);
    ids_[n_++] = block.id_;
  }

  /// Releases what was collected.
  void flush() noexcept {
    if (n_ != 0) store_->release_immutable_batch(std::span(ids_.data(), n_));
    n_ = 0;
    store_ = nullptr;  // the pool may be gone once its last block is back
  }

 private:
  BlockStore* store_ = nullptr;
  std::array<BlockId, kCapacity> ids_{};
  std::size_t n_ = 0;
};

}  // namespace detail

/// Drops `blocks` (a request's blocks, in prefix order) from the last to the
/// first; `blocks` is empty afterwards.
template <TierMarker T>
void release_tail_first(std::vector<ImmutableBlock<T>>& blocks) noexcept {
  detail::ReleaseBatch batch;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) batch.add(*it);
  batch.flush();
  blocks.clear();
}

/// Drops `blocks` from the first to the last, in batches as above (for blocks
/// that are not one request's chain, such as a batch of copies in eviction
/// order); `blocks` is empty afterwards.
template <TierMarker T>
void release_in_order(std::vector<ImmutableBlock<T>>& blocks) noexcept {
  detail::ReleaseBatch batch;
  for (auto& b : blocks) batch.add(b);
  batch.flush();
  blocks.clear();
}

/// As release_tail_first() above, for a request's blocks of which some may be missing.
template <TierMarker T>
void release_tail_first(std::vector<std::optional<ImmutableBlock<T>>>& blocks) noexcept {
  detail::ReleaseBatch batch;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (it->has_value()) batch.add(**it);
  }
  batch.flush();
  blocks.clear();
}

}  // namespace kvbm
