// Tests of KvBlockManager (kvbm/kv_block_manager.h): configuration errors,
// write-through and on-eviction offload across G1 -> G2 -> G3, onboarding
// from each tier with every byte compared, cancellation, no space, copy
// failures, shutdown with work in flight, and a randomized concurrent test.

#include "kvbm/kv_block_manager.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "facade/facade_test_util.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/storage/storage.h"
#include "test_util.h"

namespace kvbm {
namespace kv_block_manager_test {

using test::Bytes;
using test::chain;

using test::config;
using test::read_block;
using test::small_layout;
using test::TempDir;
using test::write_block;

// The expected bytes of the block with `hash`.
Bytes pattern(const SequenceHash& h, std::size_t n) {
  Bytes out(n);
  std::mt19937_64 rng(h.value() * 0x9E3779B97F4A7C15ULL + h.position());
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// Allocates, fills with pattern(), and registers blocks for `hashes` in G1.
std::vector<ImmutableBlock<G1>> compute(KvBlockManager& kv,
                                        const std::vector<SequenceHash>& hashes) {
  auto blocks = kv.device().allocate_blocks(hashes.size());
  EXPECT_TRUE(blocks.has_value());
  if (!blocks) return {};
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (kv.config().move_bytes) {
      write_block(kv.device_layout(), (*blocks)[i].block_id(),
                  pattern(hashes[i], kv.block_bytes()));
    }
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv.block_size()).value());
  }
  return kv.register_blocks(std::move(complete));
}

void expect_clean(KvBlockManager& kv) {
  EXPECT_EQ(kv.audit(), "");
  EXPECT_TRUE(kv.device().pool_counts().balanced());
  EXPECT_EQ(kv.device().pool_counts().in_use, 0u);
  if (kv.host()) {
    EXPECT_EQ(kv.host()->pool_counts().in_use, 0u);
  }
  if (kv.disk()) {
    EXPECT_EQ(kv.disk()->pool_counts().in_use, 0u);
  }
}

