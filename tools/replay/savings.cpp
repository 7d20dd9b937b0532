#include "replay/savings.h"

namespace kvbm::replay {

Savings estimate_savings(const TierArray<std::uint64_t>& hit_blocks,
                         const TierArray<std::uint64_t>& hit_tokens, const SavingsInputs& inputs) {
  Savings s;
  TierArray<double> bandwidth{};  // G1 and G4: none
  bandwidth[TierId::kG2] = inputs.g2_gb_per_s * 1e9;
  bandwidth[TierId::kG3] = inputs.g3_gb_per_s * 1e9;
  for (const TierId k : {TierId::kG1, TierId::kG2, TierId::kG3}) {
    s.tokens_not_recomputed += hit_tokens[k];
    if (inputs.prefill_tokens_per_s > 0) {
      s.recompute_s[k] = static_cast<double>(hit_tokens[k]) / inputs.prefill_tokens_per_s;
    }
    if (bandwidth[k] > 0) {
      s.load_s[k] = static_cast<double>(hit_blocks[k]) * static_cast<double>(inputs.block_bytes) /
                    bandwidth[k];
    }
    s.saved_s += s.recompute_s[k] - s.load_s[k];
  }
  return s;
}

}  // namespace kvbm::replay
