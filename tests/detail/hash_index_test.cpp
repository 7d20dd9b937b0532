// Tests of the pool's hash index (kvbm/detail/hash_index.h) against
// std::unordered_map: random inserts, erases and lookups, with mixed and with
// small consecutive keys (which collide in the low bits), filled to capacity.

#include "kvbm/detail/hash_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/detail/huge_page_allocator.h"
#include "test_util.h"

namespace kvbm::detail {
namespace hash_index_test {

void check_same(const HashIndex& index, const std::unordered_map<std::uint64_t, BlockId>& ref,
                const std::vector<std::uint64_t>& keys) {
  ASSERT_EQ(index.size(), ref.size());
  for (const auto k : keys) {
    const BlockId* got = index.find(k);
    const auto it = ref.find(k);
    if (it == ref.end()) {
      ASSERT_EQ(got, nullptr) << "key " << k;
    } else {
      ASSERT_NE(got, nullptr) << "key " << k;
      ASSERT_EQ(*got, it->second) << "key " << k;
    }
  }
}

void random_ops(bool small_keys, std::uint32_t seed) {
  constexpr std::size_t kMax = 1000;
  HashIndex index(kMax);
  std::unordered_map<std::uint64_t, BlockId> ref;
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> keys(3 * kMax);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = small_keys ? i : rng();
  for (int op = 0; op < 200'000; ++op) {
    const std::uint64_t k = keys[rng() % keys.size()];
    if (rng() % 2 == 0 && ref.size() < kMax) {
      const auto v = static_cast<BlockId>(rng() % 100000);
      const auto [stored, inserted] = index.try_emplace(k, v);
      const auto [it, ref_inserted] = ref.try_emplace(k, v);
      ASSERT_EQ(inserted, ref_inserted);
      ASSERT_EQ(stored, it->second);
    } else {
      ASSERT_EQ(index.erase(k), ref.erase(k) == 1);
    }
    if (op % 20'000 == 0) check_same(index, ref, keys);
  }
  check_same(index, ref, keys);
  // Fill to capacity, then empty it again.
  for (const auto k : keys) {
    if (ref.size() == kMax) break;
    index.try_emplace(k, 7);
    ref.try_emplace(k, 7);
  }
  check_same(index, ref, keys);
  for (const auto k : keys) {
    ASSERT_EQ(index.erase(k), ref.erase(k) == 1);
  }
  EXPECT_EQ(index.size(), 0u);
  check_same(index, ref, keys);
}

TEST(HashIndex, MatchesUnorderedMapWithMixedKeys) { random_ops(false, test::test_seed()); }
TEST(HashIndex, MatchesUnorderedMapWithSmallConsecutiveKeys) {
  random_ops(true, test::test_seed());
}

TEST(HashIndex, SizedToTwiceItsEntriesAtLeast) {
  HashIndex index(1000);
  EXPECT_EQ(index.bytes(), 2048u * 16);
  EXPECT_EQ(index.max_entries(), 1000u);
  EXPECT_FALSE(index.contains(0));
  EXPECT_TRUE(index.try_emplace(0, 3).second);
  EXPECT_TRUE(index.contains(0));
  EXPECT_FALSE(index.try_emplace(0, 4).second);
  EXPECT_EQ(*index.find(0), 3u);
}

TEST(HugePageAllocator, LargeTablesAreHugePageAlignedAndUsable) {
  // 3 MiB of entries: at least one huge page, aligned to one.
  std::vector<std::uint64_t, HugePageAllocator<std::uint64_t>> big(3u << 17);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.data()) % kHugePageBytes, 0u);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = i;
  EXPECT_EQ(big.back(), big.size() - 1);
  // A small table is an ordinary allocation with the type's alignment.
  std::vector<std::uint64_t, HugePageAllocator<std::uint64_t>> small(100, 7);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % alignof(std::uint64_t), 0u);
  EXPECT_EQ(small[99], 7u);
}

}  // namespace hash_index_test
}  // namespace kvbm::detail
