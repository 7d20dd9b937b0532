// vLLM's KVCacheConfig shapes to KV cache groups (kvbm/groups/vllm_kv_cache_spec.h).
#include "kvbm/groups/vllm_kv_cache_spec.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kvbm/error.h"

namespace kvbm::vllm {

namespace {

// a * b, refusing overflow (a page or a group cannot exceed 2^64 bytes).
std::uint64_t times(std::uint64_t a, std::uint64_t b, const char* what) {
  KVBM_CHECK(b == 0 || a <= std::numeric_limits<std::uint64_t>::max() / b, what,
             ": the size overflows 64 bits; check the shape");
  return a * b;
}

std::uint64_t padded(std::uint64_t real, const std::optional<std::uint64_t>& pad,
                     const char* what) {
  if (!pad) return real;
  KVBM_CHECK(*pad >= real, what, ": page_size_padded ", *pad, " is below the page's ", real,
             " bytes; give a padded size of at least the real one");
  return *pad;
}

KvLayout layout_of(const AttentionShape& s, bool mla) {
  KvLayout l;
  l.dtype = s.dtype;
  l.dtype_bytes = s.dtype_bytes;
  l.num_kv_heads = s.num_kv_heads;
  l.head_size = s.head_size;
  l.head_size_v = mla ? 0 : (s.head_size_v == 0 ? s.head_size : s.head_size_v);
  l.mla = mla;
  return l;
}

std::vector<std::uint32_t> layer_indices(const std::vector<std::string>& names) {
  std::vector<std::uint32_t> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(layer_index(n));
  return out;
}

// The group from its kind, window, block size, page size, layout and layer names.
KvCacheGroupSpec group_of(GroupId id, AttentionKind kind, std::uint32_t window,
                          std::uint32_t block_size, std::uint64_t page,
                          const std::vector<std::string>& names, KvLayout layout) {
  KVBM_CHECK(!names.empty(), "vLLM KV cache group ", to_index(id),
             ": no layer_names; a group covers at least one layer");
  KvCacheGroupSpec g;
  g.id = id;
  g.kind = kind;
  g.window_tokens = window;
  g.tokens_per_block = block_size;
  g.bytes_per_block = times(page, names.size(), "vLLM KV cache group");
  g.layers = layer_indices(names);
  g.layout = std::move(layout);
  g.validate();
  return g;
}

}  // namespace

std::uint64_t page_size_bytes(const AttentionShape& s, bool mla) {
  KVBM_CHECK(s.block_size > 0 && s.num_kv_heads > 0 && s.head_size > 0 && s.dtype_bytes > 0,
             "vLLM attention spec: block_size, num_kv_heads, head_size and dtype_bytes must all ",
             "be set (got ", s.block_size, ", ", s.num_kv_heads, ", ", s.head_size, ", ",
             s.dtype_bytes, ")");
  const std::uint64_t per_token_head =
      mla ? s.head_size
          : std::uint64_t{s.head_size} + (s.head_size_v ? s.head_size_v : s.head_size);
  std::uint64_t real = times(s.block_size, s.num_kv_heads, "vLLM attention spec");
  real = times(real, per_token_head, "vLLM attention spec");
  real = times(real, s.dtype_bytes, "vLLM attention spec");
  return padded(real, s.page_size_padded, "vLLM attention spec");
}

std::uint64_t page_size_bytes(const MambaSpec& spec) {
  KVBM_CHECK(!spec.states.empty(), "vLLM MambaSpec: no state tensors; give shapes and dtypes");
  std::uint64_t real = 0;
  for (const auto& st : spec.states) {
    KVBM_CHECK(st.dtype_bytes > 0 && !st.shape.empty(),
               "vLLM MambaSpec: a state tensor has no shape or a dtype of 0 bytes");
    std::uint64_t n = st.dtype_bytes;
    for (const std::uint64_t d : st.shape) n = times(n, d, "vLLM MambaSpec");
    KVBM_CHECK(real <= std::numeric_limits<std::uint64_t>::max() - n,
               "vLLM MambaSpec: the page size overflows 64 bits");
    real += n;
  }
  KVBM_CHECK(real > 0, "vLLM MambaSpec: a state tensor has a zero dimension");
  return padded(real, spec.page_size_padded, "vLLM MambaSpec");
}

std::uint32_t layer_index(std::string_view name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('.', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    bool digits = !part.empty() && part.size() <= 9;
    for (const char c : part) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits) return static_cast<std::uint32_t>(std::stoul(std::string(part)));
    start = end + 1;
  }
  KVBM_CHECK(false, "vLLM layer name \"", name,
             "\" has no numeric component; expected a name "
             "such as model.layers.12.self_attn.attn");
  return 0;
}

KvCacheGroupSpec from_vllm(const KVCacheGroupSpec& group, GroupId id) {
  const auto& names = group.layer_names;
  if (const auto* f = std::get_if<FullAttentionSpec>(&group.spec)) {
    // A window or chunk on a FullAttentionSpec means vLLM keeps every token: full, for the cache.
    return group_of(id, AttentionKind::kFull, 0, f->shape.block_size,
                    page_size_bytes(f->shape, f->mla), names, layout_of(f->shape, f->mla));
  }
  if (const auto* s = std::get_if<SlidingWindowSpec>(&group.spec)) {
    return group_of(id, AttentionKind::kSlidingWindow, s->sliding_window, s->shape.block_size,
                    page_size_bytes(s->shape, false), names, layout_of(s->shape, false));
  }
  if (const auto* c = std::get_if<ChunkedLocalAttentionSpec>(&group.spec)) {
    return group_of(id, AttentionKind::kChunkedLocal, c->attention_chunk_size, c->shape.block_size,
                    page_size_bytes(c->shape, false), names, layout_of(c->shape, false));
  }
  const auto& m = std::get<MambaSpec>(group.spec);
  KVBM_CHECK(m.mamba_cache_mode != "none", "vLLM MambaSpec of group ", to_index(id),
             ": mamba_cache_mode \"none\" keeps no state snapshot to reuse; run vLLM with "
             "mamba_cache_mode \"align\" or \"all\" (prefix caching on)");
  KVBM_CHECK(m.mamba_cache_mode == "align" || m.mamba_cache_mode == "all", "vLLM MambaSpec of ",
             "group ", to_index(id), ": unknown mamba_cache_mode \"", m.mamba_cache_mode,
             "\"; expected \"align\" or \"all\"");
  return group_of(id, AttentionKind::kRecurrentState, 0, m.block_size, page_size_bytes(m), names,
                  KvLayout{});
}

std::vector<KvCacheGroupSpec> from_vllm(const KVCacheConfig& config) {
  std::vector<KvCacheGroupSpec> out;
  out.reserve(config.kv_cache_groups.size());
  for (std::size_t i = 0; i < config.kv_cache_groups.size(); ++i) {
    out.push_back(from_vllm(config.kv_cache_groups[i], GroupId{static_cast<std::uint32_t>(i)}));
  }
  validate_groups(out);
  return out;
}

}  // namespace kvbm::vllm
