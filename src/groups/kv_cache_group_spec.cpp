// A KV cache group as data: constructors, labels, validation (kvbm/groups/kv_cache_group_spec.h).
#include "kvbm/groups/kv_cache_group_spec.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>

#include "kvbm/block_manager.h"
#include "kvbm/error.h"
#include "kvbm/groups/hit_rules.h"

namespace kvbm {

std::string_view to_string(AttentionKind kind) noexcept {
  switch (kind) {
    case AttentionKind::kFull:
      return "full";
    case AttentionKind::kSlidingWindow:
      return "sliding_window";
    case AttentionKind::kChunkedLocal:
      return "chunked_local";
    case AttentionKind::kRecurrentState:
      return "recurrent_state";
  }
  return "unknown";
}

namespace {

KvCacheGroupSpec make(GroupId id, AttentionKind kind, std::uint32_t window,
                      std::uint32_t tokens_per_block, std::uint64_t bytes_per_block,
                      std::vector<std::uint32_t> layers) {
  KvCacheGroupSpec g;
  g.id = id;
  g.kind = kind;
  g.window_tokens = window;
  g.tokens_per_block = tokens_per_block;
  g.bytes_per_block = bytes_per_block;
  g.layers = std::move(layers);
  g.validate();
  return g;
}

}  // namespace

KvCacheGroupSpec KvCacheGroupSpec::full(GroupId id, std::uint32_t tokens_per_block,
                                        std::uint64_t bytes_per_block,
                                        std::vector<std::uint32_t> layers) {
  return make(id, AttentionKind::kFull, 0, tokens_per_block, bytes_per_block, std::move(layers));
}

KvCacheGroupSpec KvCacheGroupSpec::sliding_window(GroupId id, std::uint32_t window,
                                                  std::uint32_t tokens_per_block,
                                                  std::uint64_t bytes_per_block,
                                                  std::vector<std::uint32_t> layers) {
  return make(id, AttentionKind::kSlidingWindow, window, tokens_per_block, bytes_per_block,
              std::move(layers));
}

KvCacheGroupSpec KvCacheGroupSpec::chunked_local(GroupId id, std::uint32_t chunk,
                                                 std::uint32_t tokens_per_block,
                                                 std::uint64_t bytes_per_block,
                                                 std::vector<std::uint32_t> layers) {
  return make(id, AttentionKind::kChunkedLocal, chunk, tokens_per_block, bytes_per_block,
              std::move(layers));
}

KvCacheGroupSpec KvCacheGroupSpec::recurrent_state(GroupId id, std::uint32_t tokens_per_block,
                                                   std::uint64_t snapshot_bytes,
                                                   std::vector<std::uint32_t> layers) {
  return make(id, AttentionKind::kRecurrentState, 0, tokens_per_block, snapshot_bytes,
              std::move(layers));
}

std::string KvCacheGroupSpec::kind_label() const {
  switch (kind) {
    case AttentionKind::kFull:
      return "full";
    case AttentionKind::kSlidingWindow:
      return "swa" + std::to_string(window_tokens);
    case AttentionKind::kChunkedLocal:
      return "chunk" + std::to_string(window_tokens);
    case AttentionKind::kRecurrentState:
      return "state";
  }
  return "unknown";
}

std::string KvCacheGroupSpec::display_name() const { return name.empty() ? kind_label() : name; }

std::string KvCacheGroupSpec::namespace_for(std::string_view ns) const {
  std::string out(ns);
  if (!out.empty()) out += '/';
  out += detail::concat("group:", to_index(id), ':', kind_label(), ':', tokens_per_block);
  return out;
}

void KvCacheGroupSpec::validate() const {
  const std::string who = detail::concat("KV cache group ", to_index(id), " (", to_string(kind),
                                         name.empty() ? "" : ", " + name, ")");
  KVBM_CHECK(kind >= AttentionKind::kFull && kind <= AttentionKind::kRecurrentState, who,
             ": unknown attention kind ", static_cast<int>(kind),
             "; use full, sliding window, chunked local or recurrent state");
  KVBM_CHECK(tokens_per_block > 0 && tokens_per_block <= kMaxBlockSize, who,
             ": tokens_per_block is ", tokens_per_block, "; give 1 .. ", kMaxBlockSize);
  KVBM_CHECK(bytes_per_block > 0, who, ": bytes_per_block is 0; give the bytes of one block over ",
             "all of the group's layers (recurrent state: one snapshot)");
  KVBM_CHECK(!layers.empty(), who, ": no layers; name the layer indices the group covers");
  std::vector<std::uint32_t> sorted = layers;
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  KVBM_CHECK(dup == sorted.end(), who, ": layer ", dup == sorted.end() ? 0 : *dup,
             " is listed twice; list each layer once");
  switch (kind) {
    case AttentionKind::kSlidingWindow:
      KVBM_CHECK(window_tokens > 0, who, ": the window is 0 tokens; give W >= 1");
      break;
    case AttentionKind::kChunkedLocal:
      KVBM_CHECK(window_tokens > 0 && window_tokens % tokens_per_block == 0, who, ": chunk of ",
                 window_tokens, " tokens is not a positive multiple of tokens_per_block ",
                 tokens_per_block, "; choose a block size that divides the chunk");
      break;
    default:
      KVBM_CHECK(window_tokens == 0, who, ": window_tokens is ", window_tokens,
                 " but only sliding-window and chunked-local groups have one; set it to 0");
  }
}

void validate_groups(std::span<const KvCacheGroupSpec> groups) {
  KVBM_CHECK(!groups.empty(), "KV cache groups: the list is empty; give at least one group");
  std::unordered_map<std::uint32_t, std::uint32_t> owner;  // layer -> group index
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    g.validate();
    KVBM_CHECK(to_index(g.id) == i, "KV cache groups: group at position ", i, " has id ",
               to_index(g.id), "; give group i the id GroupId{i}");
    for (const std::uint32_t layer : g.layers) {
      const auto [it, fresh] = owner.emplace(layer, static_cast<std::uint32_t>(i));
      KVBM_CHECK(fresh, "KV cache groups: layer ", layer, " is in group ", it->second,
                 " and in group ", i, "; a layer belongs to one group");
    }
  }
  (void)alignment_tokens(groups);  // throws when the common cut is out of range
}

std::uint32_t hash_block_size(std::span<const KvCacheGroupSpec> groups) {
  KVBM_CHECK(!groups.empty(), "hash_block_size: no groups given");
  std::uint32_t g = 0;
  for (const auto& s : groups) g = std::gcd(g, s.tokens_per_block);
  return g;
}

std::uint32_t alignment_tokens(std::span<const KvCacheGroupSpec> groups) {
  KVBM_CHECK(!groups.empty(), "alignment_tokens: no groups given");
  std::vector<GroupRule> rules;
  rules.reserve(groups.size());
  for (const auto& g : groups) rules.push_back(GroupRule::of(g));
  return alignment_tokens(std::span<const GroupRule>(rules));  // the one lcm, in hit_rules.h
}

}  // namespace kvbm
