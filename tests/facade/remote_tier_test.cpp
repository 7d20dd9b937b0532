// tests/facade/remote_tier_test.cpp: the remote tier G4 through KvBlockManager,
// against a real redis-server started by each test (tests/remote/redis_server.h).
//
// Instance A computes blocks (their bytes a function of the hash alone) and
// offloads them; instance B, another KvBlockManager with empty G1-G3 (in this
// process, another thread or another process), onboards them from G4 and
// compares every byte. Around that: a corrupted value, another model, a
// server killed, full or frozen, cancellation, and four instances at once.
// Every scenario ends with every pool balanced.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "facade/facade_test_util.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/hashing.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/remote/remote_value.h"
#include "kvbm/storage/storage.h"
#include "remote/redis_server.h"
#include "test_util.h"

namespace kvbm {
namespace remote_tier_test {

using test::Bytes;
using test::compute;
using test::pattern;
using test::prefix;
using test::read_block;
using test::RedisServer;
using test::write_block;
using Clock = std::chrono::steady_clock;

#define KVBM_NEED_REDIS()                                                        \
  do {                                                                           \
    if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage); \
  } while (0)

constexpr const char* kModel = "model-a@1";

KvBlockManagerConfig remote_config(const std::string& url, std::size_t g1 = 16, std::size_t g2 = 16,
                                   std::string model = kModel) {
  KvBlockManagerConfig c = test::config(g1, g2, 0);
  c.device_to_host = OffloadMode::kWriteThrough;
  c.remote.urls = {url};
  c.remote.model = std::move(model);
  c.remote.dtype = "bf16";
  c.remote.connect_timeout = std::chrono::milliseconds(200);
  c.remote.command_timeout = std::chrono::milliseconds(500);
  c.remote.staging_blocks = 64;
  c.remote.max_batch_blocks = 16;
  return c;
}

struct Served {
  OnboardCounts counts;
  std::vector<TierId> sources;
  std::size_t blocks = 0;
  std::size_t wrong_bytes = 0;
  TransferStatus status = TransferStatus::kTransferring;
  std::optional<Error> error;
};

// Onboards `hashes` and compares every byte of what comes back.
Served onboard_and_check(KvBlockManager& kv, std::span<const SequenceHash> hashes) {
  OnboardHandle h = kv.onboard(hashes);
  Served s;
  s.status = h.wait();
  s.error = h.error();
  s.counts = h.counts();
  s.sources = h.sources();
  const auto blocks = h.take_blocks();
  s.blocks = blocks.size();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (read_block(kv.device_layout(), blocks[i].block_id()) !=
        pattern(hashes[i].value(), kv.block_bytes())) {
      ++s.wrong_bytes;
    }
  }
  return s;
}

// The value of a counter (or the sum over series) whose labels include `labels`.
double metric(const prometheus::Registry& r, const std::string& name,
              const std::map<std::string, std::string>& labels = {}) {
  double sum = 0;
  for (const auto& fam : r.Collect()) {
    if (fam.name != name) continue;
    for (const auto& m : fam.metric) {
      std::size_t matched = 0;
      for (const auto& l : m.label) {
        auto it = labels.find(l.name);
        if (it != labels.end() && it->second == l.value) ++matched;
      }
      if (matched == labels.size()) sum += m.counter.value + m.gauge.value;
    }
  }
  return sum;
}

// The key of a block in G4 (kvbm/remote/remote_store.h), for planting values.
std::string key_of(const KvBlockManagerConfig& c, const SequenceHash& h) {
  const RemoteNamespace ns{c.remote.model, c.remote.dtype, c.layout, c.remote.user_namespace};
  char key[80];
  std::snprintf(key, sizeof key, "%s:%016llx:%016llx", c.remote.key_prefix.c_str(),
                static_cast<unsigned long long>(remote_fingerprint(ns)),
                static_cast<unsigned long long>(h.value()));
  return key;
}

void expect_balanced(const KvBlockManager& kv) { EXPECT_EQ(kv.audit(), "") << "pools unbalanced"; }

class RemoteTierLayouts : public ::testing::TestWithParam<LayoutKind> {};