void expect_error(KvBlockManagerConfig c, const std::string& needle) {
  try {
    auto kv = KvBlockManager::build(std::move(c));
    ADD_FAILURE() << "expected a UsageError mentioning " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KvBlockManagerConfigTest, InvalidOptionsAreNamed) {
  TempDir dir;
  expect_error(config(0, 4, 0), "device.blocks");
  expect_error(config(4, 0, 4, dir.path()), "KvBlockManagerConfig.disk");
  expect_error(config(4, 4, 4), "disk_directory");
  auto c = config(4, 4, 0);
  c.device.bytes = 4096;
  expect_error(c, "device: set blocks or bytes, not both");
  c = config(4, 4, 0);
  c.host = {.blocks = 0, .bytes = 100};
  expect_error(c, "host.bytes");
  c = config(4, 4, 0);
  c.layout.page_size = 0;
  expect_error(c, "KvBlockManagerConfig.layout");
  c = config(4, 4, 4, dir.path());
  c.bounce_blocks = 0;
  expect_error(c, "bounce_blocks");
  c = config(4, 4, 0);
  c.pipeline.batch_config.min_batch_size = 100;
  expect_error(c, "KvBlockManagerConfig.pipeline");
  c = config(4, 4, 4, dir.path());
  c.host_to_disk_pipeline = PipelineConfig{};
  c.host_to_disk_pipeline->space_wait = std::chrono::milliseconds(-1);
  expect_error(c, "KvBlockManagerConfig.host_to_disk_pipeline");
  c = config(4, 4, 0);
  c.device_to_host_policy.min_frequency = 99;
  expect_error(c, "device_to_host_policy.min_frequency");
  c = config(4, 4, 4, dir.path() / "missing");
  expect_error(c, "disk_directory");
  EXPECT_THROW((void)parse_offload_mode("sometimes"), UsageError);
  EXPECT_EQ(parse_offload_mode("on_eviction"), OffloadMode::kOnEviction);
}

TEST(KvBlockManagerConfigTest, BytesAreRoundedDownToBlocks) {
  auto c = config(0, 0, 0);
  c.device.bytes = 10 * small_layout().block_bytes() + 100;
  c.host.bytes = 3 * small_layout().block_bytes();
  auto kv = KvBlockManager::build(c);
  EXPECT_EQ(kv->device().total_blocks(), 10u);
  ASSERT_NE(kv->host(), nullptr);
  EXPECT_EQ(kv->host()->total_blocks(), 3u);
  EXPECT_EQ(kv->disk(), nullptr);
  EXPECT_TRUE(kv->device_emulated() || cuda_device_available());
}

// Write-through all the way down, then G1 and G2 emptied: onboarding comes
// from G3 through the bounce buffer, and every byte is compared.
// pool<T>() is the tier's pool by marker (null where the config has none), the same pool as
// device(), host() and disk(); onboarding counts the prefix per tier id.
TEST(KvBlockManagerTest, PoolByMarkerAndCountsByTierId) {
  auto kv = KvBlockManager::build(config(8, 8, 0));
  ASSERT_NE(kv->pool<G1>(), nullptr);
  EXPECT_EQ(kv->pool<G1>(), &kv->device());
  EXPECT_EQ(kv->pool<G2>(), kv->host());
  EXPECT_NE(kv->pool<G2>(), nullptr);
  EXPECT_EQ(kv->pool<G3>(), nullptr);
  EXPECT_EQ(kv->pool<G2>()->total_blocks(), 8u);
  const auto hashes = chain(4);
  { auto held = compute(*kv, hashes); }
  kv->drain();
  kv->pool<G1>()->reset_inactive_pool();  // G1 forgets them; G2 holds them
  OnboardHandle h = kv->onboard(hashes);
  ASSERT_EQ(h.wait(), TransferStatus::kDone);
  const OnboardCounts c = h.counts();
  EXPECT_EQ(c.from(TierId::kG2), 4u);
  EXPECT_EQ(c.found, (TierArray<std::size_t>{{0, 4, 0, 0}}));
  EXPECT_EQ(c.total(), 4u);
  h = OnboardHandle{};
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, EndToEndOnboardFromDiskComparesEveryByte) {
  TempDir dir;
  auto kv = KvBlockManager::build(config(32, 24, 40, dir.path()));
  const auto hashes = chain(20, 7);
  {
    auto g1 = compute(*kv, hashes);
    ASSERT_EQ(g1.size(), 20u);
  }
  kv->drain();
  EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(20, true));
  EXPECT_EQ(test::present(*kv->disk(), hashes), std::vector<bool>(20, true));
  // Overwrite G2's copies so that a read from G2 would be caught, then drop them.
  EXPECT_EQ(kv->device().reset_inactive_pool(), 20u);
  EXPECT_EQ(kv->host()->reset_inactive_pool(), 20u);
  std::memset(reinterpret_cast<void*>(kv->host_layout().block_region(0).addr), 0xAB,
              kv->host_layout().block_region(0).size);

  auto h = kv->onboard(hashes);
  EXPECT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  const auto counts = h.counts();
  EXPECT_EQ(counts.from(TierId::kG1), 0u);
  EXPECT_EQ(counts.from(TierId::kG2), 0u);
  EXPECT_EQ(counts.from(TierId::kG3), 20u);
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 20u);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].sequence_hash(), hashes[i]);
    EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
              pattern(hashes[i], kv->block_bytes()))
        << "block " << i;
  }
  blocks.clear();
  // Now G1 holds them again: a second onboarding is all hits.
  auto h2 = kv->onboard(hashes);
  EXPECT_EQ(h2.wait(), TransferStatus::kDone);
  EXPECT_EQ(h2.counts().from(TierId::kG1), 20u);
  EXPECT_EQ(h2.take_blocks().size(), 20u);
  kv->shutdown();
  expect_clean(*kv);
}

