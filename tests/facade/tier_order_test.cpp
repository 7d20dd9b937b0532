// Tests of where KvBlockManager takes and puts blocks across tiers, in
// metadata-only mode (deterministic): onboarding and probe take each block
// from the fastest tier that holds it, an on-eviction copy that finds the
// block already below refreshes that copy, and the boundary's policies apply
// in on-eviction mode too.

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace tier_order_test {

KvBlockManagerConfig metadata_config(std::size_t g1, std::size_t g2, OffloadMode mode) {
  KvBlockManagerConfig c;
  c.layout = {.num_layers = 1, .outer_dim = 2, .page_size = 4, .inner_dim = 8, .dtype_bytes = 2};
  c.device.blocks = g1;
  c.host.blocks = g2;
  c.device_to_host = mode;
  c.host_to_disk = OffloadMode::kNone;
  c.move_bytes = false;
  return c;
}

// Registers `hashes` as computed G1 blocks and releases them front to back.
void compute(KvBlockManager& kv, const std::vector<SequenceHash>& hashes) {
  auto blocks = kv.device().allocate_blocks(hashes.size());
  ASSERT_TRUE(blocks.has_value());
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv.block_size()).value());
  }
  auto registered = kv.register_blocks(std::move(complete));
  for (auto& b : registered) ImmutableBlock<G1> release = std::move(b);
}

bool in_host(KvBlockManager& kv, const SequenceHash& h) {
  return kv.host()->registry()->presence<G2>(std::vector<SequenceHash>{h})[0];
}

TEST(TierOrderTest, OnboardTakesEachBlockFromTheFastestTierHoldingIt) {
  auto kv = KvBlockManager::build(metadata_config(4, 8, OffloadMode::kOnEviction));
  const auto h = test::chain(4, 1);
  compute(*kv, h);                  // G1: h0 h1 h2 h3 (h0 least recent)
  compute(*kv, test::chain(2, 2));  // G1 evicts h0, h1 to G2
  ASSERT_TRUE(in_host(*kv, h[0]) && in_host(*kv, h[1]));

  const OnboardCounts probed = kv->probe(h);
  EXPECT_EQ(probed.from(TierId::kG2), 2U);
  EXPECT_EQ(probed.from(TierId::kG1), 2U) << "after the first G1 miss, G1 must still be asked";
  OnboardHandle handle = kv->onboard(h);
  ASSERT_EQ(handle.wait(), TransferStatus::kDone);
  const OnboardCounts got = handle.counts();
  EXPECT_EQ(got.from(TierId::kG2), 2U);
  EXPECT_EQ(got.from(TierId::kG1), 2U);
  const auto blocks = handle.take_blocks();
  ASSERT_EQ(blocks.size(), 4U);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(blocks[i].sequence_hash(), h[i]) << i;
}

TEST(TierOrderTest, ProbeStopsAtTheFirstBlockNoTierHolds) {
  auto kv = KvBlockManager::build(metadata_config(4, 8, OffloadMode::kOnEviction));
  const auto h = test::chain(4, 3);
  compute(*kv, {h[0], h[2], h[3]});  // h1 is held nowhere
  const OnboardCounts c = kv->probe(h);
  EXPECT_EQ(c.total(), 1U);
  OnboardHandle handle = kv->onboard(h);
  EXPECT_EQ(handle.take_blocks().size(), 1U);
}

TEST(TierOrderTest, OnEvictionRefreshesACopyTheTierBelowAlreadyHolds) {
  auto kv = KvBlockManager::build(metadata_config(1, 3, OffloadMode::kOnEviction));
  const auto a = test::chain(1, 10)[0];
  const auto b = test::chain(1, 11)[0];
  const auto c = test::chain(1, 12)[0];
  const auto d = test::chain(1, 13)[0];
  const auto e = test::chain(1, 14)[0];
  compute(*kv, {a});
  compute(*kv, {b});  // G2: a
  compute(*kv, {c});  // G2: a b
  compute(*kv, {a});  // computed again in G1; G2: a b c
  compute(*kv, {d});  // G1 evicts a, which G2 holds: its copy becomes the most recent (b c a)
  compute(*kv, {e});  // G1 evicts d; G2 is full and evicts its least recent: b, not a
  EXPECT_TRUE(in_host(*kv, a)) << "the refreshed copy was evicted: it kept its old LRU position";
  EXPECT_FALSE(in_host(*kv, b));
  EXPECT_TRUE(in_host(*kv, c));
  EXPECT_TRUE(in_host(*kv, d));
}

TEST(TierOrderTest, MinFrequencyAppliesToOnEvictionCopies) {
  auto config = metadata_config(1, 4, OffloadMode::kOnEviction);
  config.device_to_host_policy.min_frequency = 2;
  auto kv = KvBlockManager::build(config);
  const auto once = test::chain(1, 20)[0];
  const auto twice = test::chain(1, 21)[0];
  compute(*kv, {once});
  compute(*kv, {twice});  // evicts `once`, seen once: not copied
  {
    auto hit = kv->device().match_blocks(std::vector<SequenceHash>{twice});  // seen again
    ASSERT_EQ(hit.size(), 1U);
  }
  compute(*kv, test::chain(1, 22));  // evicts `twice`: copied
  EXPECT_FALSE(in_host(*kv, once));
  EXPECT_TRUE(in_host(*kv, twice));
}

TEST(TierOrderTest, OnEvictionRefusesToCopyPresentBlocksAgain) {
  auto config = metadata_config(1, 4, OffloadMode::kOnEviction);
  config.device_to_host_policy.skip_present = false;
  try {
    (void)KvBlockManager::build(config);
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("KvBlockManagerConfig.device_to_host_policy.skip_present"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace tier_order_test
}  // namespace kvbm
