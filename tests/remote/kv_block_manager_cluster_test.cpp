// KvBlockManager with G4 on a real Redis Cluster (3 primaries, 1 replica each, started by
// each test on loopback ports), under write and read traffic: manager A computes new prefixes
// (written through G2 to G4), manager B onboards earlier ones from G4, on one thread, while
// the cluster changes under them: 1000 slots resharded by redis-cli, a primary added and the
// slots rebalanced onto it, a primary frozen with SIGSTOP (partitioned) until its replica
// takes over, then thawed. Every block served is compared byte for byte; every onboarding
// ends within a bound (nothing hangs); afterwards every block G4 acknowledged is served again
// through a fresh manager (misses only while the cluster moved), and every pool balances.
// ctest label: remote_cluster (`ctest -L remote` runs it with the area).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_set>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/hashing.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/pool_listener.h"
#include "kvbm/storage/storage.h"
#include "remote/redis_cluster.h"

namespace kvbm {
namespace kv_block_manager_cluster_test {

using test::RedisCluster;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define KVBM_NEED_CLUSTER() \
  if (!RedisCluster::installed()) KVBM_SKIP_OR_FAIL(RedisCluster::kSkipMessage)

constexpr std::size_t kPrefixBlocks = 8;
/// No onboarding may take longer than this (its G4 calls are bounded by command_timeout).
constexpr auto kOnboardBound = 10s;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// The hashes G4 acknowledged, as the writer's remote listener hears them.
class StoredLog : public PoolListener {
 public:
  void on_stored(std::span<const SequenceHash> hashes) noexcept override {
    std::lock_guard lock(mu_);
    for (const SequenceHash& h : hashes) stored_.insert(h.value());
  }
  [[nodiscard]] bool has(SequenceHash h) const {
    std::lock_guard lock(mu_);
    return stored_.contains(h.value());
  }

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::uint64_t> stored_;
};

KvBlockManagerConfig cluster_config(const std::string& url, std::chrono::milliseconds timeout) {
  KvBlockManagerConfig c = test::config(16, 32, 0);
  c.device_to_host = OffloadMode::kWriteThrough;
  c.remote.urls = {url};
  c.remote.model = "model-c@1";
  c.remote.dtype = "bf16";
  c.remote.connect_timeout = 200ms;
  c.remote.command_timeout = timeout;
  c.remote.backoff_initial = 20ms;
  c.remote.backoff_max = 200ms;
  return c;
}

/// Prefix k: kPrefixBlocks chained hashes of its own.
std::vector<SequenceHash> prefix_of(std::size_t k) {
  std::vector<SequenceHash> out;
  std::optional<SequenceHash> parent;
  for (std::uint64_t i = 0; i < kPrefixBlocks; ++i) {
    out.push_back(chain(parent, 9'000'000 + k * 64 + i));
    parent = out.back();
  }
  return out;
}

struct Served {
  std::size_t blocks = 0;
  bool finished = true;  ///< false: not terminal within kOnboardBound (a hang)
  double seconds = 0;
};

/// Onboards `hashes` into kv's G1 and compares every block served with its pattern (a wrong
/// byte fails the test); the blocks are released on return.
Served onboard_verified(KvBlockManager& kv, const std::vector<SequenceHash>& hashes) {
  const auto start = Clock::now();
  OnboardHandle h = kv.onboard(hashes);
  Served s;
  s.finished = h.wait_for(kOnboardBound);
  s.seconds = seconds_since(start);
  if (!s.finished) {
    ADD_FAILURE() << "an onboarding did not end within " << kOnboardBound.count() << " s";
    (void)h.cancel();
    return s;
  }
  const auto blocks = h.take_blocks();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(test::read_block(kv.device_layout(), blocks[i].block_id()),
              test::pattern(hashes[i].value(), kv.block_bytes()))
        << "wrong bytes in block " << i << " of a prefix";
  }
  s.blocks = blocks.size();
  return s;
}

/// Write and read traffic on one thread: every 4th round A computes the next prefix (up to
/// `max_prefixes`) and drains (so it is in G4, or failed, before anyone reads it), and every
/// round B onboards one written prefix at random. B's tiers are small: most reads go to G4.
class Traffic {
 public:
  Traffic(KvBlockManager& a, KvBlockManager& b, std::size_t max_prefixes)
      : a_(a), b_(b), max_(max_prefixes) {}
  ~Traffic() { stop(); }
  Traffic(const Traffic&) = delete;
  Traffic& operator=(const Traffic&) = delete;