// A prefix spread over the tiers: some in G1, then G2, then G3, then G2; the
// onboarding brings back the whole prefix in order.
TEST(KvBlockManagerTest, OnboardsAPrefixInterleavedAcrossTiers) {
  TempDir dir;
  auto c = config(16, 16, 16, dir.path());
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(12, 3);
  compute(*kv, hashes);  // released at once
  kv->drain();
  kv->device().reset_inactive_pool();
  kv->host()->reset_inactive_pool();
  // G3 holds all 12. Put blocks 4..7 back into G2 and blocks 0..1 into G1 by onboarding them.
  {
    auto h = kv->onboard(std::span(hashes).first(8));
    ASSERT_EQ(h.wait(), TransferStatus::kDone);
  }
  kv->drain();
  kv->device().reset_inactive_pool();  // now only G3 (all) and nothing else
  {
    auto h = kv->onboard(std::span(hashes).first(2));
    ASSERT_EQ(h.wait(), TransferStatus::kDone);
    auto b = h.take_blocks();
    ASSERT_EQ(b.size(), 2u);
  }  // 0, 1 inactive in G1
  const auto probed = kv->probe(hashes);
  auto h = kv->onboard(hashes);
  ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  const auto counts = h.counts();
  EXPECT_EQ(probed.from(TierId::kG1), counts.from(TierId::kG1));
  EXPECT_EQ(probed.from(TierId::kG2), counts.from(TierId::kG2));
  EXPECT_EQ(probed.from(TierId::kG3), counts.from(TierId::kG3));
  EXPECT_EQ(counts.from(TierId::kG1), 2u);
  EXPECT_EQ(counts.from(TierId::kG2) + counts.from(TierId::kG3), 10u);
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(blocks[i].sequence_hash(), hashes[i]);
    EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
              pattern(hashes[i], kv->block_bytes()));
  }
  blocks.clear();
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, OnboardStopsAtTheFirstBlockNoTierHolds) {
  auto c = config(16, 16, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(6, 1);
  compute(*kv, {hashes[0], hashes[1], hashes[2]});
  kv->drain();
  kv->device().reset_inactive_pool();
  {
    EXPECT_EQ(kv->probe(hashes).from(TierId::kG2), 3u);
    EXPECT_EQ(kv->probe(hashes).total(), 3u);
    auto h = kv->onboard(hashes);
    EXPECT_EQ(h.wait(), TransferStatus::kDone);
    EXPECT_EQ(h.counts().from(TierId::kG2), 3u);
    EXPECT_EQ(h.take_blocks().size(), 3u);
  }
  kv->shutdown();
  expect_clean(*kv);
}

// The prefix walk asks the tiers in chunks (16 positions, then 32, ...) and
// asks nothing after a chunk with a miss: a miss on either side of a chunk's
// edge, with blocks held after it, ends the prefix there, for probe and onboard.
TEST(KvBlockManagerTest, PrefixEndsAtTheFirstMissOnEitherSideOfTheWalksChunkEdges) {
  for (const std::size_t miss : {15u, 16u, 17u, 47u, 48u, 49u}) {
    SCOPED_TRACE(miss);
    auto c = config(128, 128, 0);
    c.move_bytes = false;
    auto kv = KvBlockManager::build(c);
    const auto hashes = chain(60, 7);
    std::vector<SequenceHash> held;
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      if (i != miss) held.push_back(hashes[i]);
    }
    compute(*kv, held);
    kv->drain();
    kv->device().reset_inactive_pool();  // every held block in G2 only
    {
      auto h = kv->onboard(std::span(hashes).first(5));  // 0..4 in G1 too
      ASSERT_EQ(h.wait(), TransferStatus::kDone);
    }
    EXPECT_EQ(kv->probe(hashes).from(TierId::kG1), 5u);
    EXPECT_EQ(kv->probe(hashes).total(), miss);
    auto h = kv->onboard(hashes);
    ASSERT_EQ(h.wait(), TransferStatus::kDone);
    EXPECT_EQ(h.counts().from(TierId::kG1), 5u);
    EXPECT_EQ(h.counts().from(TierId::kG2), miss - 5);
    auto blocks = h.take_blocks();
    ASSERT_EQ(blocks.size(), miss);
    for (std::size_t i = 0; i < miss; ++i) EXPECT_EQ(blocks[i].sequence_hash(), hashes[i]);
    blocks.clear();
    kv->shutdown();
    expect_clean(*kv);
  }
}

// The facade feeds a frequency sketch only when a min_frequency policy or a
// multi-level LRU pool reads it.
TEST(KvBlockManagerTest, FrequencyIsTrackedOnlyWhenSomethingReadsIt) {
  auto plain = KvBlockManager::build(config(16, 16, 0));
  EXPECT_EQ(plain->device().registry()->frequency_tracker(), nullptr);
  plain->shutdown();

  auto c = config(16, 16, 0);
  c.device_to_host_policy.min_frequency = 2;
  auto kv = KvBlockManager::build(c);
  const auto& tracker = kv->device().registry()->frequency_tracker();
  ASSERT_NE(tracker, nullptr);
  const auto hashes = chain(3, 9);
  compute(*kv, hashes);
  EXPECT_GE(tracker->estimate(hashes[0].value()), 1u);  // registration fed it
  kv->shutdown();

  auto m = config(16, 16, 0);
  m.host.eviction = EvictionPolicy::kMultiLevelLru;
  auto leveled = KvBlockManager::build(m);
  EXPECT_NE(leveled->host()->registry()->frequency_tracker(), nullptr);
  leveled->shutdown();
}

