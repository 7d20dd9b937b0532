// tests/hybrid/hybrid_kv_block_manager_test.cpp: a hybrid model's groups through G1, G2 and G3,
// with real files: hits from the lower tiers onboard only what the cut reads per group, a
// group's onboarding that comes up short shrinks the cut, and a persistent G3 brings each
// group's blocks back after a restart, never another group's.

#include "kvbm/hybrid/hybrid_kv_block_manager.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "hybrid/hybrid_test_util.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "test_util.h"

namespace kvbm {
namespace hybrid_kv_block_manager_test {

using test::expect_clean;
using test::expect_served;
using test::hybrid_config;
using test::serve;
using test::TempDir;

constexpr std::size_t kPrompt = 40;  // blocks of 16 tokens

TierArray<std::size_t> tiers(std::size_t g1, std::size_t g2, std::size_t g3) {
  return TierArray<std::size_t>{{g1, g2, g3, 0}};
}

// Serves prompt A, then B and C (as long) so that A leaves G1 (48 blocks a group).
std::vector<SequenceHash> serve_a_then_evict(HybridKvBlockManager& m) {
  const auto a = test::chain(kPrompt, 1);
  EXPECT_EQ(serve(m, a), 0u);
  EXPECT_EQ(serve(m, test::chain(kPrompt, 2)), 0u);
  EXPECT_EQ(serve(m, test::chain(kPrompt, 3)), 0u);
  return a;
}

// Full attention and a 128-token window: A's hit comes from `from` (G2 or G3); the
// full group onboards the whole prefix, the window group only the window's 8 blocks.
void window_hit_from(TierId from, TierArray<std::size_t> blocks) {
  TempDir dir("hybrid");
  auto m = HybridKvBlockManager::build(
      hybrid_config({test::full(0), test::window(1)}, blocks, dir.path()));
  const auto a = serve_a_then_evict(*m);
  const std::size_t limit = kPrompt * test::kTokens - 1;
  const HybridProbe p = m->probe(a, limit);
  EXPECT_EQ(p.tokens, 624u);
  EXPECT_EQ(p.ranges[0], (BlockRange{0, 39}));
  EXPECT_EQ(p.ranges[1], (BlockRange{31, 39}));
  EXPECT_EQ(p.found[1][from], 8u);
  HybridOnboardHandle h = m->onboard(a, limit);
  const OnboardCounts full = h.counts(0);
  const OnboardCounts win = h.counts(1);
  EXPECT_EQ(full.total(), 39u);
  EXPECT_EQ(full.from(from), 39u) << "A left G1: every block comes from " << to_string(from);
  EXPECT_EQ(win.total(), 8u) << "only the window's tail is onboarded";
  EXPECT_EQ(win.from(from), 8u);
  PrefixHit<G1> hit = h.take_hit();
  EXPECT_EQ(hit.tokens, 624u);
  EXPECT_EQ(hit.blocks[0].size(), 39u);
  EXPECT_EQ(hit.blocks[1].size(), 8u);
  expect_served(*m, a, hit);
  HybridRequest<G1> r = m->core().start_request(std::move(hit));
  EXPECT_EQ(r.computed_tokens(), 624u);
  EXPECT_EQ(r.held_range(1), (BlockRange{31, 39}));
  m->core().finish(r);
  std::uint64_t window_onboarded = 0;  // the stats agree: 8 blocks of the window group moved
  const auto stats = m->stats();
  for (const auto& o : stats[1].onboarding.onboarded) window_onboarded += o.blocks;
  EXPECT_EQ(window_onboarded, 8u);
  expect_clean(*m);
}

TEST(HybridKvBlockManager, WindowHitFromG2OnboardsOnlyTheWindowsTail) {
  window_hit_from(TierId::kG2, tiers(48, 256, 0));
}

TEST(HybridKvBlockManager, WindowHitFromG3OnboardsOnlyTheWindowsTail) {
  window_hit_from(TierId::kG3, tiers(48, 48, 256));
}

// Full attention and recurrent state: the state group onboards exactly one snapshot.
TEST(HybridKvBlockManager, RecurrentStateOnboardsOneSnapshot) {
  TempDir dir("hybrid");
  auto m = HybridKvBlockManager::build(
      hybrid_config({test::full(0), test::state(1)}, tiers(48, 48, 256), dir.path()));
  const auto a = serve_a_then_evict(*m);
  HybridOnboardHandle h = m->onboard(a, kPrompt * test::kTokens - 1);
  EXPECT_EQ(h.planned_range(1), (BlockRange{38, 39}));
  EXPECT_EQ(h.counts(1).total(), 1u) << "one snapshot, the state at the cut";
  EXPECT_EQ(h.counts(1).from(TierId::kG3), 1u);
  EXPECT_EQ(h.counts(0).total(), 39u);
  PrefixHit<G1> hit = h.take_hit();
  EXPECT_EQ(hit.tokens, 624u);
  ASSERT_EQ(hit.blocks[1].size(), 1u);
  expect_served(*m, a, hit);
  EXPECT_EQ(m->group(1).device().pool_counts().in_use, 1u);
  hit = PrefixHit<G1>{};
  expect_clean(*m);
}

// Full attention and chunked local 64: the chunk group onboards the cut's chunk from its
// start (576..624: 3 blocks), from G3.
TEST(HybridKvBlockManager, ChunkedLocalOnboardsTheChunksHead) {
  TempDir dir("hybrid");
  auto chunk = KvCacheGroupSpec::chunked_local(GroupId{1}, 64, test::kTokens, 1024, {1});
  auto m = HybridKvBlockManager::build(
      hybrid_config({test::full(0), chunk}, tiers(48, 48, 256), dir.path()));
  const auto a = serve_a_then_evict(*m);
  HybridOnboardHandle h = m->onboard(a, kPrompt * test::kTokens - 1);
  EXPECT_EQ(h.planned_range(1), (BlockRange{36, 39}));
  EXPECT_EQ(h.counts(1).from(TierId::kG3), 3u);
  EXPECT_EQ(h.counts(1).total(), 3u);
  {
    const PrefixHit<G1> hit = h.take_hit();
    EXPECT_EQ(hit.tokens, 624u);
    expect_served(*m, a, hit);
  }
  expect_clean(*m);
}

// A group whose onboarding comes up short (its G1 has room for 4 of the window's 8
// blocks) shrinks the cut to what every group can serve from what arrived: here
// nothing, since a window needs all 8. No partial group is served; every block returns.
TEST(HybridKvBlockManager, AShortGroupShrinksTheCut) {
  TempDir dir("hybrid");
  auto m = HybridKvBlockManager::build(
      hybrid_config({test::full(0), test::window(1)}, tiers(48, 256, 0), dir.path()));
  const auto a = serve_a_then_evict(*m);
  auto taken = m->group(1).device().allocate_blocks(44);  // leaves 4 of 48
  ASSERT_TRUE(taken.has_value());
  HybridOnboardHandle h = m->onboard(a, kPrompt * test::kTokens - 1);
  EXPECT_EQ(h.planned_tokens(), 624u);
  EXPECT_EQ(h.counts(1).total(), 4u);
  EXPECT_EQ(h.counts(1).no_space, 4u);
  const PrefixHit<G1> hit = h.take_hit();
  EXPECT_EQ(hit.tokens, 0u) << "a window of 8 blocks cannot be served from 4";
  EXPECT_EQ(hit.held_blocks(), 0u);
  EXPECT_EQ(m->group(0).device().pool_counts().in_use, 0u);
  taken.reset();
  expect_clean(*m);
}

// A persistent G3: build, serve, shut down, build again on the same directory; each
// group's blocks come back from its own file, as hits from G3, with their bytes.
TEST(HybridKvBlockManager, RestartWarmG3ServesEachGroupsBlocks) {
  TempDir dir("hybrid");
  const auto config =
      hybrid_config({test::full(0), test::window(1)}, tiers(64, 64, 256), dir.path(), true);
  const auto a = test::chain(kPrompt, 1);
  {
    auto m = HybridKvBlockManager::build(config);
    serve(*m, a);
    expect_clean(*m);
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "group-0-full"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "group-1-swa128"));
  auto m = HybridKvBlockManager::build(config);
  ASSERT_TRUE(m->group(0).disk_recovery().has_value());
  EXPECT_EQ(m->group(0).disk_recovery()->recovered, kPrompt);
  EXPECT_EQ(m->group(1).disk_recovery()->recovered, kPrompt);
  HybridOnboardHandle h = m->onboard(a, kPrompt * test::kTokens - 1);
  EXPECT_EQ(h.counts(0).from(TierId::kG3), 39u);
  EXPECT_EQ(h.counts(1).from(TierId::kG3), 8u);
  {
    const PrefixHit<G1> hit = h.take_hit();
    EXPECT_EQ(hit.tokens, 624u);
    expect_served(*m, a, hit);
  }
  expect_clean(*m);
}

// Two groups of the same geometry see the same hashes. Group 0's G3 file, put in
// group 1's place, is not served for group 1: its namespace names group 0. And a
// manager whose groups share one key space still keeps them apart by key.
TEST(HybridKvBlockManager, AGroupsFileNeverServesAnotherGroup) {
  TempDir dir("hybrid");
  const auto config =
      hybrid_config({test::full(0), test::full(1)}, tiers(64, 64, 256), dir.path(), true);
  const auto a = test::chain(kPrompt, 1);
  {
    auto m = HybridKvBlockManager::build(config);
    serve(*m, a);
  }
  const auto file0 = dir.path() / "group-0-full" / "kvbm.slots";
  const auto file1 = dir.path() / "group-1-full" / "kvbm.slots";
  ASSERT_TRUE(std::filesystem::exists(file0));
  std::filesystem::copy_file(file0, file1, std::filesystem::copy_options::overwrite_existing);
  auto m = HybridKvBlockManager::build(config);
  EXPECT_EQ(m->group(0).disk_recovery()->recovered, kPrompt);
  EXPECT_EQ(m->group(1).disk_recovery()->recovered, 0u) << "group 0's blocks in group 1's file";
  const auto keys0 = m->core().group_hashes(0, a);
  for (const auto& where : m->group(1).locate(keys0)) EXPECT_FALSE(where.has_value());
  const HybridProbe p = m->probe(a);
  EXPECT_EQ(p.tokens, 0u) << "group 1 holds nothing: no cut";
  EXPECT_EQ(serve(*m, a), 0u);
  expect_clean(*m);
}

// Three threads serve six prompts over and over through small G1 pools: hits come from
// G1 and G2 while other threads commit, offload and evict; every pool balances after.
TEST(HybridKvBlockManager, ThreadsServeSharedPromptsThroughTheTiers) {
  TempDir dir("hybrid");
  auto m = HybridKvBlockManager::build(
      hybrid_config({test::full(0), test::window(1)}, tiers(96, 256, 0), dir.path()));
  std::atomic<std::size_t> hit_tokens{0};
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint32_t k = 0; k < 12; ++k) {
        hit_tokens += serve(*m, test::chain(20, 1 + (t + k) % 6), 48);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(hit_tokens.load(), 0u);
  const auto stats = m->stats();
  std::uint64_t from_g2 = 0;
  for (const auto& o : stats[0].onboarding.onboarded) from_g2 += o.blocks;
  EXPECT_GT(from_g2, 0u) << "six prompts of 20 blocks do not fit 96 G1 blocks: some come from G2";
  expect_clean(*m);
}

// With a publisher in the config every group's pools publish on their tier's medium and
// name their group, its kind and its window, as vLLM's events do.
TEST(HybridKvBlockManager, EventsNameEachGroupOnEachTier) {
  TempDir dir("hybrid");
  std::mutex mu;
  std::set<std::tuple<std::string, std::uint32_t, std::string, std::uint32_t>> stored;
  std::size_t without_group = 0;
  auto sink = std::make_shared<events::CallbackEventSink>(
      [&](std::uint64_t, const events::KvEventBatch& batch, std::span<const std::uint8_t>) {
        std::lock_guard lock(mu);
        for (const auto& e : batch.events) {
          const auto* s = std::get_if<events::BlockStored>(&e);
          if (s == nullptr) continue;
          if (!s->group_idx) {
            ++without_group;
            continue;
          }
          stored.emplace(s->medium, *s->group_idx, s->kv_cache_spec_kind.value_or(""),
                         s->kv_cache_spec_sliding_window.value_or(0));
        }
      });
  events::KvEventPublisherOptions options;
  options.background_flush = false;  // published by flush() below
  auto publisher = std::make_shared<events::KvEventPublisher>(sink, options);
  auto c = hybrid_config({test::full(0), test::window(1)}, tiers(48, 256, 0), dir.path());
  c.events = publisher;
  auto m = HybridKvBlockManager::build(std::move(c));
  EXPECT_EQ(serve(*m, test::chain(kPrompt, 1)), 0u);
  m->drain();
  publisher->flush();
  std::lock_guard lock(mu);
  EXPECT_EQ(without_group, 0u) << "every event of a hybrid model names its group";
  using Row = std::tuple<std::string, std::uint32_t, std::string, std::uint32_t>;
  for (const char* medium : {events::kMediumGpu, events::kMediumCpu}) {
    EXPECT_TRUE(stored.contains(Row{medium, 0, "full_attention", 0})) << medium;
    EXPECT_TRUE(stored.contains(Row{medium, 1, "sliding_window", 128})) << medium;
  }
  expect_clean(*m);
}

}  // namespace hybrid_kv_block_manager_test
}  // namespace kvbm
