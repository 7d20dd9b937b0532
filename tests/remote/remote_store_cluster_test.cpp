// kvbm/remote/remote_store.h on a real Redis Cluster (3 primaries, 1 replica
// each, started by each test on loopback ports): keys placed by CRC16 slot as
// the server places them, a primary killed or frozen and its replica
// promoted, slots migrated by hand (ASK, then MOVED), resharded by redis-cli
// and rebalanced onto a node added, under traffic. Every block served is compared byte for byte.
// ctest label: remote_cluster (`ctest -L remote` runs it with the area).

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "facade/facade_test_util.h"
#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/logging.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/storage/storage.h"
#include "remote/redis_cluster.h"
#include "remote/remote_test_util.h"

namespace kvbm {
namespace remote_store_cluster_test {

using test::RedisCluster;
using namespace test;  // NOLINT(google-build-using-namespace): the shared test helpers
using Clock = std::chrono::steady_clock;

#define KVBM_NEED_CLUSTER() \
  if (!RedisCluster::installed()) KVBM_SKIP_OR_FAIL(RedisCluster::kSkipMessage)

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr const char* kAdmin = "admin-Pa55";  // requirepass of the ACL tests' nodes
constexpr const char* kSecret = "kvbm-Pa55";  // the kvbm user's

/// Gives every node an ACL user `kvbm` with just what kvbm needs on a cluster.
void add_kvbm_user(RedisCluster& c) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(c.node(i).command({"ACL", "SETUSER", "kvbm", "on", std::string(">") + kSecret,
                                 "~kvbm:*", "resetchannels", "-@all", "+get", "+set", "+exists",
                                 "+cluster|slots", "+asking"}),
              "OK");
  }
}

std::string kvbm_userinfo() { return std::string("kvbm:") + kSecret; }

/// Waits until every primary's writes reached its replicas.
void replicate(RedisCluster& c) { c.wait_replicated(); }

/// The blocks among `b` whose slot node `primary` serves, by the cluster's own map.
std::vector<std::size_t> blocks_on(RemoteStore& store, const Blocks& b, RedisCluster& c,
                                   int primary) {
  const auto map = c.slot_map();
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < b.hashes.size(); ++i) {
    if (map[redis_key_slot(store.key_of(b.hashes[i]))] == primary) out.push_back(i);
  }
  return out;
}

/// Gets `which` of `b`; returns how many came back kOk, failing the test on a wrong byte.
std::size_t get_verified(RemoteStore& store, const Blocks& b, const std::vector<std::size_t>& which,
                         std::vector<RemoteStatus>* status = nullptr) {
  std::vector<std::uint64_t> hashes;
  for (std::size_t i : which) hashes.push_back(b.hashes[i]);
  Destinations dst(hashes, store.block_bytes());
  const auto got = store.get(dst.gets);
  std::size_t ok = 0;
  for (std::size_t k = 0; k < which.size(); ++k) {
    if (got[k] != RemoteStatus::kOk) continue;
    ++ok;
    EXPECT_EQ(dst.data[k], b.data[which[k]]) << "wrong bytes for block " << which[k];
  }
  if (status != nullptr) *status = got;
  return ok;
}

std::vector<std::size_t> all_of(const Blocks& b) {
  std::vector<std::size_t> v(b.hashes.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

/// Hashes whose keys fall into `slot`.
std::vector<std::uint64_t> hashes_in_slot(const RemoteStore& store, std::uint16_t slot,
                                          std::size_t n) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t h = 0xC000'0000'0000'0000ULL; out.size() < n; ++h) {
    if (redis_key_slot(store.key_of(h)) == slot) out.push_back(h);
  }
  return out;
}

