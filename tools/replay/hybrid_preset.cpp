#include "replay/hybrid_preset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

#include "kvbm/error.h"

namespace kvbm::replay {

namespace {

// Bytes of K and V for one token of one attention layer in bf16.
constexpr std::uint64_t kv_bytes_per_token(std::uint32_t kv_heads, std::uint32_t head_dim) {
  return std::uint64_t{2} * kv_heads * head_dim * 2;
}

// The block size of every attention group of the presets: vLLM's default block_size.
constexpr std::uint32_t kBlock = 16;

// Layers [0, n) for which `pick(i)` holds.
template <class Pick>
std::vector<std::uint32_t> layers_where(std::uint32_t n, Pick pick) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (pick(i)) out.push_back(i);
  }
  return out;
}

KvLayout bf16(std::uint32_t kv_heads, std::uint32_t head_dim) {
  return KvLayout{"bfloat16", 2, kv_heads, head_dim, head_dim, false};
}

// An attention group of `layers`, kv_heads x head_dim in bf16, kBlock tokens per block.
KvCacheGroupSpec attention(GroupId id, AttentionKind kind, std::uint32_t window,
                           std::vector<std::uint32_t> layers, std::uint32_t kv_heads,
                           std::uint32_t head_dim, std::string name) {
  const std::uint64_t bytes =
      kv_bytes_per_token(kv_heads, head_dim) * kBlock * static_cast<std::uint64_t>(layers.size());
  KvCacheGroupSpec g;
  switch (kind) {
    case AttentionKind::kSlidingWindow:
      g = KvCacheGroupSpec::sliding_window(id, window, kBlock, bytes, std::move(layers));
      break;
    case AttentionKind::kChunkedLocal:
      g = KvCacheGroupSpec::chunked_local(id, window, kBlock, bytes, std::move(layers));
      break;
    default:
      g = KvCacheGroupSpec::full(id, kBlock, bytes, std::move(layers));
  }
  g.name = std::move(name);
  g.layout = bf16(kv_heads, head_dim);
  return g;
}

// openai/gpt-oss-20b, config.json: num_hidden_layers 24, layer_types alternating
// sliding_attention (even layers) and full_attention (odd), sliding_window 128,
// num_key_value_heads 8, head_dim 64; attention in bf16 (the MoE weights are MXFP4).
HybridModel gpt_oss_20b() {
  HybridModel m{"gpt-oss-20b",
                "gpt-oss-20b: 12 full + 12 sliding-window (W 128) layers",
                "huggingface.co/openai/gpt-oss-20b config.json",
                {},
                {1.0, 1.0}};
  m.groups.push_back(attention(GroupId{0}, AttentionKind::kFull, 0,
                               layers_where(24, [](auto i) { return i % 2 == 1; }), 8, 64, "full"));
  m.groups.push_back(attention(GroupId{1}, AttentionKind::kSlidingWindow, 128,
                               layers_where(24, [](auto i) { return i % 2 == 0; }), 8, 64,
                               "swa128"));
  return m;
}

// google/gemma-3-27b-it, config.json text_config: num_hidden_layers 62,
// sliding_window 1024, sliding_window_pattern 6 (layer i global when (i + 1) % 6 == 0:
// 10 global, 52 local), num_key_value_heads 16, head_dim 128, bf16.
HybridModel gemma3_27b() {
  HybridModel m{"gemma3-27b",
                "Gemma 3 27B: 10 full + 52 sliding-window (W 1024) layers",
                "huggingface.co/google/gemma-3-27b-it config.json",
                {},
                {1.0, 1.0}};
  m.groups.push_back(attention(GroupId{0}, AttentionKind::kFull, 0,
                               layers_where(62, [](auto i) { return (i + 1) % 6 == 0; }), 16, 128,
                               "full"));
  m.groups.push_back(attention(GroupId{1}, AttentionKind::kSlidingWindow, 1024,
                               layers_where(62, [](auto i) { return (i + 1) % 6 != 0; }), 16, 128,
                               "swa1024"));
  return m;
}

// meta-llama/Llama-4-Scout-17B-16E, config.json text_config: num_hidden_layers 48,
// attention_chunk_size 8192, no_rope_layer_interval 4 (every 4th layer, i = 3, 7, ...,
// global NoPE attention; the others chunked local), num_key_value_heads 8, head_dim 128, bf16.
HybridModel llama4_scout() {
  HybridModel m{"llama4-scout",
                "Llama 4 Scout: 12 full + 36 chunked-local (C 8192) layers",
                "huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json",
                {},
                {1.0, 1.0}};
  m.groups.push_back(attention(GroupId{0}, AttentionKind::kFull, 0,
                               layers_where(48, [](auto i) { return (i + 1) % 4 == 0; }), 8, 128,
                               "full"));
  m.groups.push_back(attention(GroupId{1}, AttentionKind::kChunkedLocal, 8192,
                               layers_where(48, [](auto i) { return (i + 1) % 4 != 0; }), 8, 128,
                               "chunk8192"));
  return m;
}