TEST_P(RemoteTierLayouts, AnotherInstanceOnboardsTheOffloadedPrefixEveryByte) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(1, 12);
  auto ca = remote_config(server.url());
  ca.device_layout = GetParam();
  auto a = KvBlockManager::build(ca);
  compute(*a, hashes);
  a->drain();

  auto cb = remote_config(server.url());
  cb.device_layout = GetParam() == LayoutKind::kLayerSeparated ? LayoutKind::kFullyContiguous
                                                               : LayoutKind::kLayerSeparated;
  auto b = KvBlockManager::build(cb);
  EXPECT_EQ(b->probe(hashes).from(TierId::kG4), 12u);
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.status, TransferStatus::kDone);
  EXPECT_EQ(s.counts.from(TierId::kG4), 12u);
  EXPECT_EQ(s.counts.total(), 12u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  EXPECT_EQ(s.sources, std::vector<TierId>(12, TierId::kG4));
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_onboard_blocks_total", {{"tier", "G4"}}), 12.0);
  EXPECT_EQ(metric(*a->metrics_registry(), "kvbm_offload_blocks_total",
                   {{"pipeline", "G2_to_G4"}, {"outcome", "transferred"}}),
            12.0);
  // The same, from stats().
  const KvBlockManagerStats sa = a->stats(), sb = b->stats();
  ASSERT_NE(sa.boundary(TierId::kG2, TierId::kG4), nullptr);
  EXPECT_EQ(sa.boundary(TierId::kG2, TierId::kG4)->counts.transferred, 12u);
  // G4 is a row of the tiers, after the pools, with its store's stats.
  ASSERT_EQ(sa.tiers.size(), 3u);
  EXPECT_EQ(sa.tiers.back().tier, TierId::kG4);
  ASSERT_NE(sa.tier(TierId::kG4), nullptr);
  EXPECT_FALSE(sa.tier(TierId::kG4)->pooled());
  EXPECT_TRUE(sa.tier(TierId::kG2)->pooled());
  EXPECT_EQ(sa.store(TierId::kG2), nullptr);
  ASSERT_NE(sa.store(TierId::kG4), nullptr);
  EXPECT_EQ(sa.store(TierId::kG4)->puts, 12u);
  EXPECT_EQ(sb.onboarded_from(TierId::kG4), 12u);
  ASSERT_NE(sb.store(TierId::kG4), nullptr);
  EXPECT_EQ(sb.store(TierId::kG4)->hits, 12u);
  EXPECT_EQ(sb.store(TierId::kG4)->read_bytes, 12u * b->block_bytes());
  // Fetched blocks are G2 blocks of B now: a second onboarding finds them there.
  const Served again = onboard_and_check(*b, hashes);
  EXPECT_EQ(again.counts.from(TierId::kG4), 0u);
  EXPECT_EQ(again.counts.total(), 12u);
  EXPECT_EQ(again.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

// G2 -> G4 writes and G4 -> G2 fetches are measured (kvbm/transfer_costs.h);
// a plan with G4 asks it in one round trip and takes nothing; recompute_all
// fetches nothing from G4.
TEST(RemoteTier, G4WritesAndFetchesAreMeasuredAndPlanned) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(41, 8);
  const auto other = prefix(42, 4);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  compute(*a, other);
  a->drain();
  const TransferCosts ca = a->transfer_costs();
  ASSERT_NE(ca.path(TierId::kG2, TierId::kG4), nullptr);
  EXPECT_TRUE(ca.path(TierId::kG2, TierId::kG4)->model.known);
  ASSERT_EQ(ca.path(TierId::kG2, TierId::kG4)->sizes.size(), 1u);
  EXPECT_GE(ca.path(TierId::kG2, TierId::kG4)->sizes[0].recorded, 1u);
  ASSERT_NE(ca.path(TierId::kG4, TierId::kG2), nullptr);
  EXPECT_FALSE(ca.path(TierId::kG4, TierId::kG2)->model.known);

  auto b = KvBlockManager::build(remote_config(server.url()));
  const PoolCounts before = b->host()->pool_counts();
  const OnboardPlan plan = b->plan_onboard(hashes);
  EXPECT_EQ(b->host()->pool_counts().in_use, before.in_use);
  EXPECT_EQ(b->host()->pool_counts().inactive, before.inactive);
  EXPECT_EQ(b->stats().store(TierId::kG4)->hits, 0u);  // asked, not fetched
  EXPECT_EQ(plan.found[TierId::kG4], 8u);
  EXPECT_EQ(plan.load[TierId::kG4], 8u);  // G4 -> G2 not measured yet: auto loads
  EXPECT_FALSE(plan.estimates_known);
  {
    OnboardHandle h = b->onboard(hashes, OnboardOptions{});
    ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
    EXPECT_EQ(h.counts().from(TierId::kG4), 8u);
    EXPECT_EQ(h.plan()->load[TierId::kG4], 8u);
  }
  const TransferCosts cb = b->transfer_costs();
  EXPECT_TRUE(cb.path(TierId::kG4, TierId::kG2)->model.known);
  EXPECT_EQ(cb.path(TierId::kG4, TierId::kG2)->sizes[0].recorded, 1u);
  EXPECT_TRUE(cb.path(TierId::kG2, TierId::kG1)->model.known);
  {
    OnboardOptions o;
    o.mode = OnboardMode::kRecomputeAll;
    OnboardHandle h = b->onboard(other, o);
    ASSERT_EQ(h.wait(), TransferStatus::kDone);
    EXPECT_EQ(h.counts().total(), 0u);
    EXPECT_EQ(h.plan()->found[TierId::kG4], 4u);
  }
  EXPECT_EQ(b->stats().store(TierId::kG4)->hits, 8u);
  b->drain();
  expect_balanced(*a);
  expect_balanced(*b);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, RemoteTierLayouts,
                         ::testing::Values(LayoutKind::kLayerSeparated,
                                           LayoutKind::kFullyContiguous),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(RemoteTier, AnAclUserWithItsPasswordInAFileReachesG4ThroughTheConfig) {
  // Every store option is the config's (RemoteTierConfig is a RemoteStoreOptions):
  // here an ACL user limited to kvbm's keys, its password read from a file.
  KVBM_NEED_REDIS();
  RedisServer::Options so;
  so.extra_args = {"--requirepass", "admin-pw"};
  so.password = "admin-pw";
  RedisServer server(so);
  ASSERT_EQ(server.command({"ACL", "SETUSER", "kvbm", "reset", "on", ">kvbm-pw", "~kvbm:*",
                            "resetchannels", "-@all", "+get", "+set", "+exists"}),
            "OK");
  const std::string file = server.dir() + "/password";
  std::ofstream(file) << "kvbm-pw\n";
  const std::string url = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  const auto hashes = prefix(5, 6);
  auto ca = remote_config(url);
  ca.remote.username = "kvbm";
  ca.remote.password_file = file;
  auto a = KvBlockManager::build(ca);
  compute(*a, hashes);
  a->drain();
  auto cb = remote_config(url);
  cb.remote.username = "kvbm";
  cb.remote.password_file = file;
  auto b = KvBlockManager::build(cb);
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.counts.from(TierId::kG4), 6u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
  // The store options the facade sets itself are refused, named.
  auto bad = remote_config(url);
  bad.remote.pool_name = "mine";
  EXPECT_THROW(
      {
        try {
          (void)KvBlockManager::build(bad);
        } catch (const UsageError& e) {
          EXPECT_NE(std::string(e.what()).find("remote.pool_name"), std::string::npos);
          throw;
        }
      },
      UsageError);
}

TEST(RemoteTier, PresentBlocksAreNotWrittenAgain) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(2, 8);
  auto ca = remote_config(server.url());
  auto a = KvBlockManager::build(ca);
  compute(*a, hashes);
  a->drain();
  auto cb = remote_config(server.url());
  auto b = KvBlockManager::build(cb);
  compute(*b, hashes);  // B computed the same prefix itself
  b->drain();
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_offload_blocks_total",
                   {{"pipeline", "G2_to_G4"}, {"outcome", "already_present"}}),
            8.0);
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_offload_blocks_total",
                   {{"pipeline", "G2_to_G4"}, {"outcome", "transferred"}}),
            0.0);
  expect_balanced(*a);
  expect_balanced(*b);
}

