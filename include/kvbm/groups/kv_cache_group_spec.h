// kvbm/groups/kv_cache_group_spec.h: one KV cache group of a hybrid model, as data.
//
// A hybrid model's layers fall into groups that share one block table: the
// full-attention layers, the sliding-window layers of one window, the
// chunked-local layers of one chunk, the recurrent-state (Mamba, linear
// attention) layers. A KvCacheGroupSpec says what one group is:
//
//   * its attention kind and the kind's parameter: the window W in tokens
//     (sliding window), the chunk C in tokens (chunked local), nothing for
//     full attention and recurrent state;
//   * tokens per block and bytes per block (for recurrent state: one
//     snapshot of the state, which stands for every token up to its block's
//     end);
//   * the layer indices it covers, a name, and layout facts for reports
//     (dtype, heads, head size);
//   * its GroupId: its index in the model's group list.
//
// validate() checks one group; validate_groups() a model's list (ids 0..n-1
// in order, disjoint layers). Both throw UsageError with what to change.
//
// vLLM's KVCacheConfig shapes (vllm/v1/kv_cache_interface.py) arrive as the
// plain structs of kvbm/groups/vllm_kv_cache_spec.h, converted by from_vllm().
//
// Thread-safety: plain values.

#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/error.h"

namespace kvbm {

/// A group's index in its model's group list (vLLM's kv_cache_group_id).
enum class GroupId : std::uint32_t {};

/// Returns the group id's number.
[[nodiscard]] constexpr std::uint32_t to_index(GroupId id) noexcept {
  return static_cast<std::uint32_t>(id);
}

/// How a group's layers attend to earlier tokens, and so which blocks a hit needs.
enum class AttentionKind : std::uint8_t {
  kFull = 1,           ///< every earlier token: a hit needs every block of the prefix
  kSlidingWindow = 2,  ///< the last W tokens: a hit needs the blocks covering them
  kChunkedLocal = 3,   ///< the tokens of the current chunk of C: a hit needs that chunk's blocks
  kRecurrentState = 4  ///< a state carried token to token: a hit needs one snapshot at the cut
};

/// Returns "full", "sliding_window", "chunked_local" or "recurrent_state" ("unknown" otherwise).
[[nodiscard]] std::string_view to_string(AttentionKind kind) noexcept;

/// Layout facts of an attention group (informative: reports and checks of bytes per block).
struct KvLayout {
  std::string dtype;               ///< e.g. "bfloat16"; empty when not known
  std::uint32_t dtype_bytes = 0;   ///< bytes per element; 0 when not known
  std::uint32_t num_kv_heads = 0;  ///< KV heads per layer; 0 when not known (or recurrent)
  std::uint32_t head_size = 0;     ///< K head size; 0 when not known
  std::uint32_t head_size_v = 0;   ///< V head size; 0 when not known
  bool mla = false;                ///< one latent vector per token instead of K and V
  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

/// One KV cache group: kind, block geometry, layers, name. See the file comment.
struct KvCacheGroupSpec {
  GroupId id{};
  AttentionKind kind = AttentionKind::kFull;
  /// W for kSlidingWindow, C for kChunkedLocal; 0 for the other kinds.
  std::uint32_t window_tokens = 0;
  std::uint32_t tokens_per_block = 0;
  /// Bytes of one block over all the group's layers (recurrent: one snapshot).
  std::uint64_t bytes_per_block = 0;
  std::vector<std::uint32_t> layers;
  std::string name;  ///< free text for reports; empty: kind_label()
  KvLayout layout;

  /// A full-attention group.
  [[nodiscard]] static KvCacheGroupSpec full(GroupId id, std::uint32_t tokens_per_block,
                                             std::uint64_t bytes_per_block,
                                             std::vector<std::uint32_t> layers);
  /// A sliding-window group of `window` tokens.
  [[nodiscard]] static KvCacheGroupSpec sliding_window(GroupId id, std::uint32_t window,
                                                       std::uint32_t tokens_per_block,
                                                       std::uint64_t bytes_per_block,
                                                       std::vector<std::uint32_t> layers);
  /// A chunked-local group of `chunk` tokens.
  [[nodiscard]] static KvCacheGroupSpec chunked_local(GroupId id, std::uint32_t chunk,
                                                      std::uint32_t tokens_per_block,
                                                      std::uint64_t bytes_per_block,
                                                      std::vector<std::uint32_t> layers);
  /// A recurrent-state group whose snapshot takes `snapshot_bytes`, one per block of
  /// `tokens_per_block` tokens at most.
  [[nodiscard]] static KvCacheGroupSpec recurrent_state(GroupId id, std::uint32_t tokens_per_block,
                                                        std::uint64_t snapshot_bytes,
                                                        std::vector<std::uint32_t> layers);

  /// Returns "full", "swa<W>", "chunk<C>" or "state": the kind and its parameter.
  [[nodiscard]] std::string kind_label() const;
  /// Returns name, or kind_label() when name is empty.
  [[nodiscard]] std::string display_name() const;
  /// Returns "<ns>/group:<id>:<kind_label>:<tokens_per_block>": the namespace of the
  /// group's blocks in a tier shared by name (G3 files, G4 keys). `ns` may be empty
  /// (then the result starts with "group:").
  [[nodiscard]] std::string namespace_for(std::string_view ns) const;

  /// Throws UsageError unless the group is well formed (see validate_group_spec).
  void validate() const;

  friend bool operator==(const KvCacheGroupSpec&, const KvCacheGroupSpec&) = default;
};

/// Throws UsageError unless every group is valid, group i has GroupId i, and no
/// layer appears in two groups. An empty list is refused too.
void validate_groups(std::span<const KvCacheGroupSpec> groups);

/// Returns the block size every group's blocks are hashed at: the greatest common
/// divisor of the groups' tokens per block (a group block of b tokens is identified
/// by the chained hash of its last hash block). Throws UsageError for an empty list.
[[nodiscard]] std::uint32_t hash_block_size(std::span<const KvCacheGroupSpec> groups);

/// Returns the token boundary every group can cut on: the least common multiple of
/// the groups' tokens per block (vLLM's hybrid coordinator cuts there too). Throws
/// UsageError for an empty list or when it exceeds kMaxAlignmentTokens.
[[nodiscard]] std::uint32_t alignment_tokens(std::span<const KvCacheGroupSpec> groups);

/// The largest common cut alignment accepted (tokens): beyond it prompts shorter
/// than the alignment could never hit; choose block sizes that divide each other.
inline constexpr std::uint32_t kMaxAlignmentTokens = 1u << 20;

}  // namespace kvbm