  /// Writes `n` prefixes now, on the caller's thread.
  void write(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) write_one();
  }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  /// Returns once no write is in progress and none will start until resume_writes().
  void pause_writes() {
    writes_paused_ = true;
    std::lock_guard lock(write_mu_);
  }
  void resume_writes() { writes_paused_ = false; }
  /// Waits (up to `limit`) for `n` more rounds; returns whether they came.
  bool wait_rounds(std::size_t n, std::chrono::seconds limit) {
    const std::size_t target = rounds_ + n;
    const auto until = Clock::now() + limit;
    while (rounds_ < target && Clock::now() < until) std::this_thread::sleep_for(5ms);
    return rounds_ >= target;
  }
  [[nodiscard]] std::size_t written() const { return written_; }
  [[nodiscard]] std::size_t rounds() const { return rounds_; }
  [[nodiscard]] std::size_t hung() const { return hung_; }
  [[nodiscard]] double longest() const { return static_cast<double>(longest_ms_) / 1000.0; }
  [[nodiscard]] std::string summary() const {
    std::ostringstream s;
    s << rounds_ << " rounds, " << written_ << " prefixes written, " << served_
      << " blocks served verified, " << missed_ << " missed, longest onboarding " << longest()
      << " s";
    return s.str();
  }

 private:
  void write_one() {
    std::lock_guard lock(write_mu_);
    if (writes_paused_ || written_ >= max_) return;
    test::compute(a_, prefix_of(written_));
    a_.drain();
    ++written_;
  }
  void run() {
    std::mt19937_64 rng(17);
    while (!stop_) {
      if (rounds_ % 4 == 0) write_one();
      const Served s = onboard_verified(b_, prefix_of(rng() % written_));
      served_ += s.blocks;
      missed_ += kPrefixBlocks - s.blocks;
      hung_ += s.finished ? 0 : 1;
      longest_ms_ = std::max<std::size_t>(longest_ms_, static_cast<std::size_t>(s.seconds * 1e3));
      ++rounds_;
    }
  }

  KvBlockManager& a_;
  KvBlockManager& b_;
  const std::size_t max_;
  std::mutex write_mu_;
  std::atomic<std::size_t> written_{0}, rounds_{0}, served_{0}, missed_{0}, hung_{0};
  std::atomic<std::size_t> longest_ms_{0};
  std::atomic<bool> stop_{false}, writes_paused_{false};
  std::thread thread_;
};

/// A writer with a log of what G4 acknowledged, and a reader.
struct Managers {
  Managers(const std::string& url, std::chrono::milliseconds timeout)
      : stored(std::make_shared<StoredLog>()) {
    KvBlockManagerConfig c = cluster_config(url, timeout);
    c.remote_listeners = {stored};
    a = KvBlockManager::build(c);
    b = KvBlockManager::build(cluster_config(url, timeout));
  }
  std::shared_ptr<StoredLog> stored;
  std::unique_ptr<KvBlockManager> a, b;
};

/// Onboards every written prefix through a fresh manager (nothing cached) until each holds
/// as many blocks as G4 acknowledged at its head, retrying for up to 20 s in all (the map
/// may need one more refresh); returns the acknowledged blocks still not served.
std::size_t unserved_after(const std::string& url, const StoredLog& stored, std::size_t n) {
  auto c = KvBlockManager::build(cluster_config(url, 2000ms));
  const auto until = Clock::now() + 20s;
  std::size_t missing = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const auto hashes = prefix_of(k);
    std::size_t acknowledged = 0;
    while (acknowledged < hashes.size() && stored.has(hashes[acknowledged])) ++acknowledged;
    std::size_t served = onboard_verified(*c, hashes).blocks;
    while (served < acknowledged && Clock::now() < until) {
      std::this_thread::sleep_for(50ms);
      served = std::max(served, onboard_verified(*c, hashes).blocks);
    }
    if (served < acknowledged) missing += acknowledged - served;
  }
  EXPECT_EQ(c->audit(), "");
  return missing;
}

/// Drains `kv`; its audit is clean and every pool's reset + inactive + in use == total.
void expect_balanced(KvBlockManager& kv, const char* who) {
  kv.drain();
  EXPECT_EQ(kv.audit(), "") << who;
  for (const TierStats& t : kv.stats().tiers) {
    EXPECT_TRUE(t.blocks.balanced())
        << who << " " << to_string(t.tier) << ": reset " << t.blocks.reset << " + inactive "
        << t.blocks.inactive << " + in use " << t.blocks.in_use << " != total " << t.blocks.total;
  }
}

/// What every scenario ends with: the traffic ran and never hung, every block G4 took is
/// served verified, the pools balance.
void expect_settled(const std::string& url, Managers& m, Traffic& t, const char* scenario) {
  std::cout << scenario << ": " << t.summary() << "\n";
  EXPECT_EQ(t.hung(), 0u);
  EXPECT_LT(t.longest(), 5.0) << "an onboarding took " << t.longest() << " s";
  EXPECT_EQ(unserved_after(url, *m.stored, t.written()), 0u)
      << "blocks G4 acknowledged not served once the cluster settled (" << scenario << ")";
  expect_balanced(*m.a, "writer");
  expect_balanced(*m.b, "reader");
}

