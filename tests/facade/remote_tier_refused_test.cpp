// tests/facade/remote_tier_refused_test.cpp: G4 that refuses kvbm (a wrong password, an ACL
// user whose key pattern leaves out kvbm's keys, an ACL user without SET), through
// KvBlockManager, against a real redis-server started by each test on a loopback port.
//
// In every case the engine goes on: no call throws or blocks, onboarding ends with misses,
// every pool balances (reset + inactive + in use == total, and audit()), and the tier is
// reported as refused (not down) with the server's reply in stats() and in the metrics
// (kvbm_remote_state{state="refused"}, kvbm_remote_refused_total{reason}). Once the server
// accepts the credentials again, the state goes back to ok.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "facade/facade_test_util.h"
#include "kvbm/hashing.h"
#include "kvbm/kv_block_manager.h"
#include "remote/redis_server.h"

namespace kvbm {
namespace remote_tier_refused_test {

using test::compute;
using test::prefix;
using test::RedisServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define KVBM_NEED_REDIS()                                                        \
  do {                                                                           \
    if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage); \
  } while (0)

constexpr const char* kAdmin = "admin-Pa55";
constexpr const char* kSecret = "kvbm-Pa55";  // searched for in stats and metrics

KvBlockManagerConfig refused_config(const std::string& url) {
  KvBlockManagerConfig c = test::config(16, 16, 0);
  c.device_to_host = OffloadMode::kWriteThrough;
  c.remote.urls = {url};
  c.remote.model = "model-r@1";
  c.remote.dtype = "bf16";
  c.remote.connect_timeout = 200ms;
  c.remote.command_timeout = 500ms;
  c.remote.backoff_initial = 20ms;
  c.remote.backoff_max = 100ms;
  return c;
}

// The sum of the series of `name` whose labels include `labels`.
double metric(const prometheus::Registry& r, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  double sum = 0;
  for (const auto& fam : r.Collect()) {
    if (fam.name != name) continue;
    for (const auto& m : fam.metric) {
      std::size_t matched = 0;
      for (const auto& l : m.label) {
        const auto it = labels.find(l.name);
        if (it != labels.end() && it->second == l.value) ++matched;
      }
      if (matched == labels.size()) sum += m.counter.value + m.gauge.value;
    }
  }
  return sum;
}

// Every tier's blocks accounted for.
void expect_every_block_accounted(const KvBlockManager& kv) {
  const KvBlockManagerStats s = kv.stats();
  for (const TierStats& t : s.tiers) {
    EXPECT_EQ(t.blocks.reset + t.blocks.inactive + t.blocks.in_use, t.blocks.total)
        << "tier " << to_string(t.tier);
  }
  EXPECT_EQ(kv.audit(), "");
}

// Options of a server whose default user has a password.
RedisServer::Options admin_options() {
  return {.extra_args = {"--requirepass", kAdmin}, .password = kAdmin};
}

// Adds the ACL user `kvbm` (password kSecret) with `rules` ("~kvbm:* +get ...").
void add_kvbm_user(RedisServer& s, const std::string& rules) {
  std::vector<std::string> args = {"ACL",           "SETUSER", "kvbm",
                                   "reset",         "on",      std::string(">") + kSecret,
                                   "resetchannels", "-@all"};
  for (std::size_t b = 0, e = 0; b < rules.size(); b = e + 1) {
    e = rules.find(' ', b);
    if (e == std::string::npos) e = rules.size();
    args.push_back(rules.substr(b, e - b));
  }
  ASSERT_EQ(s.command(args), "OK");
}

std::string kvbm_url(const RedisServer& s) {
  return "redis://kvbm:" + std::string(kSecret) + "@127.0.0.1:" + std::to_string(s.port()) + "/0";
}

// What the writer (A: computes and offloads) and the reader (B: onboards from G4) saw.
struct Outcome {
  RemoteStoreStats writer, reader;
  std::size_t reader_blocks = 0;  ///< blocks B's onboarding served
  std::shared_ptr<prometheus::Registry> writer_metrics, reader_metrics;
  std::unique_ptr<KvBlockManager> a, b;  ///< alive: a store's series go with it
};

// A computes 8 blocks (written through G2 to G4), B onboards them; no call may throw or take
// longer than the store's bounds.
Outcome write_then_read(const std::string& url) {
  Outcome out;
  out.a = KvBlockManager::build(refused_config(url));
  out.b = KvBlockManager::build(refused_config(url));
  KvBlockManager* a = out.a.get();
  KvBlockManager* b = out.b.get();
  const auto hashes = prefix(3, 8);
  compute(*a, hashes);
  a->drain();
  const auto t0 = Clock::now();
  OnboardHandle h = b->onboard(hashes);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_LT(Clock::now() - t0, 3s) << "onboarding waited on a refusing server";
  out.reader_blocks = h.take_blocks().size();
  h = OnboardHandle();
  expect_every_block_accounted(*a);
  expect_every_block_accounted(*b);
  out.writer = *a->stats().store(TierId::kG4);
  out.reader = *b->stats().store(TierId::kG4);
  out.writer_metrics = a->metrics_registry();
  out.reader_metrics = b->metrics_registry();
  return out;
}

// `s` refused with a refusal of `kind` whose text holds `text`, user `user`, no password.
void expect_refused(const RemoteStoreStats& s, RemoteRefusal kind, const std::string& text,
                    const std::string& user, const prometheus::Registry& metrics) {
  EXPECT_EQ(s.state, RemoteState::kRefused) << to_string(s.state);
  EXPECT_EQ(s.servers, 1u);
  EXPECT_EQ(s.servers_refused, 1u);
  EXPECT_EQ(s.servers_down, 0u);  // refused is not down
  EXPECT_GT(s.count(kind), 0u);
  EXPECT_EQ(s.count(kind), s.count(RemoteStatus::kAccessDenied));
  EXPECT_NE(s.refusal.find(text), std::string::npos) << s.refusal;
  EXPECT_EQ(s.refused_user, user);
  EXPECT_NE(s.refused_server.find("127.0.0.1:"), std::string::npos) << s.refused_server;
  EXPECT_EQ(s.refused_server.find(kSecret), std::string::npos) << s.refused_server;
  EXPECT_EQ(s.refusal.find(kSecret), std::string::npos) << s.refusal;
  EXPECT_EQ(metric(metrics, "kvbm_remote_state", {{"pool", "G4"}, {"state", "refused"}}), 1.0);
  EXPECT_EQ(metric(metrics, "kvbm_remote_state", {{"pool", "G4"}, {"state", "ok"}}), 0.0);
  EXPECT_EQ(metric(metrics, "kvbm_remote_state", {{"pool", "G4"}, {"state", "down"}}), 0.0);
  EXPECT_EQ(metric(metrics, "kvbm_remote_refused_total",
                   {{"pool", "G4"}, {"reason", std::string(to_string(kind))}}),
            static_cast<double>(s.count(kind)));
}

TEST(RemoteTierRefused, AWrongPasswordIsRefusedNotDownAndServesMisses) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  const std::string url =
      "redis://:" + std::string(kSecret) + "@127.0.0.1:" + std::to_string(server.port()) + "/0";
  const Outcome o = write_then_read(url);
  EXPECT_EQ(o.reader_blocks, 0u);
  expect_refused(o.writer, RemoteRefusal::kWrongPass, "WRONGPASS", "default", *o.writer_metrics);
  expect_refused(o.reader, RemoteRefusal::kWrongPass, "WRONGPASS", "default", *o.reader_metrics);
  EXPECT_EQ(o.writer.puts, 0u);
  EXPECT_GT(o.writer.failed_puts, 0u);
}

