#include "replay/savings.h"

namespace kvbm::replay {

Savings estimate_savings(const std::array<std::uint64_t, 3>& hit_blocks,
                         const std::array<std::uint64_t, 3>& hit_tokens,
                         const SavingsInputs& inputs) {
  Savings s;
  const double bandwidth[3] = {0, inputs.g2_gb_per_s * 1e9, inputs.g3_gb_per_s * 1e9};
  for (std::size_t k = 0; k < 3; ++k) {
    s.tokens_not_recomputed += hit_tokens[k];
    if (inputs.prefill_tokens_per_s > 0) {
      s.recompute_s[k] = static_cast<double>(hit_tokens[k]) / inputs.prefill_tokens_per_s;
    }
    if (k > 0 && bandwidth[k] > 0) {
      s.load_s[k] = static_cast<double>(hit_blocks[k]) * static_cast<double>(inputs.block_bytes) /
                    bandwidth[k];
    }
    s.saved_s += s.recompute_s[k] - s.load_s[k];
  }
  return s;
}

}  // namespace kvbm::replay
