// Tests of KvBlockManager::transfer_costs() and report_prefill()
// (kvbm/transfer_costs.h): every local copy path is measured on the config's
// clock where its batches complete (G3 reads made slow by a syscall override
// that moves a ManualClock), exported as gauges, and the prefill estimate
// comes from the config until the engine reports.

#include "kvbm/transfer_costs.h"

#include <atomic>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "facade/facade_test_util.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace transfer_costs_test {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using test::config;
using test::TempDir;

// G3 reads that take `delay` of the test's ManualClock each (set per test).
std::atomic<ManualClock*> slow_clock{nullptr};
std::atomic<std::int64_t> slow_ns{0};
std::int64_t slow_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  if (ManualClock* c = slow_clock.load()) c->advance(nanoseconds(slow_ns.load()));
  return io::real_syscalls().pread(fd, buf, count, offset);
}

// Installs slow_pread for its lifetime, moving `clock` by `delay` per read.
class SlowReads {
 public:
  SlowReads(ManualClock& clock, nanoseconds delay) : override_(table()) {
    slow_ns = delay.count();
    slow_clock = &clock;
  }
  ~SlowReads() { slow_clock = nullptr; }
  SlowReads(const SlowReads&) = delete;
  SlowReads& operator=(const SlowReads&) = delete;

 private:
  static io::SyscallTable table() {
    io::SyscallTable t = io::real_syscalls();
    t.pread = &slow_pread;
    return t;
  }
  io::ScopedSyscallOverride override_;
};

// A config on a ManualClock whose pipelines never wait on it: batches of one
// block go at once, no policy times out.
KvBlockManagerConfig clocked(std::size_t g1, std::size_t g2, std::size_t g3,
                             const std::filesystem::path& dir,
                             const std::shared_ptr<ManualClock>& clock) {
  auto c = config(g1, g2, g3, dir);
  c.clock = clock;
  c.pipeline.batch_config.min_batch_size = 1;
  c.pipeline.policy_timeout = std::chrono::hours(1'000'000);
  return c;
}

std::optional<double> gauge(KvBlockManager& kv, const std::string& name, const std::string& path,
                            const std::string& quantile = "") {
  for (const auto& family : kv.metrics_registry()->Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool path_ok = path.empty(), quantile_ok = quantile.empty();
      for (const auto& l : m.label) {
        path_ok = path_ok || (l.name == "path" && l.value == path);
        quantile_ok = quantile_ok || (l.name == "quantile" && l.value == quantile);
      }
      if (path_ok && quantile_ok) return m.gauge.value;
    }
  }
  return std::nullopt;
}

void expect_clean(KvBlockManager& kv) {
  EXPECT_EQ(kv.audit(), "");
  EXPECT_TRUE(kv.device().pool_counts().balanced());
  EXPECT_EQ(kv.device().pool_counts().in_use, 0u);
  if (kv.host() != nullptr) {
    EXPECT_EQ(kv.host()->pool_counts().in_use, 0u);
  }
  if (kv.disk() != nullptr) {
    EXPECT_EQ(kv.disk()->pool_counts().in_use, 0u);
  }
}