TEST(KvBlockManagerTest, OnboardCutsThePrefixWhereG1IsFull) {
  auto c = config(4, 16, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(4, 2);
  compute(*kv, hashes);
  kv->drain();
  kv->device().reset_inactive_pool();
  auto held = kv->device().allocate_blocks(2);  // 2 of 4 G1 blocks held
  ASSERT_TRUE(held);
  auto h = kv->onboard(hashes);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().from(TierId::kG2), 2u);
  EXPECT_EQ(h.counts().no_space, 2u);
  ASSERT_TRUE(h.error().has_value()) << "a prefix cut for want of G1 space says so";
  EXPECT_EQ(h.error()->kind, ErrorKind::kNoSpace) << h.error();
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1].sequence_hash(), hashes[1]);
  blocks.clear();
  held.reset();
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, CancelledOnboardReleasesEverything) {
  auto c = config(8, 8, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(6, 5);
  compute(*kv, hashes);
  kv->drain();
  kv->device().reset_inactive_pool();
  compute(*kv, {hashes[0], hashes[1]});  // 2 in G1 (inactive), 6 in G2
  auto h = kv->onboard(hashes);
  // Metadata-only copies complete at once, so this cancel comes after the
  // end: it reports false and the blocks stay available.
  EXPECT_FALSE(h.cancel());
  EXPECT_EQ(h.take_blocks().size(), 6u);
  expect_clean(*kv);
  kv->shutdown();
}

// Blocks 0..3 of `hashes` in G2 (and G3), blocks 4..7 in G3 only, nothing in G1.
std::unique_ptr<KvBlockManager> g2_then_g3(const std::filesystem::path& dir,
                                           const std::vector<SequenceHash>& hashes,
                                           std::shared_ptr<Clock> clock = nullptr) {
  auto c = config(16, 16, 16, dir);
  c.clock = std::move(clock);
  c.disk_io_engine = DiskIoEngine::kThreadPool;  // test::ReadGate holds its preads
  auto kv = KvBlockManager::build(c);
  compute(*kv, hashes);
  kv->drain();
  kv->device().reset_inactive_pool();
  kv->host()->reset_inactive_pool();
  compute(*kv, {hashes.begin(), hashes.begin() + 4});
  kv->drain();
  kv->device().reset_inactive_pool();
  const auto probed = kv->probe(hashes);
  EXPECT_EQ(probed.from(TierId::kG2), 4u);
  EXPECT_EQ(probed.from(TierId::kG3), 4u);
  return kv;
}

// take_arrived() while the G3 reads are held: the G2 part is the prefix, with
// its bytes; the G3 part is abandoned, its G1 targets stay out of use until
// the reads end, and then go back to the reset pool, never registered.
TEST(KvBlockManagerTest, TakeArrivedHandsBackWhatArrivedAndQuarantinesTheRest) {
  TempDir dir;
  const auto hashes = chain(8, 31);
  auto kv = g2_then_g3(dir.path(), hashes);
  std::vector<ImmutableBlock<G1>> blocks;
  {
    test::ReadGate gate;
    auto h = kv->onboard(hashes);
    ASSERT_TRUE(test::eventually([&] { return test::ReadGate::reads() > 0 && h.arrived() == 4; }));
    blocks = h.take_arrived();
    EXPECT_EQ(h.status(), TransferStatus::kDone);
    ASSERT_EQ(blocks.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(blocks[i].sequence_hash(), hashes[i]);
      EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
                pattern(hashes[i], kv->block_bytes()));
    }
    const OnboardCounts c = h.counts();
    EXPECT_EQ(c.from(TierId::kG2), 4u);
    EXPECT_EQ(c.abandoned, 4u);
    EXPECT_FALSE(h.error().has_value()) << "an explicit cut is no error";
    EXPECT_TRUE(h.take_blocks().empty()) << "the prefix is handed over once";
    const PoolCounts g1 = kv->device().pool_counts();
    EXPECT_TRUE(g1.balanced());
    EXPECT_EQ(g1.in_use, 8u) << "4 handed back, 4 targets quarantined while their reads run";
    test::ReadGate::open();
    ASSERT_TRUE(test::eventually([&] { return kv->device().pool_counts().in_use == 4u; }));
  }
  kv->drain();
  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_FALSE(test::present(kv->device(), {hashes[i]})[0]) << "abandoned block " << i;
  }
  EXPECT_EQ(kv->probe(hashes).from(TierId::kG3), 4u) << "G3 still holds the abandoned part";
  blocks.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// A deadline on the manager's (manual) clock: a wait blocks until the clock
// reaches it, then the onboarding ends with what arrived (the G2 part), the G3
// part abandoned, error kTimeout; status() asked after the deadline cuts too.
TEST(KvBlockManagerTest, ADeadlineHandsBackWhatArrivedByThen) {
  TempDir dir;
  const auto hashes = chain(8, 33);
  auto clock = std::make_shared<ManualClock>();
  auto kv = g2_then_g3(dir.path(), hashes, clock);
  test::ReadGate gate;
  const OnboardOptions load_all{.mode = OnboardMode::kLoadAll,
                                .deadline = std::chrono::milliseconds(30)};
  auto h = kv->onboard(hashes, load_all);
  ASSERT_TRUE(test::eventually([&] { return test::ReadGate::reads() > 0 && h.arrived() == 4; }));
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_EQ(h.wait(), TransferStatus::kDone);
    returned = true;
  });
  ASSERT_TRUE(test::eventually([&] { return clock->waiters() > 0; }));
  clock->advance(std::chrono::milliseconds(29));
  EXPECT_EQ(h.status(), TransferStatus::kTransferring) << "cut before its deadline";
  EXPECT_FALSE(returned.load());
  clock->advance(std::chrono::milliseconds(1));
  waiter.join();
  ASSERT_TRUE(h.error().has_value());
  EXPECT_EQ(h.error()->kind, ErrorKind::kTimeout) << h.error();
  EXPECT_EQ(h.counts().abandoned, 4u);
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
              pattern(hashes[i], kv->block_bytes()));
  }
  // A second onboarding, never waited on: status() after its deadline cuts it.
  auto late = kv->onboard(hashes, load_all);
  clock->advance(std::chrono::milliseconds(31));
  EXPECT_EQ(late.status(), TransferStatus::kDone);
  EXPECT_EQ(late.take_blocks().size(), 4u) << "the G2 part, from G1 now";
  test::ReadGate::open();
  kv->drain();
  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_FALSE(test::present(kv->device(), {hashes[i]})[0]) << "abandoned block " << i;
  }
  blocks.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// Cut before anything arrived, dropped at once, and a drain() while the reads
