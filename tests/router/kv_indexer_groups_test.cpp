// The KvIndexer of a hybrid model (KvIndexerOptions::groups): events indexed
// per (instance, group), and an instance's overlap the longest cut every group
// can serve there by the hit rules (kvbm/groups/hit_rules.h). Each scenario is
// checked against what a dense index makes of the same events, which counts a
// prefix that the groups cannot serve.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/events/event_group.h"
#include "kvbm/groups/group_key.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "router/router_test_util.h"
#include "test_util.h"

namespace kvbm::router {
namespace kv_indexer_groups_test {

using test::batch;

constexpr std::uint32_t kBlock = 16;

// The request: the chained hashes of `n` blocks of kBlock tokens.
std::vector<std::uint64_t> request(std::size_t n) {
  std::vector<std::uint64_t> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(kvbm::test::seq(i).value());
  return out;
}

// Group g's BlockStored of its blocks `blocks` (indices into keys[g]).
events::KvEvent stored(const std::vector<std::vector<std::uint64_t>>& keys,
                       const std::vector<KvCacheGroupSpec>& groups, std::size_t g,
                       const std::vector<std::size_t>& blocks, std::string medium = "GPU") {
  events::BlockStored s;
  for (const std::size_t j : blocks) s.block_hashes.push_back(keys[g].at(j));
  s.block_size = groups[g].tokens_per_block;
  s.medium = std::move(medium);
  const events::EventGroup eg = events::event_group(groups[g]);
  s.group_idx = eg.group_idx;
  s.kv_cache_spec_kind = eg.kind;
  s.kv_cache_spec_sliding_window = eg.sliding_window;
  return s;
}

std::vector<std::size_t> range(std::size_t first, std::size_t last) {
  std::vector<std::size_t> out;
  for (std::size_t j = first; j < last; ++j) out.push_back(j);
  return out;
}

KvIndexerOptions with_groups(std::vector<KvCacheGroupSpec> groups) {
  KvIndexerOptions o;
  o.groups = std::move(groups);
  return o;
}

const KvCacheGroupSpec kFull = KvCacheGroupSpec::full(GroupId{0}, kBlock, 4096, {0, 2});
// W = 64: the cut reads the blocks of the last 63 tokens, 4 blocks.
const KvCacheGroupSpec kSwa = KvCacheGroupSpec::sliding_window(GroupId{1}, 64, kBlock, 4096, {1});

TEST(KvIndexerGroups, OverlapStopsWhereTheWindowsTailIsMissing) {
  const std::vector<KvCacheGroupSpec> groups{kFull, kSwa};
  KvIndexer hybrid(with_groups(groups));
  KvIndexer dense;  // the same events, read as a dense model's
  const auto hashes = request(8);
  const auto keys = kvbm_group_keys(hashes, groups);
  // a: the full group's whole prefix, the window's blocks 0..3 only.
  // b: the full prefix and the tail 4..7.  c: full 0..5, window 0..7.
  const std::vector<std::vector<std::size_t>> full_blocks{range(0, 8), range(0, 8), range(0, 6)};
  const std::vector<std::vector<std::size_t>> swa_blocks{range(0, 4), range(4, 8), range(0, 8)};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string name(1, static_cast<char>('a' + i));
    const auto h = hybrid.add_instance(name);
    const auto d = dense.add_instance(name);
    const auto b =
        batch({stored(keys, groups, 0, full_blocks[i]), stored(keys, groups, 1, swa_blocks[i])});
    hybrid.apply(h, 0, b);
    dense.apply(d, 0, b);
  }
  const OverlapScores s = hybrid.overlaps(hashes);
  ASSERT_EQ(s.instances.size(), 3U);
  EXPECT_EQ(s.request_blocks, 8U);
  // a: at 8 blocks the window reads 4..7 (missing); the longest cut both serve is 4.
  EXPECT_EQ(s.instances[0].prefix_blocks, 4U);
  EXPECT_EQ(s.instances[1].prefix_blocks, 8U);
  EXPECT_EQ(s.instances[2].prefix_blocks, 6U);  // the window's 2..5 are there
  for (const auto& o : s.instances) EXPECT_EQ(o.per_tier[TierId::kG1], o.prefix_blocks);
  // The dense index counts the full group's keys alone: a looks as good as b.
  const OverlapScores plain = dense.overlaps(keys[0]);
  EXPECT_EQ(plain.instances[0].prefix_blocks, 8U);
  EXPECT_EQ(plain.instances[1].prefix_blocks, 8U);
  // The same answer from the keys themselves, and a cut capped below.
  const OverlapScores by_keys = hybrid.group_overlaps(keys, 7 * kBlock);
  // b holds the window's 4..7 only, and every cut below 8 reads a block below 4.
  EXPECT_EQ(by_keys.instances[1].prefix_blocks, 0U);
  EXPECT_EQ(by_keys.instances[2].prefix_blocks, 6U);
  EXPECT_EQ(hybrid.stats().group_mismatch_events, 0U);
}

TEST(KvIndexerGroups, RemovalsAndTiersArePerGroup) {
  const std::vector<KvCacheGroupSpec> groups{kFull, kSwa};
  KvIndexer index(with_groups(groups));
  const auto hashes = request(8);
  const auto keys = kvbm_group_keys(hashes, groups);
  const auto a = index.add_instance("a");
  // Full prefix in G1, the window's tail in G2 (offloaded).
  index.apply(a, 0,
              batch({stored(keys, groups, 0, range(0, 8)),
                     stored(keys, groups, 1, range(4, 8), events::kMediumCpu)}));
  OverlapScores s = index.overlaps(hashes);
  EXPECT_EQ(s.instances[0].prefix_blocks, 8U);
  // Positions 4..7 need the window's G2 blocks: counted in G2; 0..3 only G1's.
  EXPECT_EQ(s.instances[0].per_tier[TierId::kG1], 4U);
  EXPECT_EQ(s.instances[0].per_tier[TierId::kG2], 4U);
  // Group 1 drops its block 7 (its key is group 1's: group 0's block 7 stays).
  events::BlockRemoved r;
  r.block_hashes = {keys[1][7]};
  r.medium = events::kMediumCpu;
  r.group_idx = 1;
  index.apply(a, 1, batch({r}));
  s = index.overlaps(hashes);
  EXPECT_EQ(s.instances[0].prefix_blocks, 0U);  // no cut below 8 has the window's tail
  EXPECT_EQ(index.stats().removed_unknown_blocks, 0U);
  // The same removal named in group 0 finds nothing there.
  r.group_idx = 0;
  index.apply(a, 2, batch({r}));
  EXPECT_EQ(index.stats().removed_unknown_blocks, 1U);
  // Group 0's block 7 stayed: the window's block back, the whole prefix is.
  index.apply(a, 3, batch({stored(keys, groups, 1, {7}, events::kMediumCpu)}));
  EXPECT_EQ(index.overlaps(hashes).instances[0].prefix_blocks, 8U);
}

TEST(KvIndexerGroups, RecurrentStateNeedsASnapshotExactlyAtTheCut) {
  const auto state = KvCacheGroupSpec::recurrent_state(GroupId{1}, kBlock, 1 << 20, {1});
  const std::vector<KvCacheGroupSpec> groups{kFull, state};
  KvIndexer index(with_groups(groups));
  const auto hashes = request(8);
  const auto keys = kvbm_group_keys(hashes, groups);
  const auto a = index.add_instance("a");
  index.apply(a, 0, batch({stored(keys, groups, 0, range(0, 8)), stored(keys, groups, 1, {2, 5})}));
  // Snapshots after blocks 2 and 5: the longest cut is 6 blocks.
  EXPECT_EQ(index.overlaps(hashes).instances[0].prefix_blocks, 6U);
  EXPECT_EQ(index.group_overlaps(keys, 5 * kBlock).instances[0].prefix_blocks, 3U);
}

TEST(KvIndexerGroups, ChunkedLocalNeedsTheCutsChunkFromItsStart) {
  // C = 64 tokens: chunks of 4 blocks.
  const auto chunk = KvCacheGroupSpec::chunked_local(GroupId{1}, 64, kBlock, 4096, {1});
  const std::vector<KvCacheGroupSpec> groups{kFull, chunk};
  KvIndexer index(with_groups(groups));
  const auto hashes = request(8);
  const auto keys = kvbm_group_keys(hashes, groups);
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  // a: full 0..6, the chunk's 4..6: a cut at 7 reads chunk blocks 4..6.
  index.apply(a, 0,
              batch({stored(keys, groups, 0, range(0, 7)), stored(keys, groups, 1, range(4, 7))}));
  // b: the same without chunk block 5: the cut falls back to 5 (chunk block 4 alone).
  index.apply(b, 0, batch({stored(keys, groups, 0, range(0, 7)), stored(keys, groups, 1, {4, 6})}));
  const OverlapScores s = index.overlaps(hashes);
  EXPECT_EQ(s.instances[0].prefix_blocks, 7U);
  EXPECT_EQ(s.instances[1].prefix_blocks, 5U);
}

TEST(KvIndexerGroups, BlockSizesThatDifferCutOnTheirCommonMultiple) {
  // Full attention in 32-token blocks, a window in 16-token ones: hashes at 16
  // tokens, cuts on multiples of 32, answers in 16-token blocks.
  const auto full32 = KvCacheGroupSpec::full(GroupId{0}, 32, 8192, {0});
  const std::vector<KvCacheGroupSpec> groups{full32, kSwa};
  KvIndexer index(with_groups(groups));
  const auto hashes = request(8);  // 128 tokens: 4 full blocks, 8 window blocks
  const auto keys = kvbm_group_keys(hashes, groups);
  ASSERT_EQ(keys[0].size(), 4U);
  ASSERT_EQ(keys[1].size(), 8U);
  const auto a = index.add_instance("a");
  index.apply(a, 0,
              batch({stored(keys, groups, 0, range(0, 3)), stored(keys, groups, 1, range(0, 8))}));
  // Full serves 96 tokens; the window's tail for 96 (blocks 2..5) is there.
  EXPECT_EQ(index.overlaps(hashes).instances[0].prefix_blocks, 6U);
}

TEST(KvIndexerGroups, EventsOfNoKnownGroupAreCountedAndIgnored) {
  const std::vector<KvCacheGroupSpec> groups{kFull, kSwa};
  KvIndexer index(with_groups(groups));
  const auto hashes = request(4);
  const auto keys = kvbm_group_keys(hashes, groups);
  const auto a = index.add_instance("a");
  auto no_group = std::get<events::BlockStored>(stored(keys, groups, 0, range(0, 4)));
  no_group.group_idx.reset();
  auto unknown = std::get<events::BlockStored>(stored(keys, groups, 1, range(0, 4)));
  unknown.group_idx = 2;
  auto wrong_kind = std::get<events::BlockStored>(stored(keys, groups, 1, range(0, 4)));
  wrong_kind.kv_cache_spec_kind = "mamba";
  auto unnamed_kind = std::get<events::BlockStored>(stored(keys, groups, 1, range(0, 4)));
  unnamed_kind.kv_cache_spec_kind = "unknown";  // a kind kvbm has no row for: the id decides
  index.apply(a, 0, batch({no_group, unknown, wrong_kind, stored(keys, groups, 0, range(0, 4))}));
  EXPECT_EQ(index.stats().group_mismatch_events, 3U);
  EXPECT_EQ(index.overlaps(hashes).instances[0].prefix_blocks, 0U);  // no window block yet
  index.apply(a, 1, batch({unnamed_kind}));
  EXPECT_EQ(index.overlaps(hashes).instances[0].prefix_blocks, 4U);
  EXPECT_EQ(index.stats().group_mismatch_events, 3U);
}

TEST(KvIndexerGroups, OneFullGroupIsTheDenseIndex) {
  KvIndexer one(with_groups({kFull}));
  KvIndexer dense;
  EXPECT_FALSE(one.hybrid());
  const auto hashes = request(6);
  for (KvIndexer* index : {&one, &dense}) {
    const auto a = index->add_instance("a");
    events::BlockStored s;
    s.block_hashes.assign(hashes.begin(), hashes.begin() + 4);
    s.block_size = kBlock;
    s.medium = "GPU";
    s.group_idx = 0;  // ignored by a dense index
    index->apply(a, 0, batch({s}));
  }
  EXPECT_EQ(one.overlaps(hashes).instances[0].prefix_blocks, 4U);
  EXPECT_EQ(dense.overlaps(hashes).instances[0].prefix_blocks, 4U);
  kvbm::test::expect_usage_error([&] { (void)one.group_overlaps({}); }, {"dense", "overlaps"});
  KvIndexer two(with_groups({kFull, kSwa}));
  EXPECT_TRUE(two.hybrid());
  kvbm::test::expect_usage_error(
      [&] { (void)two.group_overlaps(std::vector<std::vector<std::uint64_t>>(1)); },
      {"1 key lists for 2 groups"});
  auto bad = kSwa;
  bad.id = GroupId{0};
  kvbm::test::expect_usage_error([&] { KvIndexer x(with_groups({kFull, bad})); }, {"id"});
}

TEST(KvIndexerGroups, TokenKeyedIndexOfVllmsEventsAndTheRouterOnIt) {
  // vLLM names a block of every group by the same engine hash (its group_idx
  // tells them apart) and sends the tokens: keyed by tokens, each group's
  // blocks are kvbm's chained hash of its own block size.
  const std::vector<KvCacheGroupSpec> groups{kFull, kSwa};
  KvIndexerOptions o = with_groups(groups);
  o.key = BlockKey::kTokens;
  KvIndexer index(o);
  std::vector<std::uint32_t> tokens(8 * kBlock);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i * 7);
  const std::vector<std::uint64_t> engine{101, 102, 103, 104, 105, 106, 107, 108};
  auto vllm_stored = [&](std::uint32_t g, std::size_t first, std::size_t last) {
    events::BlockStored s;
    s.block_hashes.assign(engine.begin() + static_cast<std::ptrdiff_t>(first),
                          engine.begin() + static_cast<std::ptrdiff_t>(last));
    if (first > 0) s.parent_block_hash = engine[first - 1];
    s.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(first * kBlock),
                       tokens.begin() + static_cast<std::ptrdiff_t>(last * kBlock));
    s.block_size = kBlock;
    s.medium = "GPU";
    s.group_idx = g;
    s.kv_cache_spec_kind = g == 0 ? "full_attention" : "sliding_window";
    return s;
  };
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  // a's window group lost its tail (evicted: vLLM frees a window's blocks
  // out of reach first); b keeps both.
  events::BlockRemoved gone;
  gone.block_hashes = {105, 106, 107, 108};
  gone.medium = "GPU";
  gone.group_idx = 1;
  index.apply(a, 0, batch({vllm_stored(0, 0, 8), vllm_stored(1, 0, 8), gone}));
  index.apply(b, 0, batch({vllm_stored(0, 0, 8), vllm_stored(1, 0, 8)}));
  const OverlapScores s = index.group_overlaps(group_token_keys(tokens, groups));
  EXPECT_EQ(s.instances[0].prefix_blocks, 4U);
  EXPECT_EQ(s.instances[1].prefix_blocks, 8U);
  // The full group's blocks are still a's: only group 1's were removed.
  KvRouterOptions ro;
  ro.block_size = kBlock;
  ro.load_weight = 0;
  KvRouter router(index, ro);
  const RouteDecision d = router.route_tokens(tokens);
  EXPECT_EQ(d.instance, b);
  EXPECT_EQ(d.overlap.prefix_blocks, 8U);
  EXPECT_EQ(d.tokens_to_compute, 0U);
  ro.block_size = 8;
  kvbm::test::expect_usage_error([&] { KvRouter r(index, ro); }, {"hash_block_size", "16"});
}

}  // namespace kv_indexer_groups_test
}  // namespace kvbm::router
