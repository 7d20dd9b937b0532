// replay/hybrid_replay.h: a trace through HybridBlockManager<G1> for a hybrid model's groups.
//
// run_hybrid_replay() replays a trace, as run_replay() does for the dense path
// (requests one after another in trace order), through a
// HybridBlockManager<G1> built from a model's KV cache groups
// (replay/hybrid_preset.h), and again, at the same G1 bytes, through the
// full-attention baseline: one full-attention group whose block carries every
// layer (the groups' bytes per block summed, at the lcm of their block sizes),
// a manager that treats every layer as full attention. Metadata only: no bytes
// are written; "bytes" are blocks times the group's bytes per block.
//
// One request:
//
//   1. find_prefix(hashes, prompt - 1): the longest cut every group can serve
//      (kvbm/groups/hit_rules.h), holding only what each group reads there.
//   2. Prefill from the cut to the prompt's end, prefill_chunk_tokens at a time
//      (chunk boundaries are multiples of it): allocate() in every group or none
//      (it first releases what is out of reach), commit() the blocks that became
//      full, release_out_of_reach(). A step G1 cannot give stops the request: its
//      remaining tokens count as uncached.
//   3. finish(): every block released, last first.
//
// Hashes: the trace has one hash id per trace block (512 tokens); the groups
// are hashed at hash_block_size() (the gcd of their block sizes, 16 for the
// presets). Hash block k of a request (tokens [k h, (k + 1) h)) takes the value
// of a mix of k, hash block k - 1's value and the trace hash of the trace block
// holding its last token (a chain): equal trace prefixes give equal hash
// blocks, and the trace's own prefix sharing is kept exactly at its 512-token
// granularity. Only full hash
// blocks of the prompt are hashed; a partial tail is computed, never cached.
//
// G1's bytes: each group has its own pool (HybridBlockManager). The bytes are
// split so that group g's pool holds weight_g x T tokens (weight: the model's
// g1_weights, 1 by default), T solved so that the pools' bytes sum to the
// budget: with every weight 1, every group holds as many tokens as the
// baseline. A weight below 1 gives a window's bytes to the full group.
//
// G2 and G3 behind G1 (g2_bytes, g3_bytes): when either is > 0, two more
// replays run, the model and its baseline each through a HybridKvBlockManager
// (kvbm/hybrid/) with move_bytes false, its G1 the same pools as above and G2,
// G3 split between the groups as G1 is (the same weights). A request's cut is
// then onboard(hashes, prompt - 1): the longest cut every group serves from any
// tier, onboarding per group only the blocks it reads; hits are counted per
// group and per tier they came from (HybridOnboardHandle::counts). After each
// request the managers drain, so every offload has landed before the next
// request: the figures are the same on every run. Blocks move down as
// g1_g2 / g2_g3 say (on_eviction by default, as the dense replay).
//
// Thread-safety: a plain function; it builds and owns its managers.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvbm/eviction/backend.h"
#include "kvbm/groups/snapshot_policy.h"
#include "kvbm/kv_block_manager_config.h"
#include "kvbm/tier_array.h"
#include "replay/hybrid_preset.h"
#include "replay/trace.h"