// G4 BlockStored events: a publisher on remote_listeners hears of every block
// A writes, and of every block B finds there already (stored in the cluster
// all the same), as one parent chain on the medium "REMOTE".
TEST(RemoteTier, RemoteListenersPublishWhatReachesG4) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(3, 6);
  struct Seen {
    std::mutex mu;
    std::vector<events::KvEvent> events;
  };
  auto publisher_for = [](Seen& seen) {
    events::KvEventPublisherOptions o;
    o.background_flush = false;
    return std::make_shared<events::KvEventPublisher>(
        std::make_shared<events::CallbackEventSink>(
            [&seen](std::uint64_t, const events::KvEventBatch& b, std::span<const std::uint8_t>) {
              std::lock_guard lock(seen.mu);
              seen.events.insert(seen.events.end(), b.events.begin(), b.events.end());
            }),
        o);
  };
  const auto check = [&](Seen& seen, events::KvEventPublisher& pub) {
    pub.flush();
    std::lock_guard lock(seen.mu);
    std::vector<std::uint64_t> stored;
    for (const auto& e : seen.events) {
      const auto* s = std::get_if<events::BlockStored>(&e);
      if (s == nullptr || s->medium != events::kMediumRemote) continue;
      if (stored.empty()) {
        EXPECT_EQ(s->parent_block_hash, std::nullopt);
      }
      stored.insert(stored.end(), s->block_hashes.begin(), s->block_hashes.end());
    }
    std::vector<std::uint64_t> want;
    for (const auto& h : hashes) want.push_back(h.value());
    EXPECT_EQ(stored, want);
  };

  Seen seen_a, seen_b;
  auto pub_a = publisher_for(seen_a);
  auto pub_b = publisher_for(seen_b);
  auto ca = remote_config(server.url());
  ca.remote_listeners = {pub_a->listener(events::kMediumRemote, ca.layout.page_size)};
  auto a = KvBlockManager::build(ca);
  compute(*a, hashes);
  a->drain();
  check(seen_a, *pub_a);  // written by A

  auto cb = remote_config(server.url());
  cb.remote_listeners = {pub_b->listener(events::kMediumRemote, cb.layout.page_size)};
  auto b = KvBlockManager::build(cb);
  compute(*b, hashes);
  b->drain();
  check(seen_b, *pub_b);  // found there by B's presence policy, not written again
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_offload_blocks_total",
                   {{"pipeline", "G2_to_G4"}, {"outcome", "transferred"}}),
            0.0);
  expect_balanced(*a);
  expect_balanced(*b);

  // Without a remote tier there is nothing to listen to.
  auto no_remote = test::config(4, 4, 0);
  no_remote.remote_listeners = {pub_a->listener(events::kMediumRemote, 16)};
  EXPECT_THROW((void)KvBlockManager::build(no_remote), UsageError);
}

