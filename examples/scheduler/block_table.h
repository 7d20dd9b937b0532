// examples/scheduler/block_table.h: one sequence's blocks (Algorithm 3 on kvbm).
//
// The paged-attention block table maps a sequence's logical blocks to
// physical ones, with a reference count per physical block so that forks can
// share. On kvbm the reference count is the handle itself:
//
//   full blocks   ImmutableBlock<G1>: registered, read-only, copyable shared
//                 handles. Copying one is the paper's ref_count += 1, dropping
//                 it is ref_count -= 1; the last drop leaves the block cached
//                 in G1's inactive pool (still matchable by later requests).
//   tail block    the one block still being written. A MutableBlock<G1> is
//                 exclusively owned, so forks share it through a shared_ptr
//                 until one of them writes: then that fork copies the tail's
//                 filled slots into a fresh MutableBlock (copy-on-write) and
//                 the others keep the original. The last holder writes in place.
//
//   allocate      fresh MutableBlocks from the pool (BlockManager::allocate_blocks)
//   append        a tail block when the previous one filled; a full tail is
//                 staged with its sequence hash and registered (KvBlockManager::register_blocks)
//   free          clear(): drop every handle
//   fork          fork(): copy the full-block handles, share the tail
//
// Thread-safety: none; one scheduler thread owns the tables.

#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/blocks/release_order.h"
#include "kvbm/error.h"
#include "kvbm/tier.h"

namespace kvbm_example {

/// The blocks of one sequence: registered full blocks and a writable tail.
class BlockTable {
 public:
  using Full = kvbm::ImmutableBlock<kvbm::G1>;
  using Tail = kvbm::MutableBlock<kvbm::G1>;

  BlockTable() = default;
  BlockTable(const BlockTable&) = default;
  BlockTable(BlockTable&&) noexcept = default;
  BlockTable& operator=(const BlockTable&) = default;
  BlockTable& operator=(BlockTable&&) noexcept = default;
  ~BlockTable() { clear(); }

  /// Returns the registered full blocks, in logical order.
  [[nodiscard]] const std::vector<Full>& full() const noexcept { return full_; }
  /// Returns the number of full blocks.
  [[nodiscard]] std::size_t num_full() const noexcept { return full_.size(); }
  /// Returns true when a tail block is held.
  [[nodiscard]] bool has_tail() const noexcept { return tail_ != nullptr; }
  /// Returns true when the tail block is shared with a fork (writing to it
  /// needs a copy first).
  [[nodiscard]] bool tail_shared() const noexcept {
    return tail_ != nullptr && tail_.use_count() > 1;
  }
  /// Returns the tail's block id. Precondition: has_tail().
  [[nodiscard]] kvbm::BlockId tail_id() const { return tail_->block_id(); }
  /// Returns the number of physical blocks this table references.
  [[nodiscard]] std::size_t num_blocks() const noexcept { return full_.size() + (tail_ ? 1 : 0); }

  /// Appends registered full blocks (prefix hits, onboarded or computed).
  void append_full(std::vector<Full>&& blocks) {
    for (auto& b : blocks) full_.push_back(std::move(b));
    blocks.clear();
  }
  /// Appends one registered full block.
  void append_full(Full&& block) { full_.push_back(std::move(block)); }

  /// Installs a fresh, exclusively owned tail. Precondition: !has_tail().
  void set_tail(Tail&& block) { tail_ = std::make_shared<Tail>(std::move(block)); }

  /// Copy-on-write (the paper's copy_on_write): `copy(src, dst)` copies the
  /// shared tail's filled slots from block `src` into `fresh` (block `dst`),
  /// which becomes this table's own tail; the original stays with the other
  /// forks. Full blocks are never copied. Precondition: tail_shared().
  template <class CopyFn>
  void copy_on_write(Tail&& fresh, CopyFn&& copy) {
    KVBM_CHECK(tail_shared(),
               "BlockTable::copy_on_write: the tail is not shared; write it in place");
    copy(tail_->block_id(), fresh.block_id());
    tail_ = std::make_shared<Tail>(std::move(fresh));
  }

  /// Hands the tail over for staging. Precondition: has_tail() and
  /// !tail_shared() (a fork must copy before it writes).
  [[nodiscard]] Tail take_tail() {
    Tail out = std::move(*tail_);
    tail_.reset();
    return out;
  }

  /// Drops the tail (its bytes are lost; a later resume recomputes them).
  void drop_tail() noexcept { tail_.reset(); }

  /// Returns a table sharing every block with this one (the paper's
  /// fork_sequence: no data is copied; the tail is copied lazily).
  [[nodiscard]] BlockTable fork() const {
    BlockTable out;
    out.full_ = full_;  // ImmutableBlock copies: shared references
    out.tail_ = tail_;
    return out;
  }

  /// Releases every block (the paper's free_blocks), last block first, so
  /// that the pool evicts the sequence's tail before its head
  /// (kvbm/blocks/release_order.h).
  void clear() noexcept {
    tail_.reset();
    kvbm::release_tail_first(full_);
  }

 private:
  std::vector<Full> full_;
  std::shared_ptr<Tail> tail_;
};

}  // namespace kvbm_example