// Qwen/Qwen3-Next-80B-A3B-Instruct, config.json: num_hidden_layers 48,
// full_attention_interval 4 (layer i full attention when (i + 1) % 4 == 0: 12 layers;
// 36 Gated DeltaNet layers), num_key_value_heads 2, head_dim 256; linear_num_key_heads 16,
// linear_num_value_heads 32, linear_key_head_dim 128, linear_value_head_dim 128,
// linear_conv_kernel_dim 4; bf16. One DeltaNet layer's state: the recurrent state 32 x 128
// x 128 plus the conv state (2 x 16 x 128 + 32 x 128) x (4 - 1), in bf16 (vLLM's default
// state dtype is the model's): 1,097,728 bytes. A snapshot every 512 tokens (the trace's
// block; vLLM's "all" mode snapshots every block of its page-size-aligned block size).
HybridModel qwen3_next_80b() {
  HybridModel m{"qwen3-next-80b",
                "Qwen3-Next-80B-A3B: 12 full + 36 Gated DeltaNet (recurrent state) layers",
                "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
                {},
                {1.0, 1.0}};
  m.groups.push_back(attention(GroupId{0}, AttentionKind::kFull, 0,
                               layers_where(48, [](auto i) { return (i + 1) % 4 == 0; }), 2, 256,
                               "full"));
  constexpr std::uint64_t kState = 32ull * 128 * 128 + (2ull * 16 * 128 + 32 * 128) * (4 - 1);
  auto layers = layers_where(48, [](auto i) { return (i + 1) % 4 != 0; });
  const std::uint64_t bytes = kState * 2 * layers.size();
  KvCacheGroupSpec s = KvCacheGroupSpec::recurrent_state(GroupId{1}, 512, bytes, std::move(layers));
  s.name = "deltanet";
  s.layout = KvLayout{"bfloat16", 2, 0, 0, 0, false};
  m.groups.push_back(std::move(s));
  return m;
}

// meta-llama/Llama-3.1-8B, config.json: num_hidden_layers 32, num_key_value_heads 8,
// head_dim 128 (4096 / 32), bf16: one full-attention group (the baseline's own shape).
HybridModel llama31_8b() {
  HybridModel m{"llama3.1-8b",
                "Llama 3.1 8B: 32 full-attention layers (dense)",
                "huggingface.co/meta-llama/Llama-3.1-8B config.json",
                {},
                {1.0}};
  m.groups.push_back(attention(GroupId{0}, AttentionKind::kFull, 0,
                               layers_where(32, [](auto) { return true; }), 8, 128, "full"));
  return m;
}

constexpr std::array<HybridPreset, 5> kHybridPresets = {{
    {"gpt-oss-20b", gpt_oss_20b},
    {"gemma3-27b", gemma3_27b},
    {"llama4-scout", llama4_scout},
    {"qwen3-next-80b", qwen3_next_80b},
    {"llama3.1-8b", llama31_8b},
}};

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& field, const std::string& what,
                      const json& got) {
  throw UsageError(source + ": " + field + ": expected " + what + ", got " +
                   got.dump(-1, ' ', false, json::error_handler_t::replace));
}

// An integer field in [min, max]; `required` false: absent gives `fallback`.
std::uint64_t integer(const json& g, const std::string& source, const std::string& at,
                      const char* key, std::uint64_t min, std::uint64_t max) {
  const std::string field = at + "." + key;
  if (!g.contains(key)) throw UsageError(source + ": " + field + ": missing");
  const json& v = g.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() < min || v.get<std::uint64_t>() > max) {
    bad(source, field, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
        v);
  }
  return v.get<std::uint64_t>();
}

AttentionKind parse_kind(const json& g, const std::string& source, const std::string& at) {
  if (!g.contains("kind")) throw UsageError(source + ": " + at + ".kind: missing");
  const json& v = g.at("kind");
  for (const auto k : {AttentionKind::kFull, AttentionKind::kSlidingWindow,
                       AttentionKind::kChunkedLocal, AttentionKind::kRecurrentState}) {
    if (v.is_string() && v.get<std::string>() == to_string(k)) return k;
  }
  bad(source, at + ".kind", "full, sliding_window, chunked_local or recurrent_state", v);
}