TEST(RemoteTier, CorruptedValueIsACountedMissAndNeverServed) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(3, 8);
  auto ca = remote_config(server.url());
  auto a = KvBlockManager::build(ca);
  compute(*a, hashes);
  a->drain();
  // Flip one payload byte of block 5 behind the library's back.
  const std::string key = key_of(ca, hashes[5]);
  auto raw = server.raw();
  ASSERT_TRUE(raw);
  auto* got = static_cast<redisReply*>(redisCommand(raw.get(), "GET %s", key.c_str()));
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(got->type, REDIS_REPLY_STRING) << "no value under " << key;
  std::string value(got->str, got->len);
  freeReplyObject(got);
  value[kRemoteHeaderBytes + 100] = static_cast<char>(value[kRemoteHeaderBytes + 100] ^ 0x40);
  auto* set = static_cast<redisReply*>(
      redisCommand(raw.get(), "SET %s %b", key.c_str(), value.data(), value.size()));
  ASSERT_NE(set, nullptr);
  freeReplyObject(set);

  auto cb = remote_config(server.url());
  auto b = KvBlockManager::build(cb);
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.status, TransferStatus::kDone);
  EXPECT_EQ(s.counts.from(TierId::kG4), 5u) << "the prefix ends before the corrupted block";
  EXPECT_EQ(s.wrong_bytes, 0u);
  ASSERT_TRUE(s.error.has_value()) << "the onboarding says why its prefix ended early";
  EXPECT_EQ(s.error->kind, ErrorKind::kCorrupt) << s.error;
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_remote_errors_total", {{"kind", "corrupt"}}), 1.0);
  EXPECT_FALSE(b->host()->registry()->presence<G2>(std::span(&hashes[5], 1))[0])
      << "the corrupted block must not be registered in G2";
  expect_balanced(*a);
  expect_balanced(*b);
}

TEST(RemoteTier, BlocksOfAnotherModelDtypeOrNamespaceAreNeverServed) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(4, 6);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  a->drain();
  auto other_model = remote_config(server.url(), 16, 16, "model-b@1");
  auto other_dtype = remote_config(server.url());
  other_dtype.remote.dtype = "fp16";
  auto other_ns = remote_config(server.url());
  other_ns.remote.user_namespace = "tenant-2";
  for (auto* c : {&other_model, &other_dtype, &other_ns}) {
    auto b = KvBlockManager::build(*c);
    EXPECT_EQ(b->probe(hashes).from(TierId::kG4), 0u);
    const Served s = onboard_and_check(*b, hashes);
    EXPECT_EQ(s.blocks, 0u);
    expect_balanced(*b);
  }
  expect_balanced(*a);
}

