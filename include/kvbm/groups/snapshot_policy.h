// kvbm/groups/snapshot_policy.h: which recurrent-state snapshots a request keeps for reuse.
//
// A recurrent-state group (Mamba, linear attention, gated delta) has one
// state per request, carried token to token; a prefix hit needs the state
// exactly at the cut. Its blocks are snapshots: block i holds the state after
// token (i + 1) * b. While a request runs it holds at most the block of its
// live state and, under kRequestEnd, the last completed one; the policy
// decides which completed blocks are registered (kept, matchable, in the
// inactive pool once the request moves on) and which go straight back to the
// reset pool:
//
//   kEveryBlock      every block boundary (vLLM's mamba_cache_mode "all"):
//                    the most hits, and the most pool taken by snapshots,
//                    the reason vllm#45845's hit ratios collapse;
//   kEveryKthBlock   every k-th boundary (blocks k-1, 2k-1, ...): a cut
//                    falls back at most k - 1 blocks for 1/k of the pool;
//   kRequestEnd      only the last boundary the request reached when it
//                    finishes (a multi-turn conversation's next turn extends
//                    it): one snapshot per request;
//   kStepEnd         only the state at the end of a step (a commit()) that
//                    lands on a block boundary (vLLM's mamba_cache_mode
//                    "align"): the engine writes the state once per step, so
//                    a step of several blocks takes one block, for its end,
//                    and the blocks it skips are never taken (holes in the
//                    request's table); the request holds the live block and,
//                    until its next step is allocated, the previous one (the
//                    state the step reads). With steps of one block it equals
//                    kEveryBlock.
//
// The default is kEveryBlock, equal to vLLM's, so that the comparison with vLLM
// is step for step; docs/hybrid.md weighs the others.
//
// Thread-safety: a plain value.

#pragma once

#include <cstddef>
#include <cstdint>

#include "kvbm/error.h"

namespace kvbm {

/// Which completed recurrent-state blocks are registered; see the file comment.
struct SnapshotPolicy {
  enum class Kind : std::uint8_t { kEveryBlock, kEveryKthBlock, kRequestEnd, kStepEnd };
  Kind kind = Kind::kEveryBlock;
  std::uint32_t every = 1;  ///< k for kEveryKthBlock; 1 otherwise

  /// Registers every block boundary.
  [[nodiscard]] static SnapshotPolicy every_block() noexcept { return {}; }
  /// Registers every k-th boundary (k >= 1; k = 1 is every_block()).
  [[nodiscard]] static SnapshotPolicy every_kth_block(std::uint32_t k) {
    KVBM_CHECK(k >= 1, "SnapshotPolicy::every_kth_block(0): give k >= 1");
    return {Kind::kEveryKthBlock, k};
  }
  /// Registers only the last boundary reached, when the request finishes.
  [[nodiscard]] static SnapshotPolicy request_end() noexcept { return {Kind::kRequestEnd, 1}; }
  /// Takes and registers only the block at the end of each step, when that end is
  /// on a block boundary (vLLM's "align" mode).
  [[nodiscard]] static SnapshotPolicy step_end() noexcept { return {Kind::kStepEnd, 1}; }

  /// Returns true when block `index`, once complete, is registered as it completes
  /// (always false under kRequestEnd: that block is registered by finish(); under
  /// kStepEnd, false: commit() registers the block its step ends on, when full).
  [[nodiscard]] bool registers_on_completion(std::size_t index) const noexcept {
    switch (kind) {
      case Kind::kEveryBlock:
        return true;
      case Kind::kEveryKthBlock:
        return (index + 1) % every == 0;
      case Kind::kRequestEnd:
      case Kind::kStepEnd:
        return false;
    }
    return false;
  }
  /// Returns true when the request keeps its last completed block until it finishes
  /// or completes the next one (kRequestEnd: that block may be the one registered).
  [[nodiscard]] bool keeps_last_completed() const noexcept { return kind == Kind::kRequestEnd; }
  /// Returns true when a step takes only the block of its end state, leaving holes
  /// for the blocks it passes over (kStepEnd).
  [[nodiscard]] bool takes_step_end_only() const noexcept { return kind == Kind::kStepEnd; }

  friend bool operator==(const SnapshotPolicy&, const SnapshotPolicy&) = default;
};

}  // namespace kvbm
