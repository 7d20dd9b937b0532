// kvbm/pool_counts.h: a pool's block accounting, as plain numbers.
//
// BlockManager<T>::pool_counts() and KvBlockManagerStats::tiers report a
// pool's blocks as a PoolCounts: every block is in exactly one of reset
// (free), inactive (registered, unreferenced, matchable) or in use (held by a
// handle), so reset + inactive + in use == total (balanced()) whenever the
// pool's lock is free. A plain value, with no dependency on the pool's
// implementation (kvbm/pool_core/block_store.h fills it).
//
// Thread-safety: a plain value.

#pragma once

#include <cstddef>

namespace kvbm {

/// A consistent snapshot of a pool's block accounting.
struct PoolCounts {
  std::size_t total = 0;
  std::size_t reset = 0;          ///< free blocks
  std::size_t inactive = 0;       ///< registered, unreferenced, matchable
  std::size_t evictable = 0;      ///< of inactive: evictable without first evicting others
  std::size_t in_use = 0;         ///< held by handles (mutable, complete or immutable)
  std::size_t mutable_out = 0;    ///< of in_use: mutable or complete handles
  std::size_t immutable_out = 0;  ///< of in_use: registered blocks with strong handles

  /// Returns true when reset + inactive + in use == total.
  [[nodiscard]] bool balanced() const noexcept { return reset + inactive + in_use == total; }
};

}  // namespace kvbm