TEST(RedisKeySlot, IsCrc16XmodemWithHashTags) {
  EXPECT_EQ(redis_key_slot("123456789"), 0x31C3 % 16384);  // the CRC16/XMODEM check value
  EXPECT_EQ(redis_key_slot("foo"), 12182);                 // CLUSTER KEYSLOT foo
  EXPECT_EQ(redis_key_slot(""), 0);
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_EQ(redis_key_slot("foo{bar}{zap}"), redis_key_slot("bar"));
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
  EXPECT_NE(redis_key_slot("foo{}{bar}"), redis_key_slot("bar"));  // an empty tag: the whole key
}

// Through an ACL user limited to kvbm's keys and commands, as a deployment would.
TEST(RemoteStoreClusterTest, KeysSpreadOverPrimariesBySlotAsTheServerComputesIt) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster({.password = kAdmin});
  add_kvbm_user(cluster);
  auto store = RemoteStore::create(options_for({cluster.url(kvbm_userinfo())}));
  EXPECT_TRUE(store->cluster());
  // Our CRC16 against the server's, for keys of the store and hash-tagged ones.
  for (std::uint64_t h = 0; h < 200; ++h) {
    const std::string key = h % 2 == 0 ? store->key_of(h) : "x{" + std::to_string(h) + "}y";
    ASSERT_EQ(cluster.node(0).command({"CLUSTER", "KEYSLOT", key}),
              std::to_string(redis_key_slot(key)))
        << key;
  }
  const std::size_t n = 300;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  std::size_t total = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (!cluster.is_primary(i)) continue;
    const auto on = std::stoul(cluster.node(i).command({"DBSIZE"}));
    EXPECT_GT(on, n / 6) << "primary " << i;
    total += on;
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(store->server_count(), 3u);

  std::vector<std::uint64_t> asked = blocks.hashes;
  for (std::uint64_t i = 0; i < 30; ++i) asked.push_back(0xB000 + i);  // never written
  auto present = store->exists(asked);
  for (std::size_t i = 0; i < asked.size(); ++i) EXPECT_EQ(present[i], i < n) << i;
  auto o = options_for({cluster.url()});  // the user and password elsewhere
  ::setenv("KVBM_TEST_CLUSTER_PASSWORD", kSecret, 1);
  o.username = "kvbm";
  o.password_env = "KVBM_TEST_CLUSTER_PASSWORD";
  auto second = RemoteStore::create(o);
  EXPECT_EQ(get_verified(*second, blocks, all_of(blocks)), n);
  Destinations missing(std::vector<std::uint64_t>(asked.begin() + n, asked.end()),
                       store->block_bytes());
  EXPECT_EQ(count(second->get(missing.gets), RemoteStatus::kNotFound), 30u);
  EXPECT_EQ(second->stats().count(RemoteStatus::kCorrupt), 0u);
  // A wrong password: access denied for every block, never a crash.
  auto wrong = RemoteStore::create(options_for({cluster.url("kvbm:wrong")}));
  Destinations d(blocks.hashes, wrong->block_bytes());
  EXPECT_EQ(count(wrong->get(d.gets), RemoteStatus::kAccessDenied), n);
  // Reported as refused (the slot map was refused), not as down, with the node's reply.
  const RemoteStoreStats ws = wrong->stats();
  EXPECT_EQ(ws.state, RemoteState::kRefused);
  EXPECT_EQ(ws.count(RemoteRefusal::kWrongPass), n);
  EXPECT_NE(ws.refusal.find("WRONGPASS"), std::string::npos) << ws.refusal;
  EXPECT_EQ(ws.refused_user, "kvbm");
  EXPECT_NE(ws.refused_server.find("redis+cluster://kvbm@127.0.0.1:"), std::string::npos)
      << ws.refused_server;
  EXPECT_EQ(second->stats().state, RemoteState::kOk);
  ::unsetenv("KVBM_TEST_CLUSTER_PASSWORD");
}