TEST(RemoteTier, ServerDownDegradesToMissesWithoutStallingAndRecovers) {
  KVBM_NEED_REDIS();
  RedisServer server;
  // Both stores' backoff runs on this clock (RemoteTierConfig::env): the test ends it by hand.
  auto clock = std::make_shared<ManualClock>();
  auto env = std::make_shared<Env>(clock);
  auto ca = remote_config(server.url());
  ca.remote.env = env;
  auto a = KvBlockManager::build(ca);
  server.kill();
  const auto lost = prefix(5, 8);
  compute(*a, lost);  // G1 and G2 take them; G4 cannot
  a->drain();
  EXPECT_EQ(metric(*a->metrics_registry(), "kvbm_offload_blocks_total",
                   {{"pipeline", "G2_to_G4"}, {"outcome", "copy_failed"}}),
            8.0);
  // A's own tiers still serve them.
  const Served own = onboard_and_check(*a, lost);
  EXPECT_EQ(own.counts.total(), 8u);
  EXPECT_EQ(own.wrong_bytes, 0u);

  auto cb = remote_config(server.url());
  cb.remote.env = env;
  auto b = KvBlockManager::build(cb);
  const auto t0 = Clock::now();
  OnboardHandle h = b->onboard(lost);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(200)) << "onboard() waited for G4";
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.counts().total(), 0u);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  h = OnboardHandle();

  server.start();  // back, empty: A's writes succeed again once its backoff ends
  // Not before: however long the restart took, no time passed on the stores' clock.
  const auto waiting = prefix(99, 8);
  compute(*a, waiting);
  a->drain();
  EXPECT_EQ(server.command({"DBSIZE"}), "0") << "A wrote to G4 inside its backoff";
  // Past the longest backoff: the next call of each store tries the server again, and succeeds.
  clock->advance(ca.remote.backoff_max);
  const auto fresh = prefix(100, 8);
  compute(*a, fresh);
  a->drain();
  const Served s = onboard_and_check(*b, fresh);
  EXPECT_EQ(s.counts.from(TierId::kG4), 8u) << "G4 did not come back after the backoff";
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

// KvBlockManagerConfig::env reaches the store of G4 (remote.env unset): its backoff after a
// frozen server ends when that clock is advanced, not before.
TEST(RemoteTier, TheManagersEnvDecidesTheStoresBackoff) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(9, 8);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  a->drain();
  auto clock = std::make_shared<ManualClock>();
  auto cb = remote_config(server.url());              // B computes nothing: its pipelines stay idle
  cb.remote.backoff_initial = std::chrono::hours(1);  // only the clock below can end it
  cb.remote.backoff_max = std::chrono::hours(1);
  cb.env = std::make_shared<Env>(clock);
  auto b = KvBlockManager::build(cb);
  server.pause();  // the probe's call times out (real time): the server goes into backoff
  EXPECT_EQ(b->probe(hashes).from(TierId::kG4), 0u);
  server.resume();
  EXPECT_EQ(b->probe(hashes).from(TierId::kG4), 0u) << "asked the server inside its backoff";
  clock->advance(cb.remote.backoff_initial);
  EXPECT_EQ(b->probe(hashes).from(TierId::kG4), 8u);
  expect_balanced(*a);
  expect_balanced(*b);
}

