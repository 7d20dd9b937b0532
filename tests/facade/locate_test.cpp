// Tests of KvBlockManager::locate: per hash, the fastest tier holding it, past a miss
// too (probe() stops there), taking nothing. G1, G2 and G3 with a real file; G4 is
// covered by tests/hybrid/hybrid_kv_block_manager_remote_test.cpp.

#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace locate_test {

using test::compute;
using test::TempDir;

TEST(KvBlockManagerLocate, AnswersEveryPositionFastestTierFirst) {
  TempDir dir("locate");
  auto kv = KvBlockManager::build(test::config(4, 8, 16, dir.path()));
  const auto h = test::prefix(7, 16);
  for (std::size_t i = 0; i < h.size(); i += 4) {  // G1 keeps 12..15, G2 8..15, G3 all
    compute(*kv, std::span(h).subspan(i, 4));
    kv->drain();
  }
  const auto missing = test::prefix(8, 1);
  const std::vector<SequenceHash> asked = {missing[0], h[0], h[9], h[13], missing[0], h[3]};
  const auto where = kv->locate(asked);
  ASSERT_EQ(where.size(), asked.size());
  EXPECT_EQ(where[0], std::nullopt);
  EXPECT_EQ(where[1], TierId::kG3);
  EXPECT_EQ(where[2], TierId::kG2);
  EXPECT_EQ(where[3], TierId::kG1);
  EXPECT_EQ(where[4], std::nullopt);
  EXPECT_EQ(where[5], TierId::kG3) << "answered past a miss";
  EXPECT_EQ(kv->probe(asked).total(), 0u) << "probe() stops at the first miss";
  EXPECT_TRUE(kv->locate({}).empty());
  const auto counts = kv->device().pool_counts();
  EXPECT_EQ(counts.in_use, 0u) << "locate takes nothing";
  EXPECT_EQ(kv->audit(), "");
}

}  // namespace locate_test
}  // namespace kvbm
