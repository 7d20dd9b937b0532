// kvbm/groups/vllm_kv_cache_spec.h: vLLM's KVCacheConfig shapes as plain data.
//
// vLLM (vllm/v1/kv_cache_interface.py) describes a model's KV cache as a
// KVCacheConfig whose kv_cache_groups each carry layer names and one spec:
// FullAttentionSpec (and MLAAttentionSpec), SlidingWindowSpec,
// ChunkedLocalAttentionSpec or MambaSpec. These structs hold the fields of
// those specs that decide a group's geometry, with no Python: a binding or a
// config file fills them, from_vllm() turns them into KvCacheGroupSpecs.
//
// Page sizes follow vLLM's page_size_bytes: an attention page holds
// block_size * num_kv_heads * (head_size + head_size_v) * dtype bytes
// (MLA: block_size * num_kv_heads * head_size * dtype), a Mamba page the sum
// of prod(shape) * dtype over its state tensors; page_size_padded, when set,
// replaces the computed size (it must not be smaller). Bytes per block of a
// group are one page per layer: page size times the number of layers.
//
// Layer indices come from the layer names: the first dot-separated component
// that is all digits ("model.layers.12.self_attn.attn" -> 12).
//
// Thread-safety: plain values and pure functions.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvbm/groups/kv_cache_group_spec.h"

namespace kvbm::vllm {

/// The fields of vLLM's AttentionSpec that decide the page size.
struct AttentionShape {
  std::uint32_t block_size = 0;
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_size = 0;
  std::uint32_t head_size_v = 0;  ///< 0: equal to head_size (vLLM's default)
  std::string dtype;              ///< e.g. "bfloat16"
  std::uint32_t dtype_bytes = 0;
  std::optional<std::uint64_t> page_size_padded;
};

/// FullAttentionSpec, or MLAAttentionSpec when mla is set. vLLM records a sliding
/// window or chunk here only when its hybrid allocator is off (every token kept):
/// such a group is full attention for the cache and converts to kFull.
struct FullAttentionSpec {
  AttentionShape shape;
  bool mla = false;
  std::optional<std::uint32_t> sliding_window;
  std::optional<std::uint32_t> attention_chunk_size;
};

/// SlidingWindowSpec.
struct SlidingWindowSpec {
  AttentionShape shape;
  std::uint32_t sliding_window = 0;
};

/// ChunkedLocalAttentionSpec.
struct ChunkedLocalAttentionSpec {
  AttentionShape shape;
  std::uint32_t attention_chunk_size = 0;
};

/// One state tensor of a MambaSpec: its shape and element size.
struct MambaState {
  std::vector<std::uint64_t> shape;
  std::uint32_t dtype_bytes = 0;
};

/// MambaSpec. mamba_cache_mode is vLLM's ("none", "align", "all"); "none" keeps no
/// state to reuse, which kvbm refuses (a group without prefix reuse has no place here).
struct MambaSpec {
  std::uint32_t block_size = 0;
  std::vector<MambaState> states;
  std::optional<std::uint64_t> page_size_padded;
  std::string mamba_type = "mamba2";
  std::string mamba_cache_mode = "all";
  std::uint32_t num_speculative_blocks = 0;
};

/// One group's spec.
using KVCacheSpec =
    std::variant<FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec>;

/// KVCacheGroupSpec: layer names and spec.
struct KVCacheGroupSpec {
  std::vector<std::string> layer_names;
  KVCacheSpec spec;
};

/// KVCacheConfig: the fields a block manager needs.
struct KVCacheConfig {
  std::uint64_t num_blocks = 0;
  std::vector<KVCacheGroupSpec> kv_cache_groups;
};

/// Returns vLLM's page_size_bytes of an attention shape (mla: one vector per token).
/// Throws UsageError for a zero field or a padded size below the computed one.
[[nodiscard]] std::uint64_t page_size_bytes(const AttentionShape& shape, bool mla);
/// Returns vLLM's page_size_bytes of a MambaSpec. Throws UsageError as above.
[[nodiscard]] std::uint64_t page_size_bytes(const MambaSpec& spec);

/// Returns the layer index in a vLLM layer name (see the file comment). Throws
/// UsageError when no component is all digits.
[[nodiscard]] std::uint32_t layer_index(std::string_view layer_name);

/// Converts group `id` of a vLLM config into a validated KvCacheGroupSpec.
[[nodiscard]] KvCacheGroupSpec from_vllm(const KVCacheGroupSpec& group, GroupId id);
/// Converts every group, in order (GroupId i for group i), and validates the list.
[[nodiscard]] std::vector<KvCacheGroupSpec> from_vllm(const KVCacheConfig& config);

}  // namespace kvbm::vllm