TEST(RemoteTier, FullServerFailsOnlyTheWritesThatDoNotFit) {
  KVBM_NEED_REDIS();
  RedisServer server({.extra_args = {"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"}});
  auto ca = remote_config(server.url(), 64, 64);
  auto a = KvBlockManager::build(ca);
  const auto hashes = prefix(7, 600);  // 1.2 MB of 2 KiB blocks
  for (std::size_t i = 0; i < hashes.size(); i += 50) {
    compute(*a, std::span(hashes).subspan(i, 50));
    a->drain();
  }
  const double failed = metric(*a->metrics_registry(), "kvbm_offload_blocks_total",
                               {{"pipeline", "G2_to_G4"}, {"outcome", "copy_failed"}});
  const double stored = metric(*a->metrics_registry(), "kvbm_offload_blocks_total",
                               {{"pipeline", "G2_to_G4"}, {"outcome", "transferred"}});
  EXPECT_GT(failed, 0.0);
  EXPECT_GT(stored, 0.0);
  EXPECT_EQ(failed + stored, 600.0);
  EXPECT_GT(metric(*a->metrics_registry(), "kvbm_remote_errors_total", {{"kind", "oom"}}), 0.0);
  auto b = KvBlockManager::build(remote_config(server.url(), 512, 512));
  const Served s = onboard_and_check(*b, hashes);
  // The writes of a batch race on two connections: the blocks stored need not
  // be the first ones. B gets exactly the leading run of stored blocks.
  std::size_t leading = 0;
  while (leading < hashes.size() &&
         server.command({"EXISTS", key_of(ca, hashes[leading])}) == "1") {
    ++leading;
  }
  EXPECT_EQ(s.counts.from(TierId::kG4), leading);
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

TEST(RemoteTier, CancellingAnOnboardingThatWaitsOnAFrozenServer) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto hashes = prefix(8, 8);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  a->drain();
  auto cb = remote_config(server.url());
  cb.remote.command_timeout = std::chrono::milliseconds(2000);
  auto b = KvBlockManager::build(cb);
  ASSERT_EQ(b->probe(hashes).from(TierId::kG4), 8u);  // B's connections are up
  server.pause();                                     // connections stay open; nothing answers
  const auto t0 = Clock::now();
  OnboardHandle h = b->onboard(hashes);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(200)) << "onboard() waited for G4";
  // Lets the fetch worker reach the frozen server, so that the cancel below
  // races a GET in flight (nothing tells when one is; a cancel that comes
  // first passes too, testing less).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(h.status(), TransferStatus::kTransferring);
  const auto t1 = Clock::now();
  EXPECT_TRUE(h.cancel());
  EXPECT_LT(Clock::now() - t1, std::chrono::milliseconds(500))
      << "cancel() waited for the frozen server";
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
  EXPECT_TRUE(h.take_blocks().empty());
  expect_balanced(*b);
  server.resume();
  b->drain();  // waits for the stage that asked G4: what it brought is released
  expect_balanced(*b);
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.counts.total(), 8u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

// B for the tests below: G1 and G2 of 16 blocks, G3 of 64 in `dir` (read by
// the thread pool, whose preads a test can gate), G4 on `url`, everything
// written through. Each of `in_g3` is computed, then 16 other blocks push them
// out of G1 and G2: locally, G3 alone keeps them.
std::unique_ptr<KvBlockManager> with_g3(const std::string& url, const std::filesystem::path& dir,
                                        std::vector<std::span<const SequenceHash>> in_g3) {
  auto c = remote_config(url);
  c.disk.blocks = 64;
  c.disk_directory = dir;
  c.disk_io_engine = DiskIoEngine::kThreadPool;
  auto kv = KvBlockManager::build(c);
  for (const auto run : in_g3) compute(*kv, run);
  kv->drain();
  compute(*kv, prefix(999, 16));
  kv->drain();
  return kv;
}

