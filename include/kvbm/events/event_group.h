// kvbm/events/event_group.h: the KV cache group a hybrid model's events name, in vLLM's words.
//
// vLLM's BlockStored carries its group as three optional fields: group_idx
// (the group's index in the model's list), kv_cache_spec_kind (a
// KVCacheSpecKind value: "full_attention", "sliding_window", ...) and
// kv_cache_spec_sliding_window (W, for a sliding window only; vLLM sends no
// chunk size for chunked local attention); its BlockRemoved carries
// group_idx alone. kvbm's pools publish the same fields when their listener
// knows the group (KvEventPublisher::listener(medium, group)), and a router
// that knows the model's groups (router::KvIndexerOptions::groups) indexes
// each group apart. event_group() is what a kvbm group publishes;
// attention_kind_of() reads a kind name back.
//
// Thread-safety: plain values and pure functions.

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvbm/groups/kv_cache_group_spec.h"

namespace kvbm::events {

/// vLLM's KVCacheSpecKind values that kvbm's groups map to and from.
inline constexpr const char* kSpecKindFullAttention = "full_attention";
inline constexpr const char* kSpecKindMlaAttention = "mla_attention";
inline constexpr const char* kSpecKindSinkFullAttention = "sink_full_attention";
inline constexpr const char* kSpecKindSlidingWindow = "sliding_window";
inline constexpr const char* kSpecKindSlidingWindowMla = "sliding_window_mla";
inline constexpr const char* kSpecKindChunkedLocal = "chunked_local_attention";
inline constexpr const char* kSpecKindMamba = "mamba";

/// The group fields of one pool's events.
struct EventGroup {
  std::uint32_t group_idx = 0;                  ///< BlockStored and BlockRemoved group_idx
  std::string kind;                             ///< BlockStored kv_cache_spec_kind
  std::optional<std::uint32_t> sliding_window;  ///< BlockStored kv_cache_spec_sliding_window
  friend bool operator==(const EventGroup&, const EventGroup&) = default;
};

/// Returns what the events of group `g`'s pools carry: its id, the kind as
/// vLLM names it (the _mla names for an MLA layout, "mamba" for recurrent
/// state) and W for a sliding window.
[[nodiscard]] EventGroup event_group(const KvCacheGroupSpec& g);

/// Returns kvbm's attention kind for one of vLLM's kind names ("full_attention",
/// "mla_attention" and "sink_full_attention" are full attention; "sliding_window"
/// and "sliding_window_mla" a sliding window; "chunked_local_attention";
/// "mamba" recurrent state), or nullopt for a kind kvbm has no row for
/// ("cross_attention", "encoder_only_attention", "unknown", anything else).
[[nodiscard]] std::optional<AttentionKind> attention_kind_of(std::string_view vllm_kind) noexcept;

}  // namespace kvbm::events