namespace kvbm::replay {

/// What a hybrid replay needs besides the trace.
struct HybridReplayConfig {
  HybridModel model;
  /// G1's bytes, shared by the groups (and the baseline's one pool); ignored when unlimited.
  std::uint64_t g1_bytes = 0;
  /// Room for every block of the trace in every pool (nothing is evicted).
  bool g1_unlimited = false;
  /// Tokens prefilled per step (a window's blocks are released between steps).
  std::uint32_t prefill_chunk_tokens = 512;
  SnapshotPolicy snapshot = SnapshotPolicy::every_block();
  /// false (vLLM's way): blocks are registered as they fill, every step; out-of-reach
  /// window and chunk blocks stay cached. true: a request registers its blocks once its
  /// prefill ends, so only what is still in reach then (a window's tail, the current
  /// chunk, the last snapshot, every full-attention block) is cached; the rest goes
  /// back to the free pool as it falls out of reach.
  bool register_at_end = false;
  EvictionPolicy eviction = EvictionPolicy::kLru;
  /// G2 bytes behind G1, split between the groups as G1 is (0: none; see the file comment).
  std::uint64_t g2_bytes = 0;
  /// G3 bytes behind G2 (0: none; needs G2).
  std::uint64_t g3_bytes = 0;
  /// How blocks move down from G1 to G2 and from G2 to G3 (the tiered replays).
  OffloadMode g1_g2 = OffloadMode::kOnEviction;
  OffloadMode g2_g3 = OffloadMode::kOnEviction;
  /// Returns true when G2 or G3 is given: the tiered replays run.
  [[nodiscard]] bool tiered() const noexcept { return g2_bytes > 0 || g3_bytes > 0; }
  /// Called every 256 requests and at the end of each of the two replays.
  std::function<void(std::size_t done, std::size_t total)> progress;
  /// When set and true, each replay stops before its next request.
  const std::atomic<bool>* stop = nullptr;
};

/// One group's figures in one replay.
struct GroupFigures {
  KvCacheGroupSpec spec;
  double g1_weight = 1;
  std::size_t capacity_blocks = 0;  ///< its G1 pool
  std::uint64_t hit_blocks = 0;  ///< blocks the cuts read from it (a window's tail, one snapshot)
  std::uint64_t hit_tokens = 0;  ///< their tokens: hit_blocks x tokens per block
  std::uint64_t written_blocks = 0;     ///< blocks prefilled into G1 (allocated and computed)
  std::size_t peak_held_blocks = 0;     ///< most blocks the running request held (after a step)
  double mean_held_blocks = 0;          ///< mean over every prefill step of the replay
  std::uint64_t cached_blocks_end = 0;  ///< blocks left in the inactive pool at the end
  // The tiered replays (G2, G3 behind G1); G1 only: G2 and G3 stay 0.
  TierArray<std::size_t> tier_capacity_blocks{};  ///< each pooled tier's blocks
  TierArray<std::uint64_t> hit_blocks_by_tier{};  ///< the cuts' blocks, by the tier they came from
  TierArray<std::uint64_t> held_blocks_end{};     ///< blocks each tier holds at the end
  std::uint64_t offloaded_g1_g2 = 0;              ///< blocks copied G1 -> G2
  std::uint64_t offloaded_g2_g3 = 0;              ///< blocks copied G2 -> G3
  [[nodiscard]] std::uint64_t bytes(std::uint64_t blocks) const noexcept {
    return blocks * spec.bytes_per_block;
  }
  [[nodiscard]] std::uint64_t capacity_bytes() const noexcept { return bytes(capacity_blocks); }
};

/// One manager's replay (the hybrid one or the baseline).
struct HybridRun {
  std::vector<GroupFigures> groups;
  std::uint64_t requests = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t hit_tokens = 0;       ///< the cuts: tokens not recomputed
  std::uint64_t hit_requests = 0;     ///< requests whose cut was > 0
  std::uint64_t uncached_tokens = 0;  ///< tokens of steps G1 could not give blocks for
  std::uint64_t prefill_steps = 0;
  /// vLLM's rule on the same replay (a model with a recurrent state; else 0): vLLM
  /// raises the attention block to vllm_padded_block() tokens, so its cuts fall on
  /// multiples of it. Each request's cut here rounded down to that multiple (an upper
  /// bound of vLLM's: it also needs a state snapshot exactly there).
  std::uint32_t vllm_padded_block = 0;
  std::uint64_t vllm_rule_hit_tokens = 0;    ///< every request's cut at vLLM's granularity
  std::uint64_t short_requests = 0;          ///< prompts shorter than the padded block
  std::uint64_t short_prompt_tokens = 0;     ///< their tokens
  std::uint64_t short_hit_tokens = 0;        ///< what their cuts found here
  std::uint64_t short_vllm_rule_tokens = 0;  ///< what vLLM's rule gives them
  bool tiered = false;                       ///< through HybridKvBlockManager with G2 / G3
  std::uint64_t shrunk_cuts = 0;  ///< tiered: onboardings that came up short (cut shrank)
  std::string audit;  ///< HybridBlockManager::audit() at the end ("" = every pool balanced)
  double wall_seconds = 0;