TEST(RemoteTierRefused, NoPasswordIsRefusedAsNoauth) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  const Outcome o = write_then_read(server.url());
  EXPECT_EQ(o.reader_blocks, 0u);
  expect_refused(o.writer, RemoteRefusal::kNoAuth, "NOAUTH", "default", *o.writer_metrics);
  expect_refused(o.reader, RemoteRefusal::kNoAuth, "NOAUTH", "default", *o.reader_metrics);
}

TEST(RemoteTierRefused, AKeyPatternWithoutKvbmsKeysIsRefusedNamingTheKey) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  add_kvbm_user(server, "~other:* +get +set +exists");
  const Outcome o = write_then_read(kvbm_url(server));
  EXPECT_EQ(o.reader_blocks, 0u);
  // The reply names neither key nor command on Redis 7; the refusal adds both.
  expect_refused(o.writer, RemoteRefusal::kNoPerm, "NOPERM", "kvbm", *o.writer_metrics);
  EXPECT_NE(o.writer.refusal.find("(SET kvbm:"), std::string::npos) << o.writer.refusal;
  expect_refused(o.reader, RemoteRefusal::kNoPerm, "NOPERM", "kvbm", *o.reader_metrics);
  EXPECT_NE(o.reader.refusal.find(" kvbm:"), std::string::npos) << o.reader.refusal;
}

