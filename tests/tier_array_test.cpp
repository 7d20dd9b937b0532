// Tests of kvbm/tier_array.h (per-tier data indexed by TierId) and of the tier names of
// kvbm/tier.h that go with it (copy paths, marker ids).

#include "kvbm/tier_array.h"

#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvbm {
namespace tier_array_test {

TEST(TierArray, EachTierHasItsOwnSlotInTierOrder) {
  TierArray<std::size_t> a{};
  std::size_t n = 1;
  for (const TierId t : kTierIds) a[t] = n++;
  EXPECT_EQ(a[TierId::kG1], 1u);
  EXPECT_EQ(a[TierId::kG2], 2u);
  EXPECT_EQ(a[TierId::kG3], 3u);
  EXPECT_EQ(a[TierId::kG4], 4u);
  // Iteration visits the values in the order of kTierIds (fastest first).
  const std::vector<std::size_t> seen(a.begin(), a.end());
  EXPECT_EQ(seen, (std::vector<std::size_t>{1, 2, 3, 4}));
  EXPECT_EQ(TierArray<int>::size(), kTierIds.size());
  for (std::size_t i = 0; i < kTierIds.size(); ++i) {
    EXPECT_EQ(TierArray<int>::index(kTierIds[i]), i) << to_string(kTierIds[i]);
  }
}

TEST(TierArray, AggregateInitGivesG1ToG4InOrder) {
  constexpr TierArray<double> costs{{0.0, 0.05, 0.2, 0.3}};
  static_assert(costs[TierId::kG1] == 0.0 && costs[TierId::kG4] == 0.3);
  EXPECT_DOUBLE_EQ(costs[TierId::kG2], 0.05);
  EXPECT_DOUBLE_EQ(costs[TierId::kG3], 0.2);
  const TierArray<int> partial{{7}};  // the rest value-initialized
  EXPECT_EQ(partial[TierId::kG1], 7);
  EXPECT_EQ(partial[TierId::kG4], 0);
}

TEST(TierArray, TotalEqualityAndFill) {
  TierArray<std::size_t> a{{1, 2, 3, 4}};
  EXPECT_EQ(total(a), 10u);
  TierArray<std::size_t> b = a;
  EXPECT_EQ(a, b);
  ++b[TierId::kG4];  // a difference in any tier, the last included, is seen
  EXPECT_NE(a, b);
  b.fill(0);
  EXPECT_EQ(total(b), 0u);
  TierArray<std::string> names;
  for (const TierId t : kTierIds) names[t] = std::string(to_string(t));
  EXPECT_EQ(names[TierId::kG3], "G3");
}

// Every copy path between tiers has one name, from the tier ids or the markers alike.
TEST(TierNames, CopyPathNamesComeFromTheTierPair) {
  EXPECT_EQ(copy_path_name(TierId::kG1, TierId::kG2), "G1_to_G2");
  EXPECT_EQ(copy_path_name(TierId::kG3, TierId::kG1), "G3_to_G1");
  EXPECT_EQ(copy_path_name(TierId::kG2, TierId::kG4), "G2_to_G4");
  EXPECT_EQ((copy_path_name<G2, G3>()), copy_path_name(TierId::kG2, TierId::kG3));
  static_assert(tier_id_of<G1>() == TierId::kG1 && tier_id_of<G4>() == TierId::kG4);
  struct Scratch {};
  EXPECT_EQ((copy_path_name<G1, Scratch>()), "G1_to_custom");
}

}  // namespace tier_array_test
}  // namespace kvbm