std::vector<std::uint32_t> parse_layers(const json& g, const std::string& source,
                                        const std::string& at) {
  if (!g.contains("layers")) throw UsageError(source + ": " + at + ".layers: missing");
  const json& v = g.at("layers");
  if (!v.is_array() || v.empty()) bad(source, at + ".layers", "a non-empty list of layers", v);
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_unsigned() || v[i].get<std::uint64_t>() > 0xFFFF'FFFFull) {
      bad(source, at + ".layers[" + std::to_string(i) + "]", "a layer index >= 0", v[i]);
    }
    out.push_back(v[i].get<std::uint32_t>());
  }
  return out;
}

// One group of the list: its fields checked one by one, each error naming its field.
KvCacheGroupSpec parse_group(const json& g, std::size_t i, const std::string& source,
                             double& weight) {
  const std::string at = "groups[" + std::to_string(i) + "]";
  if (!g.is_object()) bad(source, at, "an object", g);
  static constexpr std::array<const char*, 8> kKnown = {
      "kind",   "window", "chunk",    "tokens_per_block", "bytes_per_block",
      "layers", "name",   "g1_weight"};
  for (const auto& [key, value] : g.items()) {
    if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
      throw UsageError(source + ": " + at + "." + key +
                       ": unknown field (known: kind, window, chunk, tokens_per_block, "
                       "bytes_per_block, layers, name, g1_weight)");
    }
  }
  const AttentionKind kind = parse_kind(g, source, at);
  KvCacheGroupSpec spec;
  spec.id = GroupId{static_cast<std::uint32_t>(i)};
  spec.kind = kind;
  const char* param = kind == AttentionKind::kSlidingWindow  ? "window"
                      : kind == AttentionKind::kChunkedLocal ? "chunk"
                                                             : nullptr;
  for (const char* other : {"window", "chunk"}) {
    if (g.contains(other) && (param == nullptr || std::string_view(other) != param)) {
      throw UsageError(source + ": " + at + "." + other + ": a " + std::string(to_string(kind)) +
                       " group has no " + other);
    }
  }
  if (param != nullptr) {
    spec.window_tokens = static_cast<std::uint32_t>(integer(g, source, at, param, 1, 1u << 30));
  }
  spec.tokens_per_block =
      static_cast<std::uint32_t>(integer(g, source, at, "tokens_per_block", 1, 65536));
  spec.bytes_per_block = integer(g, source, at, "bytes_per_block", 1, std::uint64_t{1} << 40);
  spec.layers = parse_layers(g, source, at);
  if (g.contains("name")) {
    if (!g.at("name").is_string()) bad(source, at + ".name", "a string", g.at("name"));
    spec.name = g.at("name").get<std::string>();
  }
  weight = 1.0;
  if (g.contains("g1_weight")) {
    const json& w = g.at("g1_weight");
    if (!w.is_number() || !(w.get<double>() > 0) || !std::isfinite(w.get<double>())) {
      bad(source, at + ".g1_weight", "a number > 0", w);
    }
    weight = w.get<double>();
  }
  return spec;
}

}  // namespace

std::span<const HybridPreset> hybrid_presets() noexcept { return kHybridPresets; }

std::string hybrid_preset_names() {
  std::string names;
  for (const auto& p : kHybridPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

std::optional<HybridModel> find_hybrid_preset(std::string_view name) {
  for (const auto& p : kHybridPresets) {
    if (p.name == name) return p.build();
  }
  return std::nullopt;
}

std::string check_hybrid_preset(std::string_view name) {
  for (const auto& p : kHybridPresets) {
    if (p.name == name) return {};
  }
  return "--model-groups: unknown preset '" + std::string(name) +
         "'; known: " + hybrid_preset_names();
}

HybridModel parse_model_groups(std::string_view json_text, const std::string& source) {
  const json doc = json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) throw UsageError(source + ": not valid JSON");
  if (!doc.is_array() || doc.empty()) {
    bad(source, "groups", "a non-empty JSON list of groups", doc.is_array() ? doc : json("..."));
  }
  HybridModel m;
  m.name = source;
  m.label = source;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    double weight = 1.0;
    m.groups.push_back(parse_group(doc[i], i, source, weight));
    m.g1_weights.push_back(weight);
  }
  try {
    validate_groups(m.groups);
  } catch (const UsageError& e) {
    throw UsageError(source + ": " + e.what());
  }
  return m;
}

HybridModel read_model_groups_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--model-groups-file: cannot read " + path.string());
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_model_groups(text, path.string());
}

}  // namespace kvbm::replay