TEST(RemoteStoreClusterTest, PrimaryKilledReplicaPromotedStoreFollowsAndServesVerifiedBlocks) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  std::ostringstream log_text;
  set_logger(std::make_shared<spdlog::logger>(
      "kvbm", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text)));
  auto store = RemoteStore::create(options_for({cluster.url()}));
  const std::size_t n = 300;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  replicate(cluster);
  const int victim = cluster.primary_of(redis_key_slot(store->key_of(blocks.hashes[0])));
  ASSERT_GE(victim, 0);
  const auto on_victim = blocks_on(*store, blocks, cluster, victim);
  ASSERT_FALSE(on_victim.empty());

  cluster.node(static_cast<std::size_t>(victim)).kill();
  const auto killed = Clock::now();
  double first_hit = -1;
  double longest_call = 0;
  while (seconds_since(killed) < 20) {
    const auto call = Clock::now();
    const std::size_t ok = get_verified(*store, blocks, on_victim);
    longest_call = std::max(longest_call, seconds_since(call));
    if (ok > 0) {
      first_hit = seconds_since(killed);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(first_hit, 0) << "no verified hit on the killed primary's slots within 20 s\n"
                          << log_text.str();
  std::cout << "killed primary -> first verified hit on its slots: " << first_hit << " s\n";
  RecordProperty("failover_first_hit_ms", static_cast<int>(first_hit * 1000));
  EXPECT_LT(longest_call, 1.0) << "a call waited past its 500 ms deadline";
  // Everything replicated before the kill is served again, verified (the rest
  // of the victim's slots may take one more map refresh: a bounded wait, not a
  // hang); writes go to the new primary.
  std::size_t served = 0;
  const auto since = Clock::now();
  while ((served = get_verified(*store, blocks, all_of(blocks))) < n && seconds_since(since) < 10) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(served, n)
      << "blocks replicated before the kill still missing 10 s after the first hit";
  Blocks more(5000, 100, store->block_bytes());
  EXPECT_EQ(count(store->put(more.puts), RemoteStatus::kOk), 100u);
  EXPECT_EQ(get_verified(*store, more, all_of(more)), 100u);
  EXPECT_EQ(store->stats().count(RemoteStatus::kCorrupt), 0u);
  EXPECT_NE(log_text.str().find("cluster map from"), std::string::npos);
  set_logger(nullptr);
}

// Through the ACL user too: ASKING is among its commands.
TEST(RemoteStoreClusterTest, SlotMigratedByHandAskThenMovedAreFollowed) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster({.password = kAdmin});
  add_kvbm_user(cluster);
  auto store = RemoteStore::create(options_for({cluster.url(kvbm_userinfo())}));
  const std::uint16_t slot = redis_key_slot(store->key_of(1));
  const int from = cluster.primary_of(slot);
  ASSERT_GE(from, 0);
  int to = -1;
  for (std::size_t i = 0; i < cluster.size() && to < 0; ++i) {
    if (static_cast<int>(i) != from && cluster.is_primary(i)) to = static_cast<int>(i);
  }
  auto& a = cluster.node(static_cast<std::size_t>(from));
  auto& b = cluster.node(static_cast<std::size_t>(to));
  const auto hashes = hashes_in_slot(*store, slot, 7);
  Blocks blocks(0, 7, store->block_bytes());
  for (std::size_t i = 0; i < 7; ++i) {  // the same bytes scheme, other hashes: all in one slot
    const auto bytes = block_bytes_of(hashes[i], store->block_bytes());
    std::copy(bytes.begin(), bytes.end(), blocks.data[i].begin());  // the regions point here
    blocks.hashes[i] = hashes[i];
    blocks.puts[i].hash = hashes[i];
  }
  ASSERT_EQ(count(store->put(std::span(blocks.puts).first(6)), RemoteStatus::kOk), 6u);
  const std::string s = std::to_string(slot);
  ASSERT_EQ(b.command({"CLUSTER", "SETSLOT", s, "IMPORTING", cluster.id_of(from)}), "OK");
  ASSERT_EQ(a.command({"CLUSTER", "SETSLOT", s, "MIGRATING", cluster.id_of(to)}), "OK");
  std::vector<std::string> migrate = {
      "MIGRATE", "127.0.0.1", std::to_string(b.port()), "", "0", "5000", "AUTH", kAdmin, "KEYS"};
  for (std::size_t i = 0; i < 3; ++i) migrate.push_back(store->key_of(hashes[i]));
  ASSERT_EQ(a.command(migrate), "OK");
  ASSERT_EQ(b.command({"CLUSTER", "COUNTKEYSINSLOT", s}), "3");

  // Half the slot's keys on each node: the moved ones answer ASK, followed after ASKING.
  EXPECT_EQ(get_verified(*store, blocks, {0, 1, 2, 3, 4, 5}), 6u);
  for (bool p : store->exists(std::span(blocks.hashes).first(6))) EXPECT_TRUE(p);
  // A new key of a migrating slot is written where ASK sends it: the importing node.
  ASSERT_EQ(count(store->put(std::span(blocks.puts).subspan(6, 1)), RemoteStatus::kOk), 1u);
  EXPECT_EQ(b.command({"CLUSTER", "COUNTKEYSINSLOT", s}), "4");

  // The rest moves and the slot is assigned: the old node answers MOVED; the map follows.
  migrate.resize(9);
  for (std::size_t i = 3; i < 6; ++i) migrate.push_back(store->key_of(hashes[i]));
  ASSERT_EQ(a.command(migrate), "OK");
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (cluster.is_primary(i))
      cluster.node(i).command({"CLUSTER", "SETSLOT", s, "NODE", cluster.id_of(to)});
  }
  EXPECT_EQ(get_verified(*store, blocks, all_of(blocks)), 7u);
  EXPECT_EQ(get_verified(*store, blocks, all_of(blocks)), 7u);
  EXPECT_EQ(store->stats().count(RemoteStatus::kCorrupt), 0u);
}

