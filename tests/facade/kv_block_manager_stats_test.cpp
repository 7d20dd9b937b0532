// Tests of KvBlockManager::stats() (kvbm/kv_block_manager_stats.h): per tier,
// boundary, copy path and onboarding, the numbers are exactly what the
// library's counters say (compared with the Prometheus series they back, and
// with counts worked out by hand), absent tiers are absent, metadata-only
// managers have no engine counts, and the boundaries' counts outlive shutdown.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "facade/facade_test_util.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace kv_block_manager_stats_test {

using test::chain;
using test::config;
using test::TempDir;

// The sum of the series of family `name` whose labels include all of `match`.
double series(const KvBlockManager& kv, const std::string& name,
              const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const auto& family : kv.metrics_registry()->Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      std::size_t matched = 0;
      for (const auto& l : m.label) {
        const auto it = match.find(l.name);
        if (it != match.end() && it->second == l.value) ++matched;
      }
      if (matched == match.size()) sum += m.counter.value;
    }
  }
  return sum;
}

// Allocates, stages and registers blocks for `hashes` in G1 (their bytes are
// not looked at here), then releases them: they stay cached (inactive).
void compute(KvBlockManager& kv, const std::vector<SequenceHash>& hashes) {
  auto blocks = kv.device().allocate_blocks(hashes.size());
  ASSERT_TRUE(blocks.has_value());
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv.block_size()).value());
  }
  (void)kv.register_blocks(std::move(complete));
}

// Every number of `s` equals the series it is read from.
void expect_equal_to_the_series(const KvBlockManager& kv, const KvBlockManagerStats& s) {
  for (const TierStats& t : s.tiers) {
    if (!t.pooled()) continue;  // a store's own counters (G4)
    const std::string pool(to_string(t.tier));
    SCOPED_TRACE(pool);
    EXPECT_EQ(static_cast<double>(t.counters.evictions),
              series(kv, "kvbm_evictions_total", {{"pool", pool}}));
    EXPECT_EQ(static_cast<double>(t.counters.registrations),
              series(kv, "kvbm_registrations_total", {{"pool", pool}}));
  }
  for (const BoundaryStats& b : s.boundaries) {
    const std::string path =
        std::string(to_string(b.upper)) + "_to_" + std::string(to_string(b.lower));
    SCOPED_TRACE(path);
    double transferred = 0;
    double enqueued = 0;
    for (const char* suffix : {"", "_on_eviction", "_explicit"}) {
      transferred += series(kv, "kvbm_offload_blocks_total",
                            {{"pipeline", path + suffix}, {"outcome", "transferred"}});
      enqueued += series(kv, "kvbm_offload_enqueued_blocks_total", {{"pipeline", path + suffix}});
    }
    EXPECT_EQ(static_cast<double>(b.counts.transferred), transferred);
    EXPECT_EQ(static_cast<double>(b.counts.enqueued), enqueued);
  }
  for (const TransferPathStats& p : s.transfers) {
    SCOPED_TRACE(p.path);
    EXPECT_EQ(static_cast<double>(p.counts.blocks),
              series(kv, "kvbm_transfer_blocks_total", {{"path", p.path}}));
    EXPECT_EQ(static_cast<double>(p.counts.bytes),
              series(kv, "kvbm_transfer_bytes_total", {{"path", p.path}}));
    EXPECT_EQ(static_cast<double>(p.counts.failed_blocks),
              series(kv, "kvbm_transfer_failed_blocks_total", {{"path", p.path}}));
  }
  EXPECT_EQ(static_cast<double>(s.onboarding.hits),
            series(kv, "kvbm_onboard_blocks_total", {{"tier", "G1"}, {"outcome", "hit"}}));
  for (const OnboardSourceStats& o : s.onboarding.onboarded) {
    EXPECT_EQ(static_cast<double>(o.blocks),
              series(kv, "kvbm_onboard_blocks_total",
                     {{"tier", std::string(to_string(o.tier))}, {"outcome", "onboarded"}}));
  }
  EXPECT_EQ(static_cast<double>(s.onboarding.failed),
            series(kv, "kvbm_onboard_blocks_total", {{"outcome", "failed"}}));
  EXPECT_EQ(static_cast<double>(s.onboarding.cancelled),
            series(kv, "kvbm_onboard_cancelled_total", {}));
}