TEST(RemoteTier, APrefixAcrossG3AndG4CompletesAsOneOnboarding) {
  KVBM_NEED_REDIS();
  RedisServer server;
  test::TempDir dir("remote-plan");
  const auto hashes = prefix(11, 12);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  a->drain();
  const std::span<const SequenceHash> all(hashes);
  auto b = with_g3(server.url(), dir.path(), {all.first(4), all.subspan(8)});
  std::vector<TierId> runs(12, TierId::kG3);
  std::fill(runs.begin() + 4, runs.begin() + 8, TierId::kG4);
  std::vector<std::optional<TierId>> where(runs.begin(), runs.end());
  ASSERT_EQ(b->locate(hashes), where) << "G3 holds positions 0-3 and 8-11, G4 alone 4-7";

  // The walk's G3 run is copied up from the caller's thread; the G4 run
  // (fetched into G2) and the G3 run after it from the remote stage: one
  // onboarding, one source per position, in order.
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.status, TransferStatus::kDone);
  EXPECT_FALSE(s.error.has_value()) << s.error;
  EXPECT_EQ(s.sources, runs);
  EXPECT_EQ(s.counts.from(TierId::kG3), 8u);
  EXPECT_EQ(s.counts.from(TierId::kG4), 4u);
  EXPECT_EQ(s.counts.total(), 12u);
  EXPECT_EQ(s.counts.failed, 0u);
  EXPECT_EQ(s.counts.no_space, 0u);
  EXPECT_EQ(s.blocks, 12u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_onboard_blocks_total", {{"tier", "G3"}}), 8.0);
  EXPECT_EQ(metric(*b->metrics_registry(), "kvbm_onboard_blocks_total", {{"tier", "G4"}}), 4.0);
  // The G4 run reached G1 through G2, where it is registered.
  const std::vector<bool> in_g2 = b->host()->registry()->presence<G2>(all.subspan(4, 4));
  EXPECT_EQ(in_g2, std::vector<bool>(4, true));
  b->drain();
  EXPECT_EQ(b->device().pool_counts().in_use, 0u);
  EXPECT_EQ(b->host()->pool_counts().in_use, 0u);
  EXPECT_EQ(b->disk()->pool_counts().in_use, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

// A G3 read that waits until the test lets it go (then reads for real).
std::mutex g_gate_mu;
std::condition_variable g_gate_cv;
bool g_gate_open = true;
std::atomic<int> g_reads_waiting{0};

std::int64_t gated_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  g_reads_waiting.fetch_add(1);
  {
    std::unique_lock lock(g_gate_mu);
    g_gate_cv.wait(lock, [] { return g_gate_open; });
  }
  return io::real_syscalls().pread(fd, buf, count, offset);
}

void set_gate(bool open) {
  {
    std::lock_guard lock(g_gate_mu);
    g_gate_open = open;
  }
  g_gate_cv.notify_all();
}

// The copies after a G4 run are the onboarding's own: cancel() waits for
// them as for the walk's, and returns with every block of the onboarding
// released (the G4 round trip alone is not waited for).
TEST(RemoteTier, CancelWaitsForTheCopiesAfterAG4RunAndReleasesEverything) {
  KVBM_NEED_REDIS();
  RedisServer server;
  test::TempDir dir("remote-plan");
  const auto hashes = prefix(12, 12);
  auto a = KvBlockManager::build(remote_config(server.url()));
  compute(*a, hashes);
  a->drain();
  const std::span<const SequenceHash> all(hashes);
  auto b = with_g3(server.url(), dir.path(), {all.subspan(4)});
  ASSERT_EQ(b->probe(hashes).from(TierId::kG4), 4u);
  io::SyscallTable table = io::real_syscalls();
  table.pread = gated_pread;
  {
    const io::ScopedSyscallOverride gate(table);
    set_gate(false);
    g_reads_waiting = 0;
    OnboardHandle h = b->onboard(hashes);
    // The remote stage fetched the G4 run and its G3 copies wait at the gate.
    ASSERT_TRUE(test::eventually([] { return g_reads_waiting.load() > 0; }));
    auto cancelled = std::async(std::launch::async, [&] {
      const bool ok = h.cancel();
      return std::pair{ok, b->device().pool_counts().in_use};
    });
    EXPECT_EQ(cancelled.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
        << "cancel() returned while copies of the onboarding were in flight";
    set_gate(true);
    const auto [ok, g1_in_use] = cancelled.get();
    EXPECT_TRUE(ok);
    EXPECT_EQ(g1_in_use, 0u) << "cancel() returned before the onboarding's G1 blocks were back";
    EXPECT_EQ(h.status(), TransferStatus::kCancelled);
    EXPECT_TRUE(h.take_blocks().empty());
    b->drain();
  }
  EXPECT_EQ(b->stats().onboarding.cancelled, 1u);
  EXPECT_EQ(b->device().pool_counts().in_use, 0u);
  EXPECT_EQ(b->host()->pool_counts().in_use, 0u);
  EXPECT_EQ(b->disk()->pool_counts().in_use, 0u);
  expect_balanced(*b);
  // What G4 brought stays registered in G2: the next onboarding finds it there.
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.counts.from(TierId::kG2), 4u);
  EXPECT_EQ(s.counts.from(TierId::kG3), 8u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

TEST(RemoteTier, OnEvictionWritesWhatG2EvictsAndTheWalkCrossesTiers) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto ca = remote_config(server.url(), 8, 4);
  ca.host_to_remote = OffloadMode::kOnEviction;
  auto a = KvBlockManager::build(ca);
  const auto hashes = prefix(9, 12);
  for (std::size_t i = 0; i < hashes.size(); i += 2) {
    compute(*a, std::span(hashes).subspan(i, 2));
    a->drain();
  }
  // G1 holds the last 8 blocks, G2 the last 4; G2 evicted the first 8 into G4.
  const OnboardCounts p = a->probe(hashes);
  EXPECT_EQ(p.from(TierId::kG4), 4u) << "G4 is asked only for what no local tier holds";
  EXPECT_EQ(p.from(TierId::kG1), 8u);
  EXPECT_EQ(p.from(TierId::kG2), 0u);

  auto b = KvBlockManager::build(remote_config(server.url(), 16, 16));
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.counts.from(TierId::kG4), 8u) << "B finds what A's G2 evicted, and only that";
  EXPECT_EQ(s.wrong_bytes, 0u);

  // A's own prefix crosses the tiers: 4 blocks from G4, then 4 G1 hits.
  const Served own = onboard_and_check(*a, std::span(hashes).first(8));
  EXPECT_EQ(own.status, TransferStatus::kDone);
  EXPECT_EQ(own.sources, (std::vector<TierId>{TierId::kG4, TierId::kG4, TierId::kG4, TierId::kG4,
                                              TierId::kG1, TierId::kG1, TierId::kG1, TierId::kG1}));
  EXPECT_EQ(own.wrong_bytes, 0u);
  expect_balanced(*a);
  expect_balanced(*b);
}

TEST(RemoteTier, FourInstancesShareOverlappingPrefixesEveryByteVerified) {
  KVBM_NEED_REDIS();
  RedisServer server;
  constexpr int kInstances = 4;
  constexpr int kRounds = 25;
  std::atomic<std::size_t> wrong{0}, from_g4{0}, unbalanced{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kInstances; ++t) {
    threads.emplace_back([&, t] {
      auto kv = KvBlockManager::build(remote_config(server.url(), 24, 24));
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 100);
      for (int r = 0; r < kRounds; ++r) {
        // One of five shared system prompts, then a suffix of its own.
        const auto shared = prefix(1000 + rng() % 5, 6);
        auto request = shared;
        for (const auto& h : prefix(2000 + static_cast<std::uint64_t>(t) * 100 + r, 2)) {
          request.push_back(chain(request.back(), h.value()));
        }
        const Served s = onboard_and_check(*kv, request);
        wrong += s.wrong_bytes;
        from_g4 += s.counts.from(TierId::kG4);
        compute(*kv, std::span(request).subspan(s.blocks));
        kv->drain();
      }
      if (!kv->audit().empty()) ++unbalanced;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(from_g4.load(), 0u) << "no instance reused another's blocks";
  EXPECT_EQ(unbalanced.load(), 0u);
}

TEST(RemoteTier, AnotherProcessOnboardsWhatOneProcessOffloaded) {
  KVBM_NEED_REDIS();
  if (cuda_device_available()) {
    KVBM_SKIP_OR_FAIL(
        "GPU present: process A is a forked child, which cannot use the GPU this process "
        "opened; examples.remote_two_instances runs the same with a GPU");
  }
  RedisServer server;
  const auto hashes = prefix(10, 16);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // process A: computes, offloads and exits
    int rc = 1;
    try {
      auto a = KvBlockManager::build(remote_config(server.url(), 32, 32));
      compute(*a, hashes);
      a->drain();
      rc = a->audit().empty() ? 0 : 2;
    } catch (const std::exception&) {
      rc = 3;
    }
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto b = KvBlockManager::build(remote_config(server.url(), 32, 32));  // process B
  const Served s = onboard_and_check(*b, hashes);
  EXPECT_EQ(s.counts.from(TierId::kG4), 16u);
  EXPECT_EQ(s.wrong_bytes, 0u);
  expect_balanced(*b);
}

TEST(RemoteTier, ConfigErrorsNameTheOption) {
  auto expect_error = [](KvBlockManagerConfig c, const std::string& option) {
    try {
      (void)KvBlockManager::build(std::move(c));
      ADD_FAILURE() << "expected an error naming " << option;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("KvBlockManagerConfig." + option), std::string::npos)
          << e.what();
    }
  };
  auto no_host = remote_config("redis://127.0.0.1:1/0", 8, 0);
  expect_error(no_host, "remote.urls");
  auto no_model = remote_config("redis://127.0.0.1:1/0", 8, 8, "");
  expect_error(no_model, "remote.model");
  auto metadata = remote_config("redis://127.0.0.1:1/0");
  metadata.move_bytes = false;
  expect_error(metadata, "remote.urls");
  auto staging = remote_config("redis://127.0.0.1:1/0");
  staging.remote.staging_blocks = 0;
  expect_error(staging, "remote.staging_blocks");
}

}  // namespace remote_tier_test
}  // namespace kvbm