// are held: the drain waits for the quarantined copies, then every pool balances.
TEST(KvBlockManagerTest, DrainWaitsForTheCopiesOfACutOnboarding) {
  TempDir dir;
  const auto hashes = chain(8, 32);
  auto kv = g2_then_g3(dir.path(), hashes);
  kv->host()->reset_inactive_pool();  // all 8 in G3 only
  test::ReadGate gate;
  {
    auto h = kv->onboard(hashes);
    ASSERT_TRUE(test::eventually([] { return test::ReadGate::reads() > 0; }));
    EXPECT_TRUE(h.take_arrived().empty());
    EXPECT_EQ(h.counts().abandoned, 8u);
  }
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    kv->drain();
    drained = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(drained.load()) << "drain() returned while a cut onboarding's reads were out";
  test::ReadGate::open();
  drainer.join();
  EXPECT_EQ(kv->device().pool_counts().in_use, 0u);
  kv->shutdown();
  expect_clean(*kv);
}

// A G3 slot corrupted behind the library's back: its block fails the
// checksum, is not registered in G1, and the prefix ends before it.
TEST(KvBlockManagerTest, CorruptDiskBlockIsNeverServed) {
  TempDir dir;
  auto kv = KvBlockManager::build(config(16, 8, 16, dir.path()));
  const auto hashes = chain(6, 9);
  compute(*kv, hashes);
  kv->drain();
  kv->device().reset_inactive_pool();
  kv->host()->reset_inactive_pool();
  // Find which G3 slot holds block 3 and flip a byte of it on disk.
  auto g3 = kv->disk()->match_blocks(hashes);
  ASSERT_EQ(g3.size(), 6u);
  const BlockId slot = g3[3].block_id();
  g3.clear();
  std::filesystem::path file;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) file = e.path();
  ASSERT_FALSE(file.empty());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    const auto slot_bytes = std::filesystem::file_size(file) / 16;
    f.seekp(static_cast<std::streamoff>(slot * slot_bytes + 10));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5A);
    f.seekp(static_cast<std::streamoff>(slot * slot_bytes + 10));
    f.write(&byte, 1);
  }
  auto h = kv->onboard(hashes);
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  ASSERT_TRUE(h.error().has_value());
  EXPECT_EQ(h.error()->kind, ErrorKind::kCorrupt) << h.error();
  EXPECT_EQ(h.counts().failed, 1u);
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 3u);  // 0, 1, 2
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
              pattern(hashes[i], kv->block_bytes()));
  }
  EXPECT_FALSE(test::present(kv->device(), {hashes[3]})[0]) << "a corrupt block was registered";
  EXPECT_TRUE(test::present(kv->device(), {hashes[4]})[0]);  // intact copies after it are kept
  blocks.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// On-eviction: nothing moves at registration; a G1 block is copied to G2