TEST(KvBlockManagerClusterTest, ReshardUnderTrafficServesOnlyVerifiedBlocks) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  Managers m(cluster.url(), 2000ms);
  Traffic traffic(*m.a, *m.b, 1000);
  traffic.write(100);  // keys in the slots that move before they move
  traffic.start();
  const std::size_t before = traffic.rounds();
  const std::string reshard =
      cluster.cli({"--cluster", "reshard", RedisCluster::address(cluster.node(0)), "--cluster-from",
                   cluster.id_of(0), "--cluster-to", cluster.id_of(1), "--cluster-slots", "1000",
                   "--cluster-yes"});
  const std::size_t during = traffic.rounds() - before;
  cluster.wait_agreed();
  EXPECT_TRUE(traffic.wait_rounds(20, 60s)) << "the traffic stalled after the reshard";
  traffic.stop();
  EXPECT_NE(reshard.find("Moving slot"), std::string::npos) << reshard;
  std::cout << "rounds while 1000 slots moved: " << during << "\n";
  EXPECT_GT(during, 0u) << "no traffic while the slots moved";
  expect_settled(cluster.url(), m, traffic, "reshard");
}

TEST(KvBlockManagerClusterTest, NodeAddedAndRebalancedUnderTrafficServesOnlyVerifiedBlocks) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  Managers m(cluster.url(), 2000ms);
  Traffic traffic(*m.a, *m.b, 1000);
  traffic.write(100);
  traffic.start();
  const std::size_t added = cluster.add_primary();  // under traffic: kvbm never heard of it
  const std::size_t before = traffic.rounds();
  const std::string rebalance =
      cluster.cli({"--cluster", "rebalance", RedisCluster::address(cluster.node(0)),
                   "--cluster-use-empty-masters", "--cluster-yes"});
  const std::size_t during = traffic.rounds() - before;
  cluster.wait_agreed();
  EXPECT_TRUE(traffic.wait_rounds(20, 60s)) << "the traffic stalled after the rebalance";
  traffic.stop();
  EXPECT_NE(rebalance.find("Moving"), std::string::npos) << rebalance;
  std::cout << "rounds while the slots moved to the added node: " << during << "\n";
  EXPECT_GT(during, 0u) << "no traffic while the slots moved";
  EXPECT_GT(std::stoul(cluster.node(added).command({"DBSIZE"})), 0u);
  expect_settled(cluster.url(), m, traffic, "node added and rebalanced");
}

/// Waits (up to `limit`) until node i is a primary.
bool wait_promoted(RedisCluster& cluster, std::size_t i, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (cluster.is_primary(i)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A primary frozen (SIGSTOP: alive to the kernel, silent to everyone) under traffic: calls
// to it time out within the deadline, its replica is promoted, the traffic goes on there;
// thawed, it rejoins as a replica. Writes pause around the freeze and the thaw only so that
// what G4 acknowledged is on the replica before the freeze (Redis replicates asynchronously)
// and no write reaches the thawed node before it learns it was demoted.
TEST(KvBlockManagerClusterTest, FrozenPrimaryUnderTrafficFailsOverWithoutHangsOrWrongBytes) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  std::size_t victim = 0;
  while (!cluster.is_primary(victim)) ++victim;
  const int replica = cluster.replica_of(victim);
  ASSERT_GE(replica, 0);
  Managers m(cluster.url(), 500ms);
  Traffic traffic(*m.a, *m.b, 1000);
  traffic.write(60);
  traffic.start();
  ASSERT_TRUE(traffic.wait_rounds(5, 30s));

  traffic.pause_writes();
  cluster.wait_replicated();
  cluster.node(victim).pause();
  const auto frozen = Clock::now();
  traffic.resume_writes();
  const bool promoted = wait_promoted(cluster, static_cast<std::size_t>(replica), 30s);
  const double failover = seconds_since(frozen);
  EXPECT_TRUE(promoted) << "the frozen primary's replica was not promoted within 30 s";
  EXPECT_TRUE(traffic.wait_rounds(20, 60s)) << "the traffic stalled after the failover";
  std::cout << "frozen primary -> replica promoted in " << failover << " s\n";

  traffic.pause_writes();
  cluster.node(victim).resume();
  cluster.wait_ok();
  cluster.wait_agreed();
  traffic.resume_writes();
  EXPECT_TRUE(traffic.wait_rounds(10, 60s)) << "the traffic stalled after the thaw";
  traffic.stop();
  EXPECT_FALSE(cluster.is_primary(victim)) << "the thawed node should have rejoined as a replica";
  expect_settled(cluster.url(), m, traffic, "primary frozen, failed over, thawed");
}

}  // namespace kv_block_manager_cluster_test
}  // namespace kvbm