// Each path is unknown until a batch of it completes; G3 -> G1 then costs
// what the slow reads moved the clock by, and its gauges say the same.
TEST(TransferCostsTest, EveryLocalPathIsMeasuredOnTheClock) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  SlowReads slow(*clock, milliseconds(3));
  auto kv = KvBlockManager::build(clocked(16, 16, 32, dir.path(), clock));
  TransferCosts costs = kv->transfer_costs();
  EXPECT_EQ(costs.block_bytes, kv->block_bytes());
  for (const auto& [from, to] : {std::pair{TierId::kG1, TierId::kG2},
                                 {TierId::kG2, TierId::kG1},
                                 {TierId::kG2, TierId::kG3},
                                 {TierId::kG3, TierId::kG1}}) {
    ASSERT_NE(costs.path(from, to), nullptr) << copy_path_name(from, to);
    EXPECT_FALSE(costs.path(from, to)->model.known) << copy_path_name(from, to);
  }
  EXPECT_EQ(costs.path(TierId::kG4, TierId::kG2), nullptr);  // no G4
  EXPECT_EQ(costs.paths.size(), 4u);

  const auto hashes = test::prefix(7, 4);
  test::compute(*kv, hashes);
  kv->drain();
  costs = kv->transfer_costs();
  EXPECT_TRUE(costs.path(TierId::kG1, TierId::kG2)->model.known);
  EXPECT_TRUE(costs.path(TierId::kG2, TierId::kG3)->model.known);
  EXPECT_FALSE(costs.path(TierId::kG3, TierId::kG1)->model.known);

  kv->device().reset_inactive_pool();
  kv->host()->reset_inactive_pool();
  {
    auto h = kv->onboard(hashes);
    ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
    ASSERT_EQ(h.counts().from(TierId::kG3), 4u);
  }
  costs = kv->transfer_costs();
  const TransferPathCost* g3 = costs.path(TierId::kG3, TierId::kG1);
  ASSERT_TRUE(g3->model.known);
  ASSERT_EQ(g3->sizes.size(), 1u);
  EXPECT_EQ(g3->path, "G3_to_G1");
  EXPECT_EQ(g3->sizes[0].block_bytes, kv->block_bytes());
  EXPECT_EQ(g3->sizes[0].batches, 1u);
  // At least one read per block, each 3 ms of the clock.
  EXPECT_GE(g3->sizes[0].p50, milliseconds(12));
  EXPECT_EQ(g3->predict(4).expected, g3->sizes[0].p50);
  EXPECT_GT(g3->sizes[0].bytes_per_second, 0.0);
  EXPECT_DOUBLE_EQ(*gauge(*kv, "kvbm_transfer_seconds", "G3_to_G1", "0.5"),
                   std::chrono::duration<double>(g3->sizes[0].p50).count());
  EXPECT_DOUBLE_EQ(*gauge(*kv, "kvbm_transfer_seconds", "G3_to_G1", "0.99"),
                   std::chrono::duration<double>(g3->sizes[0].p99).count());
  EXPECT_DOUBLE_EQ(*gauge(*kv, "kvbm_transfer_bytes_per_second", "G3_to_G1"),
                   g3->sizes[0].bytes_per_second);
  // The writes read nothing: on this clock they took no time.
  EXPECT_EQ(costs.path(TierId::kG2, TierId::kG3)->predict(4).expected, nanoseconds(0));
  kv->shutdown();
  expect_clean(*kv);
}

TEST(TransferCostsTest, PrefillComesFromTheConfigUntilTheEngineReports) {
  auto c = config(8, 0, 0);
  c.move_bytes = false;
  c.prefill_tokens_per_second = 1000;
  auto kv = KvBlockManager::build(c);
  PrefillCost p = kv->transfer_costs().prefill;
  EXPECT_EQ(p.configured_tokens_per_second, 1000);
  EXPECT_FALSE(p.reported.has_value());
  ASSERT_TRUE(p.model.known);
  EXPECT_EQ(p.predict(100).expected, milliseconds(100));
  EXPECT_DOUBLE_EQ(*gauge(*kv, "kvbm_prefill_seconds_per_token", ""), 1e-3);

  kv->report_prefill(200, milliseconds(100));  // 2000 tokens per second
  kv->report_prefill(400, milliseconds(200));
  p = kv->transfer_costs().prefill;
  ASSERT_TRUE(p.reported.has_value());
  EXPECT_EQ(p.reported->batches, 2u);
  EXPECT_EQ(p.predict(100).expected, milliseconds(50));
  EXPECT_NEAR(*gauge(*kv, "kvbm_prefill_seconds_per_token", ""), 0.5e-3, 1e-12);
  kv->shutdown();
  expect_clean(*kv);
}

TEST(TransferCostsTest, PrefillIsUnknownWithoutConfigOrReports) {
  auto c = config(8, 0, 0);
  c.move_bytes = false;
  auto kv = KvBlockManager::build(c);
  EXPECT_FALSE(kv->transfer_costs().prefill.model.known);
  EXPECT_TRUE(kv->transfer_costs().paths.empty());  // G1 only: no copy path
  EXPECT_DOUBLE_EQ(*gauge(*kv, "kvbm_prefill_seconds_per_token", ""), 0.0);
}

TEST(TransferCostsTest, AnInvalidPrefillSpeedIsRefused) {
  for (const double bad : {-1.0, std::numeric_limits<double>::infinity()}) {
    auto c = config(8, 0, 0);
    c.move_bytes = false;
    c.prefill_tokens_per_second = bad;
    try {
      auto kv = KvBlockManager::build(c);
      ADD_FAILURE() << "expected a UsageError for " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("prefill_tokens_per_second"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace transfer_costs_test
}  // namespace kvbm
