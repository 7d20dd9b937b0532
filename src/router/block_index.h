// src/router/block_index.h: which lane holds which block in which tier.
//
// The data structure behind KvIndexer. Every live instance owns a lane (a bit
// position; a removed instance's lane is cleared and reused). One BlockSlotMap
// maps a block hash to a 16-byte slot: the mask of shared tiers holding the
// block, and, when any instance holds it locally, a row of the row arena: for
// each local tier (fastest first) a bitmap of `words` 64-bit words, bit `lane`
// set when that lane holds the block there. With up to 64 instances and the
// default tiers a block costs its slot (16 bytes over a 3/4-full table) and a
// 24-byte row: about 45 bytes, however many instances hold it.
//
// walk() answers an overlap query with one lookup per hash and word-wide bit
// operations over the lanes still in the walk: a lane leaves the walk at the
// first block it holds in no local tier and the cluster holds in no shared
// tier, and the walk stops when no lane is left. Per-lane, per-tier counts
// are kept as bit-sliced counters (slice k holds bit k of 64 lanes' counts),
// so counting a block for every lane that holds it in a tier is one carry
// chain over a word (two steps on average), not one increment per lane.
//
// The property the fast path keeps: lanes are independent. A lane's answer is
// exactly what the plain walk over that lane's own (hash, tier) set gives
// (fastest local tier, else the fastest shared tier, stop at the first miss),
// whatever the other lanes hold, whichever word the lane sits in, and whether
// the lane was used by a removed instance before. tests/router/
// kv_indexer_test.cpp checks it against a std::set model, exhaustively over
// small cases and with lanes on both sides of a word boundary.
//
// Not thread-safe: the KvIndexer's lock guards it.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvbm/router/overlap.h"
#include "kvbm/tier.h"
#include "kvbm/tier_array.h"
#include "router/block_slot_map.h"

namespace kvbm::router::impl {

/// Per-lane, per-tier block counts of one walk, bit-sliced.
class WalkCounters {
 public:
  /// Returns lane `lane`'s blocks per tier.
  [[nodiscard]] TierBlockCounts counts(std::uint32_t lane) const noexcept {
    return lane < per_lane_.size() ? per_lane_[lane] : TierBlockCounts{};
  }

 private:
  friend class BlockIndex;
  /// Reads the sliced counters out into per_lane_ (cost: one step per set bit).
  void unpack();

  std::size_t words_ = 0;
  std::size_t slices_ = 0;
  std::vector<std::uint64_t> s_;  // [tier, TierArray order][word][slice]
  std::vector<TierBlockCounts> per_lane_;
};

class BlockIndex {
 public:
  /// `shared[t]`: tier t is indexed once for the cluster.
  explicit BlockIndex(TierArray<bool> shared);

  /// Makes room for lanes 0 .. lanes-1 (re-lays the rows when a word is added).
  void reserve_lanes(std::size_t lanes);

  /// Lane `lane` holds `hash` in local tier `tier`; returns true when it is new.
  bool store_local(std::uint32_t lane, TierId tier, std::uint64_t hash);
  /// Lane `lane` no longer holds `hash` in local tier `tier`; returns whether it did.
  bool remove_local(std::uint32_t lane, TierId tier, std::uint64_t hash);
  /// Shared tier `tier` holds `hash`; returns true when it is new.
  bool store_shared(TierId tier, std::uint64_t hash);
  /// Shared tier `tier` no longer holds `hash`; returns whether it did.
  bool remove_shared(TierId tier, std::uint64_t hash);
  /// Drops every local entry of lane `lane` (one pass over the table).
  void clear_lane(std::uint32_t lane);

  [[nodiscard]] bool holds(std::uint32_t lane, std::uint64_t hash, TierId tier) const noexcept;
  [[nodiscard]] bool is_shared(TierId tier) const noexcept { return shared_[tier]; }
  /// Blocks lane `lane` holds per local tier.
  [[nodiscard]] TierBlockCounts lane_blocks(std::uint32_t lane) const noexcept;
  /// Per tier: (lane, block) pairs in a local tier; blocks in a shared tier.
  [[nodiscard]] const TierBlockCounts& tier_blocks() const noexcept { return tier_blocks_; }
  /// Distinct blocks indexed.
  [[nodiscard]] std::size_t size() const noexcept { return table_.size(); }
  /// Bytes of the table and the rows.
  [[nodiscard]] std::size_t bytes() const noexcept;

  /// Walks `hashes` for the lanes set in `alive` (words() words; consumed);
  /// fills `out`. See the file comment.
  void walk(std::span<const std::uint64_t> hashes, std::span<std::uint64_t> alive,
            WalkCounters& out) const;
  /// Words per bitmap.
  [[nodiscard]] std::size_t words() const noexcept { return words_; }

 private:
  std::uint64_t* row_ptr(std::uint32_t row) noexcept {
    return rows_.data() + std::size_t{row} * stride();
  }
  [[nodiscard]] const std::uint64_t* row_ptr(std::uint32_t row) const noexcept {
    return rows_.data() + std::size_t{row} * stride();
  }
  [[nodiscard]] std::size_t stride() const noexcept { return local_.size() * words_; }
  [[nodiscard]] int local_index(TierId tier) const noexcept { return local_index_[tier]; }
  std::uint32_t new_row();
  [[nodiscard]] bool row_empty(std::uint32_t row) const noexcept;
  void release_row(std::uint32_t row);

  TierArray<bool> shared_{};
  std::vector<TierId> local_;     // local tiers, fastest first
  TierArray<int> local_index_{};  // tier -> position in local_, -1 if shared
  std::size_t words_ = 1;
  BlockSlotMap table_;
  std::vector<std::uint64_t> rows_;  // rows of stride() words
  std::vector<std::uint32_t> free_rows_;
  std::vector<TierBlockCounts> lane_blocks_;
  TierBlockCounts tier_blocks_{};
};

}  // namespace kvbm::router::impl
