// Tests of the scheduler example (examples/scheduler/): a small run finishes
// every request with preemption and resume from G2, byte checks that would
// catch a wrong byte, and the block table's fork with copy-on-write of the
// tail only.

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/kv_block_manager.h"
#include "kvbm/token_block_sequence.h"
#include "scheduler/block_table.h"
#include "scheduler/kv_bytes.h"
#include "scheduler/scheduler.h"
#include "scheduler/setup.h"
#include "scheduler/workload.h"
#include "skip_or_fail.h"

namespace kvbm_example {
namespace scheduler_example_test {

using kvbm::G1;

void expect_idle_and_balanced(kvbm::KvBlockManager& kv) {
  kv.drain();
  EXPECT_EQ(kv.audit(), "");
  EXPECT_TRUE(kv.device().pool_counts().balanced());
  EXPECT_EQ(kv.device().pool_counts().in_use, 0u);
  if (kv.host() != nullptr) {
    EXPECT_TRUE(kv.host()->pool_counts().balanced());
    EXPECT_EQ(kv.host()->pool_counts().in_use, 0u);
  }
  if (kv.disk() != nullptr) {
    EXPECT_TRUE(kv.disk()->pool_counts().balanced());
    EXPECT_EQ(kv.disk()->pool_counts().in_use, 0u);
  }
  kv.shutdown();
  EXPECT_EQ(kv.audit(), "");
}

struct RunResult {
  SchedulerStats stats;
  bool bytes_checked = false;
};

RunResult run_small(std::uint64_t seed, bool move_bytes, std::size_t g3_blocks) {
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  ScratchDir dir;
  TierSizes tiers;
  tiers.g1_blocks = 40;  // the longest request is 30 blocks: heavy pressure
  tiers.g2_blocks = 256;
  tiers.g3_blocks = g3_blocks;
  tiers.move_bytes = move_bytes;
  auto kv = kvbm::KvBlockManager::build(make_config(tiers, dir.path()));
  WorkloadConfig w;
  w.requests = 40;
  w.seed = seed;
  w.beam_requests = 2;
  w.beams = 3;
  SchedulerConfig sc;
  sc.verify_bytes = move_bytes && kv->device_emulated();
  Scheduler scheduler(*kv, make_workload(w), sc);
  scheduler.run(200'000);
  EXPECT_TRUE(scheduler.done());
  EXPECT_EQ(scheduler.running(), 0u);
  EXPECT_EQ(scheduler.swapped(), 0u);
  EXPECT_EQ(scheduler.waiting(), 0u);
  expect_idle_and_balanced(*kv);
  return {scheduler.stats(), sc.verify_bytes};
}

TEST(SchedulerExampleTest, SmallRunPreemptsAndResumesFromG2) {
  const std::uint64_t seed = 5;
  const RunResult r = run_small(seed, /*move_bytes=*/true, /*g3_blocks=*/512);
  const SchedulerStats& s = r.stats;
  EXPECT_EQ(s.requests_finished, 40u);
  EXPECT_EQ(s.admitted, 40u);
  EXPECT_GT(s.preempted, 0u);
  EXPECT_EQ(s.resumed, s.preempted);  // every swapped sequence came back
  EXPECT_GT(s.resume_g2, 0u) << "resumed sequences should get blocks back from G2";
  EXPECT_EQ(s.resume_g1 + s.resume_g2 + s.resume_g3 + s.resume_recomputed, s.resume_blocks);
  EXPECT_LT(s.resume_recomputed, s.resume_blocks);
  EXPECT_GT(s.admit_g1, 0u) << "shared system prompts should be reused";
  EXPECT_EQ(s.admit_g1 + s.admit_g2 + s.admit_g3 + s.admit_computed, s.prompt_blocks);
  if (r.bytes_checked) {
    EXPECT_GT(s.blocks_verified, 0u);
  }
  EXPECT_EQ(s.verify_mismatches, 0u);
}

TEST(SchedulerExampleTest, BeamForksShareBlocksAndCopyOnlyTheTail) {
  const SchedulerStats s = run_small(11, /*move_bytes=*/true, /*g3_blocks=*/0).stats;
  // Two requests of three beams: each forks twice, and each prompt ends in a
  // partial block, so every beam but the last writer copies that tail once
  // (fewer when a beam is preempted before it writes: it drops its share).
  EXPECT_EQ(s.beam_forks, 4u);
  EXPECT_EQ(s.sequences_finished, 40u + 4u);
  EXPECT_GT(s.fork_shared_blocks, 0u);
  EXPECT_GE(s.cow_copies, 1u);
  EXPECT_LE(s.cow_copies, s.beam_forks);
  EXPECT_GT(s.cow_tokens, 0u);
  EXPECT_LT(s.cow_tokens, s.cow_copies * 16u);  // partial blocks only
  EXPECT_EQ(s.verify_mismatches, 0u);
}

TEST(SchedulerExampleTest, MetadataOnlyRunBalances) {
  const SchedulerStats s = run_small(3, /*move_bytes=*/false, /*g3_blocks=*/512).stats;
  EXPECT_EQ(s.requests_finished, 40u);
  EXPECT_GT(s.preempted, 0u);
  EXPECT_EQ(s.verify_mismatches, 0u);
}

// Algorithm 3 directly: a fork copies handles, not blocks; the first write to
// the shared tail copies that one block; the last holder writes in place.
TEST(BlockTableTest, ForkSharesAndCopyOnWriteCopiesOnlyTheTail) {
  ScratchDir dir;
  TierSizes tiers;
  tiers.g1_blocks = 16;
  tiers.g2_blocks = 16;
  tiers.g3_blocks = 0;
  auto kv = kvbm::KvBlockManager::build(make_config(tiers, dir.path()));
  if (!kv->device_emulated()) KVBM_SKIP_OR_FAIL("GPU present: writes G1 through host pointers");
  KvBytes bytes(&kv->device_layout());

  kvbm::TokenBlockSequence seq(kv->block_size());
  std::vector<kvbm::Token> prompt(2 * kv->block_size() + 5);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<kvbm::Token>(100 + i);
  seq.extend(prompt);
  ASSERT_EQ(seq.num_blocks(), 2u);

  BlockTable parent;
  {
    auto fresh = kv->device().allocate_blocks(3);
    ASSERT_TRUE(fresh.has_value());
    std::vector<kvbm::CompleteBlock<G1>> complete;
    for (std::size_t b = 0; b < 2; ++b) {
      const std::uint64_t p = b == 0 ? kFirstBlockSeed : seq.sequence_hashes()[b - 1].value();
      bytes.write_block((*fresh)[b].block_id(), p, seq.block_tokens(b));
      complete.push_back(std::move((*fresh)[b]).complete(seq.block(b)).value());
    }
    parent.append_full(kv->register_blocks(std::move(complete)));
    bytes.write_block((*fresh)[2].block_id(), seq.sequence_hashes()[1].value(), seq.tail_tokens());
    parent.set_tail(std::move((*fresh)[2]));
  }
  kv->drain();  // write-through to G2 holds references while it copies
  const auto in_use_before = kv->device().pool_counts().in_use;
  ASSERT_EQ(in_use_before, 3u);

  BlockTable beam1 = parent.fork();
  BlockTable beam2 = parent.fork();
  EXPECT_EQ(kv->device().pool_counts().in_use, in_use_before) << "a fork allocates nothing";
  for (std::size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(beam1.full()[b].block_id(), parent.full()[b].block_id());
    EXPECT_EQ(beam2.full()[b].block_id(), parent.full()[b].block_id());
    EXPECT_EQ(parent.full()[b].use_count(), 3u);
  }
  EXPECT_TRUE(parent.tail_shared());
  EXPECT_EQ(beam1.tail_id(), parent.tail_id());

  // Beam 1 writes first: it copies the tail, and only the tail.
  const kvbm::BlockId shared_tail = parent.tail_id();
  std::size_t copies = 0;
  auto cow = [&](BlockTable& t) {
    auto fresh = kv->device().allocate_blocks(1);
    ASSERT_TRUE(fresh.has_value());
    t.copy_on_write(std::move(fresh->front()), [&](kvbm::BlockId src, kvbm::BlockId dst) {
      bytes.copy_slots(src, dst, static_cast<std::uint32_t>(seq.tail_tokens().size()));
      ++copies;
    });
  };
  cow(beam1);
  EXPECT_EQ(copies, 1u);
  EXPECT_NE(beam1.tail_id(), shared_tail);
  EXPECT_EQ(kv->device().pool_counts().in_use, in_use_before + 1);
  EXPECT_TRUE(
      bytes.check_block(beam1.tail_id(), seq.sequence_hashes()[1].value(), seq.tail_tokens()));
  EXPECT_TRUE(parent.tail_shared());  // still shared by the parent and beam 2
  cow(beam2);
  EXPECT_EQ(copies, 2u);
  EXPECT_FALSE(parent.tail_shared());  // the parent writes its tail in place
  EXPECT_EQ(parent.tail_id(), shared_tail);
  EXPECT_EQ(parent.full()[0].use_count(), 3u);  // full blocks were never copied

  // Freeing: the full blocks stay cached, the tails return to the free pool.
  beam1.clear();
  beam2.clear();
  parent.clear();
  kv->drain();
  EXPECT_EQ(kv->device().pool_counts().in_use, 0u);
  EXPECT_EQ(kv->device().pool_counts().inactive, 2u);
  expect_idle_and_balanced(*kv);
}

TEST(KvBytesTest, CheckCatchesOneWrongByte) {
  ScratchDir dir;
  TierSizes tiers;
  tiers.g1_blocks = 4;
  tiers.g2_blocks = 4;
  tiers.g3_blocks = 0;
  auto kv = kvbm::KvBlockManager::build(make_config(tiers, dir.path()));
  if (!kv->device_emulated()) KVBM_SKIP_OR_FAIL("GPU present: writes G1 through host pointers");
  KvBytes bytes(&kv->device_layout());
  std::vector<kvbm::Token> tokens(kv->block_size());
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<kvbm::Token>(7 * i + 1);
  bytes.write_block(2, 42, tokens);
  EXPECT_TRUE(bytes.check_block(2, 42, tokens));
  EXPECT_FALSE(bytes.check_block(2, 43, tokens)) << "another parent means other bytes";
  std::vector<kvbm::Region> regions;
  kv->device_layout().append_regions(2, regions);
  auto* last = reinterpret_cast<std::uint8_t*>(regions.back().addr + regions.back().size - 1);
  *last ^= 0x01;
  EXPECT_FALSE(bytes.check_block(2, 42, tokens));
}

}  // namespace scheduler_example_test
}  // namespace kvbm_example
