// kvbm/groups/hit_rules.h: which cached prefix every group of a hybrid model can serve.
//
// A prefix hit of `L` tokens (a "cut" at L) lets the engine skip computing
// those tokens, provided every group has what its layers read at the cut:
//
//   full attention    every block before the cut: blocks [0, n), n = L / b;
//   sliding window W  the blocks covering the last W - 1 tokens before the
//                     cut (the token after the cut is the window's last):
//                     the c = ceil((W - 1) / b) blocks [n - c, n), fewer
//                     when n < c;
//   chunked local C   the blocks of the cut's chunk from its start to the
//                     cut: [s / b, n) with s = floor(L / C) * C (none when
//                     the cut is on a chunk boundary);
//   recurrent state   the snapshot of the state after token L: block n - 1
//                     (none at L = 0, where the state is the initial one).
//
// These are vLLM's rules (single_type_kv_cache_manager.py); the blocks a
// group needs always form one range, needed_blocks(). Groups with different
// block sizes cut only where all their blocks end: on multiples of the least
// common multiple A of the block sizes. longest_common_hit() finds the longest
// cut every group can serve by iterating to a fixed point: each group lowers
// the candidate to the longest cut it can serve at or below it, until a whole
// round changes nothing. The result is the longest common cut (each group's
// "can serve L" depends on L alone, so no valid cut above the candidate is
// ever skipped).
//
// first_block_in_reach() is the other side of the same rules: once a request
// has computed `t` tokens, blocks below it are never read again and may be
// released (vLLM's get_num_skipped_tokens / block size).
//
// Everything here is a pure function over a `present(block)` (per group) or
// `present(group, block)` callback, so the same rules serve G1's pools and
// every lower tier's presence answers.
//
// Thread-safety: pure functions; the callbacks are called on the caller's thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/groups/kv_cache_group_spec.h"

namespace kvbm {

/// The part of a group's spec the hit rules read.
struct GroupRule {
  AttentionKind kind = AttentionKind::kFull;
  std::uint32_t tokens_per_block = 1;
  std::uint32_t window_tokens = 0;  ///< W or C; 0 for full and recurrent state

