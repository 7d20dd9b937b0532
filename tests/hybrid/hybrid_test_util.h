// tests/hybrid/hybrid_test_util.h: helpers shared by the HybridKvBlockManager tests.
//
//   full / window / state        the groups of the tests (16-token blocks)
//   hybrid_config(groups, ...)   a small config: explicit blocks per group and tier
//   serve(m, hashes)             one request from its hit to its end, every block's
//                                bytes pattern(its group key) (facade_test_util.h)
//   expect_served(m, hit)        every block of a hit: its group's key and bytes
//   expect_clean(m)              audit() == "" and every pool of every group balanced

#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/hybrid/hybrid_kv_block_manager.h"

namespace kvbm::test {

constexpr std::uint32_t kTokens = 16;  // tokens per block of every test group

inline KvCacheGroupSpec full(std::uint32_t id) {
  return KvCacheGroupSpec::full(GroupId{id}, kTokens, 1024, {id});
}
inline KvCacheGroupSpec window(std::uint32_t id, std::uint32_t w = 128) {
  return KvCacheGroupSpec::sliding_window(GroupId{id}, w, kTokens, 1024, {id});
}
inline KvCacheGroupSpec state(std::uint32_t id) {
  return KvCacheGroupSpec::recurrent_state(GroupId{id}, kTokens, 4096, {id});
}

/// Every group gets `blocks[tier]` blocks of each pooled tier present (0: absent);
/// G3 in `dir`.
inline HybridKvBlockManagerConfig hybrid_config(std::vector<KvCacheGroupSpec> groups,
                                                TierArray<std::size_t> blocks,
                                                const std::filesystem::path& dir = {},
                                                bool persistent = false) {
  HybridKvBlockManagerConfig c;
  c.base = config(1, blocks[TierId::kG2] > 0 ? 1 : 0, blocks[TierId::kG3] > 0 ? 1 : 0, dir);
  c.base.disk_persistent = persistent;
  c.base.disk_namespace = "model-a@1";
  c.group_blocks.assign(groups.size(), blocks);
  c.groups = std::move(groups);
  return c;
}

/// Writes pattern(key) into group g's G1 blocks [first, last) the request holds.
inline void write_blocks(HybridKvBlockManager& m, const HybridRequest<G1>& r,
                         const std::vector<SequenceHash>& hashes, std::size_t g, std::size_t first,
                         std::size_t last) {
  const auto keys = m.core().group_hashes(g, hashes, first, last);
  for (std::size_t i = first; i < first + keys.size(); ++i) {
    if (!r.holds_block(g, i)) continue;
    write_block(m.group(g).device_layout(), r.block_id(g, i),
                pattern(keys[i - first].value(), m.group(g).block_bytes()));
  }
}

/// Runs one request over `hashes` from its hit (onboarded from any tier) to its
/// end, `step` tokens at a time; returns the hit's tokens.
inline std::size_t serve(HybridKvBlockManager& m, const std::vector<SequenceHash>& hashes,
                         std::size_t step = 64) {
  const std::size_t total = hashes.size() * m.hash_block_size();
  HybridOnboardHandle h = m.onboard(hashes, total - 1);
  HybridRequest<G1> r = m.core().start_request(h.take_hit());
  const std::size_t hit = r.computed_tokens();
  while (r.computed_tokens() < total && !::testing::Test::HasFailure()) {
    const std::size_t from = r.computed_tokens();
    const std::size_t next = std::min(total, from + step);
    EXPECT_TRUE(m.core().allocate(r, next));
    for (std::size_t g = 0; g < m.group_count(); ++g) {
      write_blocks(m, r, hashes, g, from / kTokens, next / kTokens);
    }
    m.core().commit(r, hashes, next);
    m.core().release_out_of_reach(r, next);
  }
  m.core().finish(r, hashes);
  m.drain();
  return hit;
}

/// Every block of `hit`: the key of its group at its index, and the bytes written for it.
inline void expect_served(HybridKvBlockManager& m, const std::vector<SequenceHash>& hashes,
                          const PrefixHit<G1>& hit) {
  for (std::size_t g = 0; g < hit.blocks.size(); ++g) {
    const auto keys = m.core().group_hashes(g, hashes, hit.ranges[g].first, hit.ranges[g].last);
    ASSERT_EQ(hit.blocks[g].size(), keys.size()) << "group " << g;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto& b = hit.blocks[g][k];
      EXPECT_EQ(b.sequence_hash(), keys[k]) << "group " << g << " block " << k;
      EXPECT_EQ(read_block(m.group(g).device_layout(), b.block_id()),
                pattern(keys[k].value(), m.group(g).block_bytes()))
          << "group " << g << " block " << hit.ranges[g].first + k << " has other bytes";
    }
  }
}

/// audit() is empty and every pool of every group balances.
inline void expect_clean(HybridKvBlockManager& m) {
  m.drain();
  EXPECT_EQ(m.audit(), "");
  const auto stats = m.stats();
  for (std::size_t g = 0; g < stats.size(); ++g) {
    for (const auto& t : stats[g].tiers) {
      if (!t.pooled()) continue;
      EXPECT_TRUE(t.blocks.balanced()) << "group " << g << " " << to_string(t.tier);
    }
  }
}

}  // namespace kvbm::test
