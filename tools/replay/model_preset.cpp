#include "replay/model_preset.h"

#include <array>

namespace kvbm::replay {

namespace {

// Dimensions from each model's published config (num_hidden_layers,
// num_key_value_heads, head_dim), in bf16.
constexpr std::array<ModelPreset, 3> kPresets = {{
    {"llama3-8b", "Llama 3 8B", 32, 8, 128, 2, 8.0},
    {"qwen2.5-7b", "Qwen2.5 7B", 28, 4, 128, 2, 7.6},
    {"llama3-70b", "Llama 3 70B", 80, 8, 128, 2, 70.6},
}};

}  // namespace

std::span<const ModelPreset> model_presets() noexcept { return kPresets; }

std::optional<ModelPreset> find_model_preset(std::string_view name) noexcept {
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

double assumed_prefill_tokens_per_s(double params_billion) noexcept {
  constexpr double kPeakFlops = 989e12;  // H100 SXM dense BF16
  constexpr double kUtilisation = 0.5;
  return kPeakFlops * kUtilisation / (2.0 * params_billion * 1e9);
}

}  // namespace kvbm::replay
