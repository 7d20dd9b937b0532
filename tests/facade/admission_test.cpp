// Tests of kvbm::admit (kvbm/admission.h): a cold request, a prefix from G1
// and G2, a full prefix hit (nothing to allocate), a partial tail block, no
// room in G1, and misuse.

#include "kvbm/admission.h"

#include <numeric>

#include <gtest/gtest.h>

#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace admission_test {

using test::chain;

std::unique_ptr<KvBlockManager> make_kv(std::size_t g1, std::size_t g2) {
  KvBlockManagerConfig c;
  c.layout = {.num_layers = 2, .outer_dim = 2, .page_size = 4, .inner_dim = 64, .dtype_bytes = 2};
  c.device.blocks = g1;
  c.host.blocks = g2;
  c.move_bytes = false;
  c.pipeline.batch_config.flush_interval = std::chrono::milliseconds(1);
  return KvBlockManager::build(c);
}

// Computes and registers `hashes` in G1 (their offload to G2 is written through).
void compute(KvBlockManager& kv, const std::vector<SequenceHash>& hashes) {
  auto blocks = kv.device().allocate_blocks(hashes.size());
  ASSERT_TRUE(blocks);
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv.block_size()).value());
  }
  (void)kv.register_blocks(std::move(complete));
}

TEST(Admission, ColdRequestAllocatesEveryBlock) {
  auto kv = make_kv(8, 8);
  const auto hashes = chain(3, 1);
  auto a = admit(*kv, hashes, 4);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->prefix.empty());
  EXPECT_EQ(a->fresh.size(), 4u);
  EXPECT_EQ(a->counts.total(), 0u);
  a.reset();
  kv->shutdown();
  EXPECT_EQ(kv->audit(), "");
}

TEST(Admission, ReusesThePrefixFromG1AndG2) {
  auto kv = make_kv(8, 16);
  const auto hashes = chain(5, 2);
  compute(*kv, hashes);
  kv->drain();
  kv->device().reset_inactive_pool();    // all 5 now only in G2
  compute(*kv, {hashes[0], hashes[1]});  // 2 back in G1
  auto a = admit(*kv, std::span(hashes).first(4), 6);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->prefix.size(), 4u);
  EXPECT_EQ(a->counts.from(TierId::kG1), 2u);
  EXPECT_EQ(a->counts.from(TierId::kG2), 2u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(a->prefix[i].sequence_hash(), hashes[i]);
  EXPECT_EQ(a->fresh.size(), 2u);
  a.reset();
  kv->shutdown();
  EXPECT_EQ(kv->audit(), "");
}

TEST(Admission, FullPrefixHitAllocatesNothing) {
  auto kv = make_kv(4, 0);
  const auto hashes = chain(4, 3);
  compute(*kv, hashes);
  auto a = admit(*kv, hashes, hashes.size());  // G1 is full of the request's own blocks
  ASSERT_TRUE(a);
  EXPECT_EQ(a->prefix.size(), 4u);
  EXPECT_TRUE(a->fresh.empty());
  EXPECT_EQ(kv->device().pool_counts().in_use, 4u);
}

TEST(Admission, SequenceOverloadAddsABlockForThePartialTail) {
  auto kv = make_kv(8, 0);
  TokenBlockSequence seq(kv->block_size());
  std::vector<Token> tokens(10);  // 2 full blocks of 4 and a tail of 2
  std::iota(tokens.begin(), tokens.end(), 1);
  seq.extend(tokens);
  auto a = admit(*kv, seq);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->fresh.size(), 3u);
}

TEST(Admission, NoRoomInG1HoldsNothingAndKeepsThePrefixCached) {
  auto kv = make_kv(4, 0);
  const auto hashes = chain(2, 4);
  compute(*kv, hashes);
  auto other = kv->device().allocate_blocks(2);  // the 2 other blocks are busy
  ASSERT_TRUE(other);
  EXPECT_FALSE(admit(*kv, hashes, 3));
  EXPECT_EQ(kv->device().pool_counts().in_use, 2u);
  EXPECT_EQ(kv->device().match_blocks(hashes).size(), 2u);  // still cached
}

TEST(Admission, MisuseThrows) {
  auto kv = make_kv(4, 0);
  const auto hashes = chain(3, 5);
  EXPECT_THROW((void)admit(*kv, hashes, 2), UsageError);  // fewer than the full blocks
  EXPECT_THROW((void)admit(*kv, hashes, 5), UsageError);  // more than G1 holds
  EXPECT_EQ(kv->device().pool_counts().in_use, 0u);
}

}  // namespace admission_test
}  // namespace kvbm