// Slots move twice under reads and writes: redis-cli --cluster reshard between two primaries,
// then a fourth primary is added and `rebalance` gives it a quarter of the slots (a node the
// store never heard of, found by MOVED/ASK and the next map).
TEST(RemoteStoreClusterTest, ReshardAndANodeAddedUnderTrafficServeNoWrongBytes) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  auto o = options_for({cluster.url()});
  o.command_timeout = 2000ms;
  auto store = RemoteStore::create(o);
  const std::size_t n = 2000;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> calls{0}, misses{0};
  std::thread traffic([&] {
    std::mt19937_64 rng(11);
    while (!stop) {
      std::vector<std::size_t> which;
      const std::size_t first = rng() % (n - 64);
      for (std::size_t i = first; i < first + 64; ++i) which.push_back(i);
      if (rng() % 4 == 0) {
        std::vector<RemotePut> puts;
        for (std::size_t i : which) puts.push_back(blocks.puts[i]);
        (void)store->put(puts);
      }
      misses += which.size() - get_verified(*store, blocks, which);
      ++calls;
    }
  });
  struct Join {  // the traffic stops and joins even when a redis-cli step throws
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join{stop, traffic};
  const auto started = Clock::now();
  const std::string reshard =
      cluster.cli({"--cluster", "reshard", RedisCluster::address(cluster.node(0)), "--cluster-from",
                   cluster.id_of(0), "--cluster-to", cluster.id_of(1), "--cluster-slots", "1000",
                   "--cluster-yes"});
  const std::size_t added = cluster.add_primary();
  const std::string rebalance =
      cluster.cli({"--cluster", "rebalance", RedisCluster::address(cluster.node(0)),
                   "--cluster-use-empty-masters", "--cluster-yes"});
  stop = true;
  traffic.join();
  EXPECT_NE(reshard.find("Moving slot"), std::string::npos) << reshard;
  EXPECT_NE(rebalance.find("Moving"), std::string::npos) << rebalance;
  std::cout << "reshard of 1000 slots, a node added and rebalanced, in " << seconds_since(started)
            << " s under traffic: " << calls << " calls, " << misses << " blocks missed\n";
  EXPECT_GT(calls.load(), 0u);
  EXPECT_GT(std::stoul(cluster.node(added).command({"DBSIZE"})), 0u);
  EXPECT_EQ(get_verified(*store, blocks, all_of(blocks)), n);
  EXPECT_EQ(store->server_count(), 4u);
  EXPECT_EQ(store->stats().count(RemoteStatus::kCorrupt), 0u);
}

