// src/events/event_group.cpp: the group fields of KV events (kvbm/events/event_group.h).

#include "kvbm/events/event_group.h"

namespace kvbm::events {

EventGroup event_group(const KvCacheGroupSpec& g) {
  EventGroup out;
  out.group_idx = to_index(g.id);
  const bool mla = g.layout.mla;
  switch (g.kind) {
    case AttentionKind::kFull:
      out.kind = mla ? kSpecKindMlaAttention : kSpecKindFullAttention;
      break;
    case AttentionKind::kSlidingWindow:
      out.kind = mla ? kSpecKindSlidingWindowMla : kSpecKindSlidingWindow;
      out.sliding_window = g.window_tokens;
      break;
    case AttentionKind::kChunkedLocal:
      out.kind = kSpecKindChunkedLocal;
      break;
    case AttentionKind::kRecurrentState:
      out.kind = kSpecKindMamba;
      break;
  }
  return out;
}

std::optional<AttentionKind> attention_kind_of(std::string_view vllm_kind) noexcept {
  if (vllm_kind == kSpecKindFullAttention || vllm_kind == kSpecKindMlaAttention ||
      vllm_kind == kSpecKindSinkFullAttention) {
    return AttentionKind::kFull;
  }
  if (vllm_kind == kSpecKindSlidingWindow || vllm_kind == kSpecKindSlidingWindowMla) {
    return AttentionKind::kSlidingWindow;
  }
  if (vllm_kind == kSpecKindChunkedLocal) return AttentionKind::kChunkedLocal;
  if (vllm_kind == kSpecKindMamba) return AttentionKind::kRecurrentState;
  return std::nullopt;
}

}  // namespace kvbm::events