  /// Returns the rule of a (validated) group.
  [[nodiscard]] static GroupRule of(const KvCacheGroupSpec& g) noexcept {
    return GroupRule{g.kind, g.tokens_per_block, g.window_tokens};
  }
};

/// Block indices [first, last) of one group.
struct BlockRange {
  std::size_t first = 0;
  std::size_t last = 0;
  [[nodiscard]] std::size_t size() const noexcept { return last > first ? last - first : 0; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  friend bool operator==(const BlockRange&, const BlockRange&) = default;
};

/// Returns the blocks a group needs to serve a cut at `tokens` (a multiple of its
/// block size; a partial block is not counted).
[[nodiscard]] inline BlockRange needed_blocks(const GroupRule& r, std::size_t tokens) noexcept {
  const std::size_t b = r.tokens_per_block;
  const std::size_t n = tokens / b;
  switch (r.kind) {
    case AttentionKind::kSlidingWindow: {
      const std::size_t c = (static_cast<std::size_t>(r.window_tokens) - 1 + b - 1) / b;
      return {n > c ? n - c : 0, n};
    }
    case AttentionKind::kChunkedLocal: {
      const std::size_t s = tokens / r.window_tokens * r.window_tokens;
      return {s / b, n};
    }
    case AttentionKind::kRecurrentState:
      return {n == 0 ? 0 : n - 1, n};
    case AttentionKind::kFull:
      break;
  }
  return {0, n};
}

/// Returns the first block a request still reads after computing `computed` tokens:
/// blocks below it are out of reach (always 0 for full attention).
[[nodiscard]] inline std::size_t first_block_in_reach(const GroupRule& r,
                                                      std::size_t computed) noexcept {
  const std::size_t b = r.tokens_per_block;
  switch (r.kind) {
    case AttentionKind::kSlidingWindow: {
      const std::size_t keep = static_cast<std::size_t>(r.window_tokens) - 1;
      return computed > keep ? (computed - keep) / b : 0;
    }
    case AttentionKind::kChunkedLocal:
      return computed / r.window_tokens * r.window_tokens / b;
    case AttentionKind::kRecurrentState:
      return computed == 0 ? 0 : (computed - 1) / b;
    case AttentionKind::kFull:
      break;
  }
  return 0;
}

namespace detail {

// Each returns the longest cut, in blocks, at or below n0 (a multiple of a, the
// alignment in blocks) that the group can serve. present(i): block i is held.
template <class Present>
std::size_t full_hit(std::size_t n0, std::size_t a, Present& present) {
  std::size_t m = 0;
  while (m < n0 && present(m)) ++m;  // the first miss
  return m / a * a;
}

template <class Present>
std::size_t window_hit(const GroupRule& r, std::size_t n0, std::size_t a, Present& present) {
  const std::size_t b = r.tokens_per_block;
  const std::size_t c = (static_cast<std::size_t>(r.window_tokens) - 1 + b - 1) / b;
  std::size_t n = n0;
  while (n > 0) {
    const std::size_t lo = n > c ? n - c : 0;
    std::size_t i = n;
    while (i > lo && present(i - 1)) --i;
    if (i == lo) return n;
    n = (i - 1) / a * a;  // every cut in (miss, n] reads the miss
  }
  return 0;
}

template <class Present>
std::size_t chunk_hit(const GroupRule& r, std::size_t n0, std::size_t a, Present& present) {
  const std::size_t b = r.tokens_per_block;
  std::size_t n = n0;
  while (n > 0) {
    const std::size_t start = n * b / r.window_tokens * r.window_tokens / b;
    std::size_t m = start;
    while (m < n && present(m)) ++m;
    if (m == n) return n;
    const std::size_t below = m / a * a;  // the longest cut before the miss
    if (below >= start) return below;     // same chunk: its blocks from the start are held
    n = below;                            // an earlier chunk
  }
  return 0;
}

template <class Present>
std::size_t state_hit(std::size_t n0, std::size_t a, Present& present) {
  std::size_t n = n0;
  while (n > 0 && !present(n - 1)) n -= a;
  return n;
}

}  // namespace detail

/// Returns the longest cut, in tokens, at or below `limit` and a multiple of
/// `alignment` (itself a multiple of the group's block size), that the group can
/// serve when present(i) says whether its block i is held.
template <class Present>
[[nodiscard]] std::size_t longest_hit(const GroupRule& r, std::size_t limit,
                                      std::uint32_t alignment, Present&& present) {
  KVBM_CHECK(alignment > 0 && r.tokens_per_block > 0 && alignment % r.tokens_per_block == 0,
             "longest_hit: alignment ", alignment, " is not a multiple of the group's block size ",
             r.tokens_per_block);
  KVBM_CHECK(r.kind != AttentionKind::kSlidingWindow || r.window_tokens > 0,
             "longest_hit: a sliding window of 0 tokens; give W >= 1");
  KVBM_CHECK(r.kind != AttentionKind::kChunkedLocal ||
                 (r.window_tokens > 0 && r.window_tokens % r.tokens_per_block == 0),
             "longest_hit: chunk ", r.window_tokens,
             " is not a positive multiple of the block size ", r.tokens_per_block);
  const std::size_t b = r.tokens_per_block;
  const std::size_t a = alignment / b;
  const std::size_t n0 = limit / alignment * a;
  switch (r.kind) {
    case AttentionKind::kSlidingWindow:
      return detail::window_hit(r, n0, a, present) * b;
    case AttentionKind::kChunkedLocal:
      return detail::chunk_hit(r, n0, a, present) * b;
    case AttentionKind::kRecurrentState:
      return detail::state_hit(n0, a, present) * b;
    case AttentionKind::kFull:
      break;
  }
  return detail::full_hit(n0, a, present) * b;
}

/// The longest cut every group can serve, and what each group needs for it.
struct HybridHit {
  std::size_t tokens = 0;          ///< the cut: tokens the engine need not compute
  std::vector<BlockRange> blocks;  ///< per group, the blocks it must provide
  std::uint32_t alignment = 0;     ///< the cut's alignment (lcm of block sizes)
  std::size_t rounds = 0;          ///< rounds to the fixed point (1: no group lowered it)
};

/// Returns the least common multiple of the rules' block sizes. Throws UsageError
/// for no rules or one above kMaxAlignmentTokens.
[[nodiscard]] inline std::uint32_t alignment_tokens(std::span<const GroupRule> rules) {
  KVBM_CHECK(!rules.empty(), "alignment_tokens: no groups given");
  std::uint64_t l = 1;
  for (const auto& r : rules) {
    KVBM_CHECK(r.tokens_per_block > 0, "alignment_tokens: a group has 0 tokens per block");
    l = std::lcm(l, static_cast<std::uint64_t>(r.tokens_per_block));
    KVBM_CHECK(l <= kMaxAlignmentTokens, "alignment_tokens: the lcm of the block sizes exceeds ",
               kMaxAlignmentTokens, " tokens; choose block sizes that divide one another");
  }
  return static_cast<std::uint32_t>(l);
}

/// Returns the longest cut at or below `max_tokens` that every group can serve
/// (see the file comment), given present(group, block). To leave the engine a
/// token to compute, pass the prompt's length minus one, as vLLM does.
template <class Present>
[[nodiscard]] HybridHit longest_common_hit(std::span<const GroupRule> rules, std::size_t max_tokens,
                                           Present&& present) {
  HybridHit hit;
  hit.alignment = alignment_tokens(rules);
  std::size_t cut = max_tokens / hit.alignment * hit.alignment;
  for (;;) {
    ++hit.rounds;
    const std::size_t before = cut;
    for (std::size_t g = 0; g < rules.size() && cut > 0; ++g) {
      cut = longest_hit(rules[g], cut, hit.alignment,
                        [&present, g](std::size_t block) { return present(g, block); });
    }
    if (cut == before) break;
  }
  hit.tokens = cut;
  hit.blocks.reserve(rules.size());
  for (const auto& r : rules) hit.blocks.push_back(needed_blocks(r, cut));
  return hit;
}

}  // namespace kvbm