TEST(RemoteStoreClusterTest, FrozenPrimaryTimesOutWithinTheDeadlineThenItsReplicaServes) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  auto store = RemoteStore::create(options_for({cluster.url()}));
  const std::size_t n = 300;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  replicate(cluster);
  const int victim = cluster.primary_of(redis_key_slot(store->key_of(blocks.hashes[0])));
  ASSERT_GE(victim, 0);
  const auto on_victim = blocks_on(*store, blocks, cluster, victim);
  cluster.node(static_cast<std::size_t>(victim)).pause();
  const auto frozen = Clock::now();
  // The first call: the frozen node's blocks time out, the others are served, within 500 ms.
  std::vector<RemoteStatus> st;
  const auto call = Clock::now();
  const std::size_t ok = get_verified(*store, blocks, all_of(blocks), &st);
  EXPECT_LT(seconds_since(call), 1.0);
  EXPECT_EQ(ok, n - on_victim.size());
  EXPECT_EQ(st[on_victim.front()], RemoteStatus::kTimeout);
  double first_hit = -1;
  while (seconds_since(frozen) < 20) {
    const auto c = Clock::now();
    const std::size_t got = get_verified(*store, blocks, on_victim);
    EXPECT_LT(seconds_since(c), 1.0);
    if (got > 0) {
      first_hit = seconds_since(frozen);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(first_hit, 0) << "the replica of the frozen primary never served within 20 s";
  std::cout << "frozen primary -> first verified hit on its slots: " << first_hit << " s\n";
  // Thawed, it comes back as a replica; while the cluster settles again its slots may miss
  // for a moment (never a wrong byte), then everything is served.
  cluster.node(static_cast<std::size_t>(victim)).resume();
  std::size_t served = 0;
  for (const auto thawed = Clock::now(); served < n && seconds_since(thawed) < 10;) {
    served = get_verified(*store, blocks, all_of(blocks));
    if (served < n) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(served, n);
}

// Two KvBlockManagers share G4 on the cluster (the URL passes through the facade unchanged):
// A computes a prefix, the primary holding its first block is killed, and B onboards the
// prefix again and again until it is whole; no onboarding hangs, no byte is wrong, and every
// pool balances.
TEST(RemoteStoreClusterTest, KvBlockManagersShareG4ThroughAFailover) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  auto config = [&] {
    KvBlockManagerConfig c = test::config(16, 32, 0);
    c.device_to_host = OffloadMode::kWriteThrough;
    c.remote.urls = {cluster.url()};
    c.remote.model = "model-a@1";
    c.remote.dtype = "bf16";
    c.remote.connect_timeout = 200ms;
    c.remote.command_timeout = 500ms;
    return c;
  };
  std::vector<SequenceHash> hashes;
  std::optional<SequenceHash> parent;
  for (std::uint64_t i = 0; i < 12; ++i) {
    hashes.push_back(chain(parent, 7000003 + i));
    parent = hashes.back();
  }
  auto a = KvBlockManager::build(config());
  test::compute(*a, hashes);
  a->drain();
  replicate(cluster);
  // The key of the first block, as the facade's store names it.
  const KvBlockManagerConfig c = config();
  auto keys = RemoteStore::create(options_for(
      {cluster.url()}, {c.remote.model, c.remote.dtype, c.layout, c.remote.user_namespace}));
  const int victim = cluster.primary_of(redis_key_slot(keys->key_of(hashes[0].value())));
  ASSERT_GE(victim, 0);
  cluster.node(static_cast<std::size_t>(victim)).kill();

  auto b = KvBlockManager::build(config());
  const auto killed = Clock::now();
  std::size_t whole = 0, attempts = 0, longest = 0;
  while (seconds_since(killed) < 20 && whole == 0) {
    ++attempts;
    const auto call = Clock::now();
    OnboardHandle h = b->onboard(hashes);
    // Bounded, never a hang (G4's calls end within command_timeout); the bound is loose
    // because a loaded machine under ASan stretches every call.
    ASSERT_TRUE(h.wait_for(10s)) << "an onboarding did not end within 10 s";
    ASSERT_EQ(h.status(), TransferStatus::kDone);
    EXPECT_LT(seconds_since(call), 5.0);
    const auto blocks = h.take_blocks();
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_EQ(test::read_block(b->device_layout(), blocks[i].block_id()),
                test::pattern(hashes[i].value(), b->block_bytes()))
          << "block " << i;
    }
    longest = std::max(longest, blocks.size());
    if (blocks.size() == hashes.size()) whole = blocks.size();
  }
  const auto st = b->stats();
  const RemoteStoreStats* g4 = st.store(TierId::kG4);
  EXPECT_EQ(whole, hashes.size()) << "the prefix was not whole again within 20 s: " << attempts
                                  << " onboardings, at most " << longest << " blocks; G4 hits "
                                  << (g4 != nullptr ? g4->hits : 0) << ", misses "
                                  << (g4 != nullptr ? g4->misses : 0);
  EXPECT_EQ(a->audit(), "");
  EXPECT_EQ(b->audit(), "");
}

