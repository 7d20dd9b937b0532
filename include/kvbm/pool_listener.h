// kvbm/pool_listener.h: what a pool tells the rest of the system about its blocks.
//
// A PoolListener is attached to a BlockManager when it is built
// (BlockManager::Builder::listener) and sees three things:
//
//   on_stored(hashes)    a block was registered under a hash the pool did not
//                        hold before (not for Allow duplicates, not when
//                        Reject hands back the existing block)
//   on_stored_with_tokens(hashes, tokens)
//                        the same, for a block registered with its tokens
//                        (BlockManager::register_block(block, tokens)); the
//                        default forwards to on_stored(hashes), so a listener
//                        that has no use for tokens overrides on_stored only
//   on_removed(hashes)   registered blocks left the pool: evicted by an
//                        allocation, or dropped by reset_inactive_pool()
//   on_evicting(blocks)  an allocation evicted these blocks; see below
//
// on_stored, on_stored_with_tokens and on_removed run under the pool's lock, in the order the pool
// changed, so a listener that records them (the KV event publisher does)
// sees a consistent history. They must be cheap and must not call back into
// the pool.
//
// on_evicting runs on the allocating thread, after the pool's lock is
// released and before allocate_blocks() returns the blocks to its caller. The
// evicted blocks are no longer registered, no other handle refers to them,
// and their bytes are what they were while registered. This is the one moment
// their contents can still be saved: the on-eviction offload mode copies them
// to the next tier here. It may block (the allocation waits for it) and may
// call other pools, not this one.
//
// Listeners must be noexcept: an exception would leave the pool's caller
// with a half-done allocation.

#pragma once

#include <span>

#include "kvbm/blocks/block_id.h"
#include "kvbm/hashing.h"  // Token
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// A block an allocation has just evicted.
struct EvictedBlock {
  BlockId id = 0;     ///< the block, now owned by the allocation
  SequenceHash hash;  ///< the hash it was registered under
};

/// Observes one pool; see the file comment.
class PoolListener {
 public:
  virtual ~PoolListener() = default;
  /// Blocks registered under new hashes (under the pool's lock).
  virtual void on_stored(std::span<const SequenceHash> /*hashes*/) noexcept {}
  /// As on_stored, with the blocks' tokens: tokens[i] holds the tokens of
  /// hashes[i] (tokens.size() == hashes.size()). The spans are valid only
  /// during the call. The pool calls this one only for blocks registered with
  /// tokens; the default forwards to on_stored(hashes).
  virtual void on_stored_with_tokens(std::span<const SequenceHash> hashes,
                                     std::span<const std::span<const Token>> /*tokens*/) noexcept {
    on_stored(hashes);
  }
  /// Registered blocks that left the pool (under the pool's lock).
  virtual void on_removed(std::span<const SequenceHash> /*hashes*/) noexcept {}
  /// Blocks an allocation evicted, before it hands them out (no lock held).
  virtual void on_evicting(std::span<const EvictedBlock> /*blocks*/) noexcept {}
};

}  // namespace kvbm
