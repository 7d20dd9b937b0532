// replay/model_preset.h: real model layouts for kvbm-replay (--model NAME).
//
// A preset fixes the KV cache layout of one block (layers, K and V, KV heads x
// head size, dtype) to the model's real dimensions, so that bytes per block,
// bytes moved and the savings estimate are the real ones, and gives the
// prefill throughput the savings estimate assumes (see savings.h).
//
// Thread-safety: constant data.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvbm::replay {

/// One model's KV layout and assumed prefill throughput.
struct ModelPreset {
  std::string_view name;      ///< --model value, e.g. "llama3-8b"
  std::string_view label;     ///< e.g. "Llama 3 8B"
  std::uint32_t layers;       ///< transformer layers
  std::uint32_t kv_heads;     ///< key/value heads (GQA)
  std::uint32_t head_dim;     ///< elements per head
  std::uint32_t dtype_bytes;  ///< bytes per element (bf16: 2)
  double params_billion;      ///< parameters, for the prefill throughput
  /// Bytes of K and V for one token: layers x 2 x kv_heads x head_dim x dtype.
  [[nodiscard]] constexpr std::uint64_t bytes_per_token() const noexcept {
    return std::uint64_t{layers} * 2 * kv_heads * head_dim * dtype_bytes;
  }
};

/// Every preset, in the order --help lists them.
[[nodiscard]] std::span<const ModelPreset> model_presets() noexcept;

/// Returns the preset named `name`, or nullopt.
[[nodiscard]] std::optional<ModelPreset> find_model_preset(std::string_view name) noexcept;

/// The prefill throughput (tokens/s) assumed for a model of `params_billion`:
/// an H100's dense BF16 peak (989 TFLOP/s) at 50% utilisation, over the
/// 2 x params FLOPs of one token's forward pass (attention over the context
/// not counted, so long prompts prefill slower than this).
[[nodiscard]] double assumed_prefill_tokens_per_s(double params_billion) noexcept;

}  // namespace kvbm::replay