// Replica reads (off by default): GET and EXISTS go to the replicas, SET to the primaries; a
// primary killed does not interrupt reads of its slots (its replica answers them throughout).
TEST(RemoteStoreClusterTest, ReplicaReadsAreServedByReplicasAndOutliveAPrimary) {
  KVBM_NEED_CLUSTER();
  RedisCluster cluster;
  auto o = options_for({cluster.url()});
  o.replica_reads = true;
  auto store = RemoteStore::create(o);
  const std::size_t n = 300;
  Blocks blocks(1, n, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), n);
  replicate(cluster);
  // The first map may name no replica (CLUSTER SLOTS lists them once synced); a later one does.
  for (int i = 0; i < 100 && store->server_count() < 6; ++i) {
    (void)store->exists(blocks.hashes);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(store->server_count(), 6u);  // primaries and replicas
  EXPECT_EQ(get_verified(*store, blocks, all_of(blocks)), n);
  for (bool p : store->exists(blocks.hashes)) EXPECT_TRUE(p);
  const auto gets_on = [&](std::size_t i) {
    const std::string stats = cluster.node(i).command({"INFO", "commandstats"});
    const auto at = stats.find("cmdstat_get:calls=");
    return at == std::string::npos ? 0UL : std::stoul(stats.substr(at + 18));
  };
  std::size_t on_replicas = 0;
  std::size_t on_primaries = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    (cluster.is_primary(i) ? on_primaries : on_replicas) += gets_on(i);
  }
  EXPECT_EQ(on_replicas, n);
  EXPECT_EQ(on_primaries, 0u);

  const int victim = cluster.primary_of(redis_key_slot(store->key_of(blocks.hashes[0])));
  ASSERT_GE(victim, 0);
  cluster.node(static_cast<std::size_t>(victim)).kill();
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(get_verified(*store, blocks, all_of(blocks)), n) << "round " << round;
  }
  EXPECT_THROW((void)RemoteStore::create([] {
                 auto single = options_for({"redis://127.0.0.1:1/0"});
                 single.replica_reads = true;  // a cluster option
                 return single;
               }()),
               UsageError);
}

}  // namespace remote_store_cluster_test
}  // namespace kvbm