// when an allocation evicts it, and G2 -> G3 likewise.
TEST(KvBlockManagerTest, OnEvictionCopiesOnlyWhatLeavesTheUpperTier) {
  TempDir dir;
  auto c = config(4, 4, 16, dir.path());
  c.device_to_host = OffloadMode::kOnEviction;
  c.host_to_disk = OffloadMode::kOnEviction;
  auto kv = KvBlockManager::build(c);
  const auto a = chain(4, 11);
  const auto b = chain(4, 12);
  const auto d = chain(4, 13);
  compute(*kv, a);
  kv->drain();
  EXPECT_EQ(test::present(*kv->host(), a), std::vector<bool>(4, false));
  compute(*kv, b);  // evicts a from G1 -> G2
  EXPECT_EQ(test::present(*kv->host(), a), std::vector<bool>(4, true));
  EXPECT_EQ(test::present(*kv->disk(), a), std::vector<bool>(4, false));
  compute(*kv, d);  // evicts b -> G2, which evicts a -> G3
  EXPECT_EQ(test::present(*kv->host(), b), std::vector<bool>(4, true));
  EXPECT_EQ(test::present(*kv->disk(), a), std::vector<bool>(4, true));
  auto h = kv->onboard(a);
  ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  EXPECT_EQ(h.counts().from(TierId::kG3), 4u);
  auto blocks = h.take_blocks();
  ASSERT_EQ(blocks.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(read_block(kv->device_layout(), blocks[i].block_id()),
              pattern(a[i], kv->block_bytes()));
  }
  blocks.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// On-eviction above, write-through below: what the eviction copies into G2
// goes on to G3 through the G2 -> G3 pipeline.
TEST(KvBlockManagerTest, OnEvictionIntoG2ThenWriteThroughToG3) {
  TempDir dir;
  auto c = config(4, 8, 16, dir.path());
  c.move_bytes = false;
  c.device_to_host = OffloadMode::kOnEviction;
  c.host_to_disk = OffloadMode::kWriteThrough;
  auto kv = KvBlockManager::build(c);
  const auto a = chain(4, 21);
  compute(*kv, a);
  compute(*kv, chain(4, 22));  // evicts a into G2
  kv->drain();
  EXPECT_EQ(test::present(*kv->host(), a), std::vector<bool>(4, true));
  EXPECT_EQ(test::present(*kv->disk(), a), std::vector<bool>(4, true));
  kv->shutdown();
  expect_clean(*kv);
}

// Write-through holding its queued blocks: G1 turns over faster than the
// copies start (a precondition holds them back), yet every block reaches G2
// and G3, and G1 pushes back instead of evicting a block still to be copied.
TEST(KvBlockManagerTest, WriteThroughHoldingQueuedBlocksLosesNone) {
  TempDir dir;
  auto c = config(8, 32, 32, dir.path());
  c.move_bytes = false;
  c.pipeline.hold_queued_blocks = true;
  auto kv = KvBlockManager::build(c);
  auto forward_pass = std::make_shared<HostEvent>();
  std::vector<std::vector<SequenceHash>> requests;
  for (std::uint32_t r = 0; r < 4; ++r) {
    requests.push_back(chain(4, 40 + r));
    auto blocks = kv->device().allocate_blocks(4);
    if (!blocks) {  // G1 is full of blocks waiting for their copy
      EXPECT_EQ(kv->device().pool_counts().in_use, 8u);
      forward_pass->signal();
      kv->drain();
      blocks = kv->device().allocate_blocks(4);
    }
    ASSERT_TRUE(blocks.has_value()) << "request " << r;
    std::vector<CompleteBlock<G1>> staged;
    for (std::size_t i = 0; i < 4; ++i) {
      staged.push_back(std::move((*blocks)[i]).stage(requests[r][i], kv->block_size()).value());
    }
    kv->register_blocks(std::move(staged), forward_pass);  // dropped at once
  }
  forward_pass->signal();
  kv->drain();
  for (const auto& hashes : requests) {
    EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(4, true));
    EXPECT_EQ(test::present(*kv->disk(), hashes), std::vector<bool>(4, true));
  }
  kv->shutdown();
  expect_clean(*kv);
}

// The G2 -> G3 pipeline takes its own config when given one: here it holds
// small batches for an hour of the manager's clock (KvBlockManagerConfig::clock).
TEST(KvBlockManagerTest, HostToDiskPipelineTakesItsOwnConfig) {
  TempDir dir;
  auto c = config(8, 16, 16, dir.path());
  c.move_bytes = false;
  PipelineConfig disk;
  disk.batch_config.min_batch_size = 64;
  disk.batch_config.flush_interval = std::chrono::hours(1);
  // The test moves the clock in steps while the pipelines work: no policy call
  // may time out on that clock (a timed-out block is filtered, never copied).
  constexpr auto kNever = std::chrono::hours(1'000'000);
  disk.policy_timeout = kNever;
  c.pipeline.policy_timeout = kNever;
  c.host_to_disk_pipeline = disk;
  auto clock = std::make_shared<ManualClock>();
  c.clock = clock;  // time moves only when the test says so
  auto kv = KvBlockManager::build(c);
  const auto a = chain(4, 51);
  compute(*kv, a);
  // G1 -> G2 uses the shared config: its 1 ms flush interval passes when the
  // clock is told to move.
  ASSERT_TRUE(test::eventually([&] {
    clock->advance(std::chrono::milliseconds(2));
    return test::present(*kv->host(), a) == std::vector<bool>(4, true);
  }));
  // 2 ms of the clock later (and any wall time), G2 -> G3's hour has not passed.
  EXPECT_EQ(test::present(*kv->disk(), a), std::vector<bool>(4, false));
  // An hour on (each time: the blocks may reach the G2 -> G3 batcher after an
  // advance, and their hour starts then), the batch is flushed.
  ASSERT_TRUE(test::eventually([&] {
    clock->advance(std::chrono::hours(1));
    return test::present(*kv->disk(), a) == std::vector<bool>(4, true);
  }));
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, NoneModeMovesNothingButExplicitOffloadDoes) {
  auto c = config(8, 8, 0);
  c.move_bytes = false;
  c.device_to_host = OffloadMode::kNone;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(3, 4);
  auto g1 = compute(*kv, hashes);
  kv->drain();
  EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(3, false));
  auto h = kv->offload(g1);
  ASSERT_TRUE(h.valid());
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(3, true));
  g1.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// Registering through device() (the G1 BlockManager) writes through as
