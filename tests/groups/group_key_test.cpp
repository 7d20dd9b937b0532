#include "kvbm/groups/group_key.h"

#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm {
namespace group_key_test {

std::vector<KvCacheGroupSpec> variants() {
  // Groups that differ in exactly one field of the seed each.
  std::vector<KvCacheGroupSpec> out{
      KvCacheGroupSpec::full(GroupId{0}, 16, 4096, {0}),
      KvCacheGroupSpec::full(GroupId{1}, 16, 4096, {0}),                 // id
      KvCacheGroupSpec::sliding_window(GroupId{0}, 128, 16, 4096, {0}),  // kind
      KvCacheGroupSpec::sliding_window(GroupId{0}, 256, 16, 4096, {0}),  // window
      KvCacheGroupSpec::chunked_local(GroupId{0}, 128, 16, 4096, {0}),   // kind, same parameter
      KvCacheGroupSpec::full(GroupId{0}, 32, 4096, {0}),                 // tokens per block
      KvCacheGroupSpec::full(GroupId{0}, 16, 8192, {0}),                 // bytes per block
      KvCacheGroupSpec::recurrent_state(GroupId{0}, 16, 4096, {0}),      // kind
  };
  return out;
}

TEST(GroupSeed, EqualSpecsEqualSeedsAndEveryFieldCounts) {
  const auto gs = variants();
  std::unordered_set<std::uint64_t> seeds;
  for (const auto& g : gs) {
    EXPECT_EQ(group_seed(g), group_seed(g));
    seeds.insert(group_seed(g));
  }
  EXPECT_EQ(seeds.size(), gs.size());
  auto renamed = gs[0];
  renamed.name = "other";
  renamed.layers = {7};
  EXPECT_EQ(group_seed(renamed), group_seed(gs[0]));  // names and layers do not key blocks
}

// No key of one group equals any key of another, over a long chain with repeated
// values (the same prefix asked twice) and small values, nor the unkeyed value itself.
TEST(GroupKey, KeysOfDifferentGroupsNeverMeet) {
  const auto gs = variants();
  std::vector<std::uint64_t> values;
  for (const auto& h : test::chain(4096, 1)) values.push_back(h.value());
  for (std::uint64_t v = 0; v < 64; ++v) values.push_back(v);         // small values
  values.insert(values.end(), values.begin(), values.begin() + 100);  // repeats
  const std::unordered_set<std::uint64_t> distinct(values.begin(), values.end());
  std::unordered_set<std::uint64_t> keys;
  for (const auto& g : gs) {
    const std::uint64_t seed = group_seed(g);
    for (const std::uint64_t v : values) {
      const std::uint64_t k = group_key(v, seed);
      EXPECT_NE(k, v);
      keys.insert(k);
    }
  }
  // Every (group, distinct value) pair gave its own key.
  EXPECT_EQ(keys.size(), distinct.size() * gs.size());
  // Swapping value and seed gives another key.
  const std::uint64_t s = group_seed(gs[0]);
  EXPECT_NE(group_key(values[5], s), group_key(s, values[5]));
}

TEST(GroupKey, KeepsTheChainParentAndPosition) {
  const auto g = KvCacheGroupSpec::full(GroupId{2}, 16, 1, {0});
  const auto fine = test::chain(10, 3);
  const auto keys = group_hashes(fine, 16, g);
  ASSERT_EQ(keys.size(), 10u);
  EXPECT_FALSE(keys[0].has_parent());
  for (std::size_t i = 1; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].parent(), keys[i - 1].value());
    EXPECT_EQ(keys[i].position(), i);
    EXPECT_EQ(keys[i], group_key(fine[i], group_seed(g)));
  }
}

TEST(GroupKey, LargerBlocksKeyTheirLastHashBlock) {
  const auto g = KvCacheGroupSpec::full(GroupId{1}, 32, 1, {0});
  const auto fine = test::chain(9, 4);  // 9 blocks of 16: 4 full blocks of 32
  const auto keys = group_hashes(fine, 16, g);
  ASSERT_EQ(keys.size(), 4u);
  const std::uint64_t seed = group_seed(g);
  for (std::size_t j = 0; j < keys.size(); ++j) {
    EXPECT_EQ(keys[j].value(), group_key(fine[2 * j + 1].value(), seed));
    EXPECT_EQ(keys[j].position(), j);
    if (j > 0) {
      EXPECT_EQ(keys[j].parent(), keys[j - 1].value());
    }
  }
  EXPECT_THROW((void)group_hashes(fine, 24, g), UsageError);
  EXPECT_EQ(group_hashes(fine, 2, seed, 1, 3).size(), 2u);
  EXPECT_EQ(group_hashes(fine, 2, seed, 1, 3)[0], keys[1]);
  EXPECT_TRUE(group_hashes(fine, 2, seed, 3, 100).size() == 1);  // clamped to 4 full blocks
}

}  // namespace group_key_test
}  // namespace kvbm