  [[nodiscard]] std::uint64_t g1_bytes() const noexcept {
    std::uint64_t b = 0;
    for (const auto& g : groups) b += g.capacity_bytes();
    return b;
  }
  [[nodiscard]] double token_hit_ratio() const noexcept {
    return prompt_tokens == 0
               ? 0.0
               : static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens);
  }
};

/// Both replays.
struct HybridReplayResult {
  std::string trace;
  std::uint32_t trace_block_tokens = 0;
  std::string model;                  ///< HybridModel::name
  std::string label;                  ///< HybridModel::label
  std::string source;                 ///< HybridModel::source
  std::uint64_t g1_budget_bytes = 0;  ///< 0 when unlimited
  bool g1_unlimited = false;
  std::uint32_t prefill_chunk_tokens = 0;
  std::string snapshot_policy;
  std::string eviction;
  bool register_at_end = false;       ///< HybridReplayConfig::register_at_end ("tails")
  std::uint64_t g2_budget_bytes = 0;  ///< 0: no G2
  std::uint64_t g3_budget_bytes = 0;  ///< 0: no G3
  HybridRun hybrid;
  HybridRun baseline;
  /// With G2 or G3 (HybridReplayConfig::tiered()): the model and the baseline
  /// through HybridKvBlockManager, the same G1 pools.
  std::optional<HybridRun> hybrid_tiered;
  std::optional<HybridRun> baseline_tiered;
  /// hybrid.hit_tokens / baseline.hit_tokens (0 when the baseline hit nothing).
  [[nodiscard]] double gain() const noexcept {
    return baseline.hit_tokens == 0
               ? 0.0
               : static_cast<double>(hybrid.hit_tokens) / static_cast<double>(baseline.hit_tokens);
  }
  /// hybrid_tiered's hit tokens / hybrid's (G1 only): what G2 and G3 add (0 without them
  /// or when G1 alone hit nothing).
  [[nodiscard]] double tiered_gain() const noexcept {
    return !hybrid_tiered || hybrid.hit_tokens == 0
               ? 0.0
               : static_cast<double>(hybrid_tiered->hit_tokens) /
                     static_cast<double>(hybrid.hit_tokens);
  }
};

/// Returns the baseline of `model`: one full-attention group covering every layer,
/// at the lcm of the groups' block sizes, its bytes per block the groups' summed.
[[nodiscard]] HybridModel full_attention_baseline(const HybridModel& model);

/// Returns the attention block vLLM 0.33 pads a model with a recurrent state to
/// (vllm/platforms/interface.py: the smallest multiple of the kernel block, 16,
/// whose KV bytes per layer reach one layer's state), or 0 without a recurrent
/// state or an attention group.
[[nodiscard]] std::uint32_t vllm_padded_block(const HybridModel& model);

/// Returns the bytes of `blocks` trace blocks of `trace_block_tokens` tokens in the
/// baseline's layout: the G1 of --device-blocks N for a hybrid replay.
[[nodiscard]] std::uint64_t baseline_bytes_for_blocks(const HybridModel& model, std::size_t blocks,
                                                      std::uint32_t trace_block_tokens);

/// Returns each group's pool size (blocks) for `bytes` of G1 (see the file comment).
/// Throws UsageError when a pool would have no block.
[[nodiscard]] std::vector<std::size_t> split_g1(const HybridModel& model, std::uint64_t bytes);

/// Returns the request's hashes at `hash_block` tokens per block (see the file comment).
[[nodiscard]] std::vector<SequenceHash> hybrid_hashes(const TraceRequest& request,
                                                      std::uint32_t trace_block_tokens,
                                                      std::uint32_t hash_block);

/// Replays `trace` through the model's groups and through its baseline at the same
/// G1 bytes. Throws UsageError for an invalid model or a G1 too small for a pool.
[[nodiscard]] HybridReplayResult run_hybrid_replay(const Trace& trace,
                                                   const HybridReplayConfig& config);

}  // namespace kvbm::replay