// KvBlockManager::register_blocks does: both paths reach G2 and G3, in one
// call or block by block.
TEST(KvBlockManagerTest, RegisteringThroughDeviceWritesThroughLikeTheFacade) {
  enum class Path { kFacade, kDeviceBatch, kDeviceOne };
  for (const Path path : {Path::kFacade, Path::kDeviceBatch, Path::kDeviceOne}) {
    SCOPED_TRACE(static_cast<int>(path));
    auto c = config(8, 8, 8);
    c.move_bytes = false;
    auto kv = KvBlockManager::build(c);
    const auto hashes = chain(3, 11);
    auto blocks = kv->device().allocate_blocks(hashes.size());
    ASSERT_TRUE(blocks.has_value());
    std::vector<CompleteBlock<G1>> complete;
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv->block_size()).value());
    }
    std::vector<ImmutableBlock<G1>> g1;
    if (path == Path::kFacade) {
      g1 = kv->register_blocks(std::move(complete));
    } else if (path == Path::kDeviceBatch) {
      g1 = kv->device().register_blocks(std::move(complete));
    } else {
      for (auto& b : complete) g1.push_back(kv->device().register_block(std::move(b)));
    }
    kv->drain();
    EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(3, true));
    EXPECT_EQ(test::present(*kv->disk(), hashes), std::vector<bool>(3, true));
    g1.clear();
    kv->shutdown();
    expect_clean(*kv);
  }
}

// Blocks enqueued in the offload pipeline named `pipeline` (e.g. "G1_to_G2").
double enqueued(KvBlockManager& kv, std::string_view pipeline) {
  for (const auto& family : kv.metrics_registry()->Collect()) {
    if (family.name != "kvbm_offload_enqueued_blocks_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "pipeline" && label.value == pipeline) return metric.counter.value;
      }
    }
  }
  return -1;
}

// The facade's registration goes down once, with its precondition: the
// device() hook does not enqueue it a second time without one.
TEST(KvBlockManagerTest, FacadeRegistrationIsEnqueuedOnceWithItsPrecondition) {
  auto c = config(8, 8, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(2, 12);
  auto blocks = kv->device().allocate_blocks(hashes.size());
  ASSERT_TRUE(blocks.has_value());
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv->block_size()).value());
  }
  auto done = std::make_shared<HostEvent>();
  auto g1 = kv->register_blocks(std::move(complete), done);
  EXPECT_EQ(enqueued(*kv, "G1_to_G2"), 2.0);
  EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(2, false));
  done->signal();
  kv->drain();
  EXPECT_EQ(test::present(*kv->host(), hashes), std::vector<bool>(2, true));
  EXPECT_EQ(enqueued(*kv, "G1_to_G2"), 2.0);
  g1.clear();
  kv->shutdown();
  expect_clean(*kv);
}

// Onboarded copies are registered in G1 without the hook: they are not
// written back down to the tier they came from.
TEST(KvBlockManagerTest, OnboardedBlocksAreNotWrittenBackDown) {
  auto c = config(4, 8, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  const auto hashes = chain(4, 13);
  compute(*kv, hashes);  // dropped at once: inactive in G1
  kv->drain();
  EXPECT_EQ(enqueued(*kv, "G1_to_G2"), 4.0);
  EXPECT_EQ(kv->device().reset_inactive_pool(), 4u);
  auto h = kv->onboard(hashes);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().from(TierId::kG2), 4u);
  EXPECT_EQ(h.take_blocks().size(), 4u);
  kv->drain();
  EXPECT_EQ(enqueued(*kv, "G1_to_G2"), 4.0);
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, ShutdownWithWorkInFlightLeavesEveryPoolBalanced) {
  TempDir dir;
  auto c = config(256, 128, 128, dir.path());
  c.pipeline.batch_config.flush_interval = std::chrono::seconds(10);  // stays in the batcher
  c.pipeline.batch_config.min_batch_size = 64;
  auto kv = KvBlockManager::build(c);
  std::vector<TransferHandle> handles;
  for (std::uint32_t r = 0; r < 20; ++r) {
    auto blocks = compute(*kv, chain(3, 100 + r));
    handles.push_back(kv->offload(blocks));
  }
  kv->shutdown();
  for (auto& h : handles) EXPECT_TRUE(is_terminal(h.status()));
  expect_clean(*kv);
}

