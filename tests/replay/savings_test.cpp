// Tests of replay/savings.h and replay/model_preset.h: the savings estimate's
// arithmetic and the assumed prefill throughput.

#include "replay/savings.h"

#include <gtest/gtest.h>

#include "replay/model_preset.h"

namespace kvbm::replay {
namespace savings_test {

TEST(ReplaySavings, RecomputeAvoidedMinusLoadTime) {
  // 1,000 tokens/s; 1 GB/s from G2, 0.5 GB/s from G3; 1 MB blocks.
  const SavingsInputs in{
      .prefill_tokens_per_s = 1000, .g2_gb_per_s = 1, .g3_gb_per_s = 0.5, .block_bytes = 1'000'000};
  // G4's hits (the last figures) are outside the cost model: left out.
  const Savings s = estimate_savings({{10, 20, 30, 40}}, {{5000, 10000, 15000, 20000}}, in);
  EXPECT_EQ(s.tokens_not_recomputed, 30000u);
  EXPECT_DOUBLE_EQ(s.recompute_s[TierId::kG1], 5.0);
  EXPECT_DOUBLE_EQ(s.recompute_s[TierId::kG2], 10.0);
  EXPECT_DOUBLE_EQ(s.recompute_s[TierId::kG3], 15.0);
  EXPECT_DOUBLE_EQ(s.recompute_s[TierId::kG4], 0.0);
  EXPECT_DOUBLE_EQ(s.load_s[TierId::kG1], 0.0);  // a G1 hit costs nothing
  EXPECT_DOUBLE_EQ(s.load_s[TierId::kG2], 0.02);
  EXPECT_DOUBLE_EQ(s.load_s[TierId::kG3], 0.06);
  EXPECT_DOUBLE_EQ(s.saved_s, 30.0 - 0.08);
}

TEST(ReplaySavings, ATierSlowerThanRecomputingCostsTime) {
  const SavingsInputs in{.prefill_tokens_per_s = 1e6,
                         .g2_gb_per_s = 1,
                         .g3_gb_per_s = 0.001,
                         .block_bytes = 64ull << 20};
  const Savings s = estimate_savings({{0, 0, 1, 0}}, {{0, 0, 512, 0}}, in);
  EXPECT_LT(s.saved_s, 0.0);
}

TEST(ReplaySavings, AssumedPrefillThroughputFollowsModelSize) {
  // 50% of 989 TFLOP/s over 2 x 8e9 FLOPs per token.
  EXPECT_NEAR(assumed_prefill_tokens_per_s(8.0), 30906.25, 0.01);
  EXPECT_GT(assumed_prefill_tokens_per_s(7.6), assumed_prefill_tokens_per_s(70.6));
  for (const auto& m : model_presets()) EXPECT_GT(m.bytes_per_token(), 0u) << m.name;
}

}  // namespace savings_test
}  // namespace kvbm::replay