TEST(RemoteTierRefused, AUserWithoutSetIsRefusedItsWritesAndStillReads) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  add_kvbm_user(server, "~kvbm:* +get +exists");
  const Outcome o = write_then_read(kvbm_url(server));
  EXPECT_EQ(o.reader_blocks, 0u);  // nothing could be written
  expect_refused(o.writer, RemoteRefusal::kNoPerm, "'set' command", "kvbm", *o.writer_metrics);
  EXPECT_EQ(o.writer.puts, 0u);
  // The reader's own commands pass: its tier is not refused.
  EXPECT_EQ(o.reader.state, RemoteState::kOk);
  EXPECT_EQ(o.reader.count(RemoteStatus::kAccessDenied), 0u);
  EXPECT_EQ(metric(*o.reader_metrics, "kvbm_remote_state", {{"pool", "G4"}, {"state", "ok"}}), 1.0);
}

TEST(RemoteTierRefused, TheStateIsOkAgainOnceTheServerAcceptsTheCommand) {
  KVBM_NEED_REDIS();
  RedisServer server(admin_options());
  add_kvbm_user(server, "~kvbm:* +get +exists");
  auto a = KvBlockManager::build(refused_config(kvbm_url(server)));
  compute(*a, prefix(4, 4));
  a->drain();
  ASSERT_NE(a->stats().store(TierId::kG4), nullptr);
  ASSERT_EQ(a->stats().store(TierId::kG4)->state, RemoteState::kRefused);
  // The administrator grants SET: the next write passes and the tier is ok again.
  ASSERT_EQ(server.command({"ACL", "SETUSER", "kvbm", "+set"}), "OK");
  compute(*a, prefix(5, 4));
  a->drain();
  const RemoteStoreStats s = *a->stats().store(TierId::kG4);
  EXPECT_EQ(s.state, RemoteState::kOk);
  EXPECT_GT(s.puts, 0u);
  EXPECT_NE(s.refusal.find("NOPERM"), std::string::npos) << "the last refusal is kept";
  EXPECT_EQ(metric(*a->metrics_registry(), "kvbm_remote_state", {{"pool", "G4"}, {"state", "ok"}}),
            1.0);
  EXPECT_EQ(
      metric(*a->metrics_registry(), "kvbm_remote_state", {{"pool", "G4"}, {"state", "refused"}}),
      0.0);
  expect_every_block_accounted(*a);
}

TEST(RemoteTierRefused, AServerThatIsDownIsDownNotRefused) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto a = KvBlockManager::build(refused_config(server.url()));
  server.kill();
  compute(*a, prefix(6, 4));
  a->drain();
  const RemoteStoreStats s = *a->stats().store(TierId::kG4);
  EXPECT_EQ(s.state, RemoteState::kDown);
  EXPECT_EQ(s.servers_down, 1u);
  EXPECT_EQ(s.servers_refused, 0u);
  EXPECT_EQ(s.refusal, "");
  EXPECT_EQ(
      metric(*a->metrics_registry(), "kvbm_remote_state", {{"pool", "G4"}, {"state", "down"}}),
      1.0);
  expect_every_block_accounted(*a);
}

}  // namespace remote_tier_refused_test
}  // namespace kvbm