// Enqueues, cancels, evicts and onboards from several threads at once.
TEST(KvBlockManagerTest, RandomizedConcurrentUse) {
  const std::uint32_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  TempDir dir;
  auto c = config(48, 32, 64, dir.path());
  c.move_bytes = !cuda_device_available();
  auto kv = KvBlockManager::build(c);
  double scale = 1.0;
  if (const char* s = std::getenv("KVBM_STRESS_SCALE")) scale = std::atof(s);
  const int rounds = static_cast<int>(200 * scale) + 20;
  std::atomic<std::size_t> mismatches{0};
  auto worker = [&](std::uint32_t tid) {
    std::mt19937 rng(seed + tid);
    for (int r = 0; r < rounds; ++r) {
      const auto hashes =
          chain(static_cast<std::uint32_t>(1 + rng() % 6), static_cast<std::uint32_t>(rng() % 24));
      auto h = kv->onboard(hashes);
      if (rng() % 5 == 0) {
        h.cancel();
        continue;
      }
      h.wait();
      auto have = h.take_blocks();
      if (c.move_bytes) {
        for (std::size_t i = 0; i < have.size(); ++i) {
          if (read_block(kv->device_layout(), have[i].block_id()) !=
              pattern(hashes[i], kv->block_bytes())) {
            mismatches++;
          }
        }
      }
      const std::size_t missing = hashes.size() - have.size();
      if (missing > 0) {
        auto more = kv->device().allocate_blocks(missing);
        if (more) {
          std::vector<CompleteBlock<G1>> complete;
          for (std::size_t i = 0; i < missing; ++i) {
            const auto& hh = hashes[have.size() + i];
            if (c.move_bytes) {
              write_block(kv->device_layout(), (*more)[i].block_id(),
                          pattern(hh, kv->block_bytes()));
            }
            complete.push_back(std::move((*more)[i]).stage(hh, kv->block_size()).value());
          }
          auto reg = kv->register_blocks(std::move(complete));
          if (rng() % 4 == 0) kv->offload(reg).cancel();
        }
      }
      if (rng() % 16 == 0) kv->device().reset_inactive_pool();
      if (rng() % 32 == 0 && kv->host()) kv->host()->reset_inactive_pool();
    }
  };
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < 3; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  kv->drain();
  EXPECT_EQ(mismatches.load(), 0u);
  kv->shutdown();
  expect_clean(*kv);
}

TEST(KvBlockManagerTest, RegisteringWithTokensPutsThemInTheG1StoredEvents) {
  std::vector<events::BlockStored> stored;
  auto sink = std::make_shared<events::CallbackEventSink>(
      [&stored](std::uint64_t, const events::KvEventBatch& b, std::span<const std::uint8_t>) {
        for (const auto& e : b.events) {
          if (const auto* s = std::get_if<events::BlockStored>(&e)) stored.push_back(*s);
        }
      });
  events::KvEventPublisherOptions po;
  po.background_flush = false;
  events::KvEventPublisher publisher(sink, po);
  KvBlockManagerConfig c = config(8, 0, 0);
  c.move_bytes = false;
  c.device_listeners.push_back(publisher.listener(events::kMediumGpu, small_layout().page_size));
  auto kv = KvBlockManager::build(std::move(c));
  const std::uint32_t bs = kv->block_size();
  const auto hashes = chain(3);
  std::vector<std::vector<Token>> tokens(3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    for (std::uint32_t t = 0; t < bs; ++t) tokens[i].push_back(1000 * (i + 1) + t);
  }
  const std::vector<std::span<const Token>> spans(tokens.begin(), tokens.end());

  auto stage = [&](std::size_t n) {
    auto blocks = kv->device().allocate_blocks(n);
    std::vector<CompleteBlock<G1>> out;
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(std::move((*blocks)[i]).stage(hashes[i], bs).value());
    return out;
  };
  // One span short: refused, nothing registered, the blocks stay with the caller.
  auto staged = stage(3);
  EXPECT_THROW((void)kv->register_blocks(std::move(staged), std::span(spans).first(2)), UsageError);
  EXPECT_EQ(staged.size(), 3u);
  staged.clear();
  auto held = kv->register_blocks(stage(3), spans);
  ASSERT_EQ(held.size(), 3u);
  publisher.flush();
  ASSERT_EQ(stored.size(), 1u);  // one chain, coalesced
  EXPECT_EQ(stored[0].block_hashes.size(), 3u);
  EXPECT_EQ(stored[0].block_size, bs);
  std::vector<std::uint32_t> all;
  for (const auto& t : tokens) all.insert(all.end(), t.begin(), t.end());
  EXPECT_EQ(stored[0].token_ids, all);
  held.clear();
  expect_clean(*kv);
}

}  // namespace kv_block_manager_test
}  // namespace kvbm