// G1 4, G2 4, G3 16 blocks, on-eviction on both boundaries: computing three
// chains of 4 moves the first down to G3 and the second to G2 (worked out in
// KvBlockManagerTest.OnEvictionCopiesOnlyWhatLeavesTheUpperTier).
TEST(KvBlockManagerStats, CountsEveryTierBoundaryAndPathAsTheSeriesDo) {
  TempDir dir;
  auto c = config(4, 4, 16, dir.path());
  c.device_to_host = OffloadMode::kOnEviction;
  c.host_to_disk = OffloadMode::kOnEviction;
  auto kv = KvBlockManager::build(c);
  const auto a = chain(4, 11);
  compute(*kv, a);
  compute(*kv, chain(4, 12));  // evicts a: G1 -> G2
  compute(*kv, chain(4, 13));  // evicts the second: G1 -> G2, which evicts a: G2 -> G3
  kv->drain();

  KvBlockManagerStats s = kv->stats();
  ASSERT_EQ(s.tiers.size(), 3U);
  EXPECT_EQ(s.tiers[0].tier, TierId::kG1);
  EXPECT_EQ(s.tiers[2].tier, TierId::kG3);
  const PoolCounts g3 = kv->disk()->pool_counts();
  EXPECT_EQ(s.tier(TierId::kG3)->blocks.total, 16U);
  EXPECT_EQ(s.tier(TierId::kG3)->blocks.inactive, g3.inactive);
  EXPECT_EQ(s.tier(TierId::kG3)->blocks.inactive, 4U);
  EXPECT_EQ(s.tier(TierId::kG2)->blocks.inactive, 4U);
  EXPECT_EQ(s.tier(TierId::kG1)->blocks.in_use, 0U);
  EXPECT_EQ(s.tier(TierId::kG1)->counters.evictions, 8U);
  EXPECT_EQ(s.tier(TierId::kG2)->counters.evictions, 4U);
  EXPECT_EQ(s.tier(TierId::kG3)->counters.evictions, 0U);

  ASSERT_EQ(s.boundaries.size(), 2U);
  const BoundaryStats* down = s.boundary(TierId::kG1);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->lower, TierId::kG2);
  EXPECT_EQ(down->mode, OffloadMode::kOnEviction);
  EXPECT_EQ(down->counts.enqueued, 8U);
  EXPECT_EQ(down->counts.transferred, 8U);
  EXPECT_EQ(down->counts.copy_failed, 0U);
  EXPECT_EQ(s.boundary(TierId::kG2)->counts.transferred, 4U);

  // Engines: G1 <-> G2 and G2 -> G3, G3 -> G1 (the disk read; the bounce
  // engine around it is not counted twice).
  std::vector<std::string> paths;
  for (const auto& p : s.transfers) paths.push_back(p.path);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{"G1_to_G2", "G2_to_G1", "G2_to_G3", "G3_to_G1"}));
  EXPECT_EQ(s.transfer("G1_to_G2")->counts.blocks, 8U);
  EXPECT_EQ(s.transfer("G1_to_G2")->counts.bytes, 8U * kv->block_bytes());
  EXPECT_EQ(s.transfer("G2_to_G3")->counts.blocks, 4U);
  EXPECT_EQ(s.transfer("G3_to_G1")->counts.blocks, 0U);
  EXPECT_EQ(s.transfer("nowhere"), nullptr);
  // By tier pair: the same engines, named by copy_path_name().
  EXPECT_EQ(s.transfer(TierId::kG1, TierId::kG2), s.transfer("G1_to_G2"));
  EXPECT_EQ(s.transfer(TierId::kG3, TierId::kG1), s.transfer("G3_to_G1"));
  EXPECT_EQ(s.transfer(TierId::kG1, TierId::kG3), nullptr);
  expect_equal_to_the_series(*kv, s);

  // Onboarding a from G3: four blocks copied up.
  auto h = kv->onboard(a);
  ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
  h = OnboardHandle();
  kv->drain();
  s = kv->stats();
  EXPECT_EQ(s.onboarding.hits, 0U);
  EXPECT_EQ(s.onboarded_from(TierId::kG3), 4U);
  EXPECT_EQ(s.onboarded_from(TierId::kG2), 0U);
  ASSERT_EQ(s.onboarding.onboarded.size(), 2U);
  EXPECT_EQ(s.onboarding.failed, 0U);
  EXPECT_EQ(s.transfer("G3_to_G1")->counts.blocks, 4U);
  expect_equal_to_the_series(*kv, s);

  // A second onboarding finds a in G1.
  auto again = kv->onboard(a);
  ASSERT_EQ(again.wait(), TransferStatus::kDone);
  again = OnboardHandle();
  EXPECT_EQ(kv->stats().onboarding.hits, 4U);
  kv->shutdown();
}

TEST(KvBlockManagerStats, MetadataOnlyCountsTheBoundaryButNoEngine) {
  auto c = config(8, 8, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  compute(*kv, chain(6, 3));
  kv->drain();
  const KvBlockManagerStats s = kv->stats();
  EXPECT_EQ(s.tiers.size(), 2U);
  EXPECT_EQ(s.tier(TierId::kG3), nullptr);
  ASSERT_EQ(s.boundaries.size(), 1U);
  EXPECT_EQ(s.boundaries[0].mode, OffloadMode::kWriteThrough);
  EXPECT_EQ(s.boundaries[0].counts.enqueued, 6U);
  EXPECT_EQ(s.boundaries[0].counts.transferred, 6U);
  EXPECT_GE(s.boundaries[0].counts.batches, 1U);
  EXPECT_TRUE(s.transfers.empty()) << "metadata-only engines move and count nothing";
  EXPECT_EQ(s.tier(TierId::kG2)->blocks.inactive, 6U);
  expect_equal_to_the_series(*kv, s);
  kv->shutdown();
}

TEST(KvBlockManagerStats, AManagerOfG1AloneHasNothingBelow) {
  auto kv = KvBlockManager::build(config(4, 0, 0));
  compute(*kv, chain(2, 1));
  const KvBlockManagerStats s = kv->stats();
  ASSERT_EQ(s.tiers.size(), 1U);
  EXPECT_EQ(s.tiers[0].blocks.total, 4U);
  EXPECT_EQ(s.tiers[0].blocks.inactive, 2U);
  EXPECT_EQ(s.tiers[0].blocks.reset, 2U);
  EXPECT_EQ(s.tiers[0].counters.registrations, 2U);
  EXPECT_TRUE(s.boundaries.empty());
  EXPECT_EQ(s.boundary(TierId::kG1), nullptr);
  EXPECT_TRUE(s.transfers.empty());
  EXPECT_TRUE(s.onboarding.onboarded.empty());
  kv->shutdown();
}

// shutdown() takes an on-eviction copier's series out of the registry; its
// counts stay in stats().
TEST(KvBlockManagerStats, OnEvictionCountsOutliveShutdown) {
  auto c = config(4, 8, 0);
  c.move_bytes = false;
  c.device_to_host = OffloadMode::kOnEviction;
  auto kv = KvBlockManager::build(c);
  compute(*kv, chain(4, 1));
  compute(*kv, chain(4, 2));  // evicts the first chain into G2
  const OffloadCounts before = kv->stats().boundary(TierId::kG1)->counts;
  EXPECT_EQ(before.transferred, 4U);
  kv->shutdown();
  EXPECT_EQ(series(*kv, "kvbm_offload_blocks_total", {{"pipeline", "G1_to_G2_on_eviction"}}), 0.0)
      << "the copier's series left the registry";
  EXPECT_EQ(kv->stats().boundary(TierId::kG1)->counts, before);
}

// A disk read that waits until the test lets it go (then reads for real).
std::mutex g_gate_mu;
std::condition_variable g_gate_cv;
bool g_gate_open = false;
std::atomic<int> g_reads_waiting{0};

std::int64_t gated_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  g_reads_waiting.fetch_add(1);
  {
    std::unique_lock lock(g_gate_mu);
    g_gate_cv.wait(lock, [] { return g_gate_open; });
  }
  return io::real_syscalls().pread(fd, buf, count, offset);
}

// An onboarding abandoned while its copies run ends cancelled, and is counted.
TEST(KvBlockManagerStats, CountsAnAbandonedOnboardingAsCancelled) {
  TempDir dir;
  auto c = config(4, 4, 16, dir.path());
  c.device_to_host = OffloadMode::kOnEviction;
  c.host_to_disk = OffloadMode::kOnEviction;
  c.disk_io_engine = DiskIoEngine::kThreadPool;  // the gate below stalls the pool's preads
  auto kv = KvBlockManager::build(c);
  const auto a = chain(4, 21);
  compute(*kv, a);
  compute(*kv, chain(4, 22));
  compute(*kv, chain(4, 23));  // a is in G3 only
  kv->drain();
  io::SyscallTable table = io::real_syscalls();
  table.pread = gated_pread;
  {
    const io::ScopedSyscallOverride gate(table);
    {
      std::lock_guard lock(g_gate_mu);
      g_gate_open = false;
    }
    g_reads_waiting = 0;
    {
      OnboardHandle h = kv->onboard(a);
      ASSERT_TRUE(test::eventually([] { return g_reads_waiting.load() > 0; }));
      // Dropped while its disk reads wait: abandoned, cancelled when they end.
    }
    {
      std::lock_guard lock(g_gate_mu);
      g_gate_open = true;
    }
    g_gate_cv.notify_all();
    kv->drain();  // waits for the onboarding
  }
  const KvBlockManagerStats s = kv->stats();
  EXPECT_EQ(s.onboarding.cancelled, 1U);
  EXPECT_EQ(s.onboarded_from(TierId::kG3), 0U) << "a cancelled prefix is not counted as onboarded";
  expect_equal_to_the_series(*kv, s);
  kv->shutdown();
  EXPECT_EQ(kv->audit(), "");
}

}  // namespace kv_block_manager_stats_test
}  // namespace kvbm
