// tests/router_process/remote_health_test.cpp: kvbm-router --remote (the built
// program, run as a child) checks the shared G4 on a real redis-server started
// by the test on a loopback port, and GET /health says what it found: "ok" with
// an ACL user that has kvbm's rights; "refused" with the reason wrongpass for a
// wrong password (the password in no answer nor log line), noauth for none, and noperm for a user
// whose key pattern leaves out kvbm's keys, with the server (its URL without the
// password), the user and the server's reply; "down", not refused, once the
// server is killed, and "ok" again when it is back. /metrics carries the
// library's kvbm_remote_state and kvbm_remote_refused_total. Without --remote
// /health has no "g4"; a bad --remote is refused at start, its password masked.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "remote/redis_server.h"
#include "router_child.h"
#include "router_process_test_util.h"
#include "skip_or_fail.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::router_process {
namespace remote_health_test {

using kvbm::test::RedisServer;
using nlohmann::json;
using test::Child;
using test::HttpClient;
using test::HttpResponse;
using test::poll_until;

#define KVBM_NEED_REDIS() \
  if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage)

constexpr const char* kAdmin = "admin-Pa55";
constexpr const char* kSecret = "kvbm-Pa55";      // the kvbm user's password
constexpr const char* kWrong = "wrong-Pa55word";  // must appear in no output

// A server whose default user has a password, with the ACL user `kvbm` (password kSecret)
// whose key pattern is `keys`.
std::unique_ptr<RedisServer> server_with_user(const std::string& keys) {
  auto s = std::make_unique<RedisServer>(
      RedisServer::Options{.extra_args = {"--requirepass", kAdmin}, .password = kAdmin});
  EXPECT_EQ(s->command({"ACL", "SETUSER", "kvbm", "reset", "on", std::string(">") + kSecret,
                        "resetchannels", "-@all", "+get", "+set", "+exists", keys}),
            "OK");
  return s;
}

std::string url_of(const RedisServer& s, const std::string& password) {
  return "redis://kvbm:" + password + "@127.0.0.1:" + std::to_string(s.port()) + "/0";
}

// kvbm-router on a free port checking G4 at `remote` every 50 ms (none when empty).
struct Router {
  explicit Router(const std::string& remote) : child(args(remote)), url(listening_url(child)) {}
  static std::vector<std::string> args(const std::string& remote) {
    std::vector<std::string> a = {"--listen", "127.0.0.1:0", "--remote-check-ms", "50"};
    if (!remote.empty()) a.insert(a.end(), {"--remote", remote});
    return a;
  }
  HttpResponse health() { return http.get(url + "/health"); }
  // Returns /health's "g4" once a check has ended and its state is `state` (the last one
  // seen after 10 s).
  json g4_when(const std::string& state) {
    json g4;
    poll_until([&] {
      const HttpResponse r = health();
      const auto j = json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.contains("g4")) return false;
      g4 = j["g4"];
      return g4["checks"].get<std::uint64_t>() > 0 && g4["state"] == state;
    });
    return g4;
  }
  Child child;
  std::string url;
  HttpClient http;
};

TEST(RouterRemoteHealth, WithoutRemoteHealthHasNoG4) {
  Router r("");
  ASSERT_FALSE(r.url.empty());
  const auto j = json::parse(r.health().body);
  EXPECT_FALSE(j.contains("g4")) << j.dump();
}

// A bad --remote is refused at start (exit 2), as kvbm-replay refuses it, the password masked.
TEST(RouterRemoteHealth, BadRemoteUrlIsRefusedWithoutThePassword) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--remote", std::string("redis://kvbm:") + kWrong + "@h:x/0"},
        std::vector<std::string>{"--remote", "redis+cluster://h:7000", "--remote",
                                 "redis://h:1"}}) {
    Child child(args);
    EXPECT_EQ(child.wait_exit(), 2);
    const std::string err = child.err();
    EXPECT_NE(err.find("kvbm-router: --remote: "), std::string::npos) << err;
    EXPECT_EQ(err.find(kWrong), std::string::npos) << err;
  }
}

TEST(RouterRemoteHealth, GoodCredentialsAreOk) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~kvbm:*");
  Router r(url_of(*s, kSecret));
  ASSERT_FALSE(r.url.empty());
  const json g4 = r.g4_when("ok");
  EXPECT_EQ(g4["state"], "ok") << g4.dump();
  EXPECT_TRUE(g4["reason"].is_null()) << g4.dump();
  EXPECT_EQ(g4["servers"], 1) << g4.dump();
  const std::string metrics = r.http.get(r.url + "/metrics").body;
  EXPECT_NE(metrics.find(R"(kvbm_remote_state{pool="G4",state="ok"} 1)"), std::string::npos)
      << metrics;
  // The probe wrote one kvbm key, which expires.
  EXPECT_EQ(s->command({"DBSIZE"}), "1");
  const std::string key = s->command({"RANDOMKEY"});
  EXPECT_TRUE(key.starts_with("kvbm:")) << key;
  const int ttl = std::stoi(s->command({"TTL", key}));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 60);
}

TEST(RouterRemoteHealth, WrongPasswordIsRefusedWithoutThePassword) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~kvbm:*");
  Router r(url_of(*s, kWrong));
  ASSERT_FALSE(r.url.empty());
  const json g4 = r.g4_when("refused");
  EXPECT_EQ(g4["state"], "refused") << g4.dump();
  EXPECT_EQ(g4["reason"], "wrongpass") << g4.dump();
  EXPECT_EQ(g4["user"], "kvbm") << g4.dump();
  EXPECT_EQ(g4["server"], "redis://kvbm@127.0.0.1:" + std::to_string(s->port()) + "/0");
  EXPECT_NE(g4["refusal"].get<std::string>().find("WRONGPASS"), std::string::npos) << g4.dump();
  EXPECT_EQ(g4["servers_refused"], 1) << g4.dump();
  const HttpResponse h = r.health();
  EXPECT_EQ(h.body.find(kWrong), std::string::npos) << h.body;
  const std::string metrics = r.http.get(r.url + "/metrics").body;
  EXPECT_NE(metrics.find(R"(kvbm_remote_state{pool="G4",state="refused"} 1)"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kvbm_remote_refused_total{pool="G4",reason="wrongpass"})"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find(kWrong), std::string::npos);
  r.child.signal(SIGTERM);
  EXPECT_EQ(r.child.wait_exit(), 0);
  const std::string err = r.child.err();
  EXPECT_NE(err.find("WRONGPASS"), std::string::npos) << err;  // logged, once
  EXPECT_EQ(err.find(kWrong), std::string::npos) << err;
}

TEST(RouterRemoteHealth, NoPasswordIsRefusedNoAuth) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~kvbm:*");
  Router r("redis://127.0.0.1:" + std::to_string(s->port()) + "/0");
  ASSERT_FALSE(r.url.empty());
  const json g4 = r.g4_when("refused");
  EXPECT_EQ(g4["reason"], "noauth") << g4.dump();
  EXPECT_EQ(g4["user"], "default") << g4.dump();
  EXPECT_NE(g4["refusal"].get<std::string>().find("NOAUTH"), std::string::npos) << g4.dump();
}

TEST(RouterRemoteHealth, KeyPatternWithoutKvbmKeysIsRefusedNoPerm) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~other:*");
  Router r(url_of(*s, kSecret));
  ASSERT_FALSE(r.url.empty());
  const json g4 = r.g4_when("refused");
  EXPECT_EQ(g4["state"], "refused") << g4.dump();
  EXPECT_EQ(g4["reason"], "noperm") << g4.dump();
  EXPECT_EQ(g4["user"], "kvbm") << g4.dump();
  EXPECT_NE(g4["refusal"].get<std::string>().find("NOPERM"), std::string::npos) << g4.dump();
  EXPECT_NE(g4["refusal"].get<std::string>().find("kvbm:"), std::string::npos) << g4.dump();
  EXPECT_EQ(r.health().body.find(kSecret), std::string::npos);
}

TEST(RouterRemoteHealth, KilledServerIsDownNotRefusedAndOkOnceBack) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~kvbm:*");
  Router r(url_of(*s, kSecret));
  ASSERT_FALSE(r.url.empty());
  EXPECT_EQ(r.g4_when("ok")["state"], "ok");
  s->kill();
  const json down = r.g4_when("down");
  EXPECT_EQ(down["state"], "down") << down.dump();
  EXPECT_EQ(down["servers_down"], 1) << down.dump();
  EXPECT_EQ(down["servers_refused"], 0) << down.dump();
  EXPECT_FALSE(down.contains("refusal")) << down.dump();
  s->start();  // back, empty: the ACL user is gone, so it refuses until it is made again
  EXPECT_EQ(s->command({"ACL", "SETUSER", "kvbm", "reset", "on", std::string(">") + kSecret,
                        "resetchannels", "-@all", "+get", "+set", "+exists", "~kvbm:*"}),
            "OK");
  const json back = r.g4_when("ok");
  EXPECT_EQ(back["state"], "ok") << back.dump();
}

#if KVBM_HAVE_ZMQ
// A refused G4 degrades /health as a stale instance does: 200, status "degraded".
TEST(RouterRemoteHealth, RefusedG4DegradesHealth) {
  KVBM_NEED_REDIS();
  auto s = server_with_user("~kvbm:*");
  test::KvbmPublisher engine("engine-0");
  for (const char* password : {kSecret, kWrong}) {
    Child child({"--listen", "127.0.0.1:0", "--remote-check-ms", "50", "--instance", engine.spec(),
                 "--remote", url_of(*s, password)});
    const std::string url = test::listening_url(child);
    ASSERT_FALSE(url.empty());
    HttpClient http;
    const std::string want = password == kSecret ? "ok" : "degraded";
    HttpResponse h;
    EXPECT_TRUE(poll_until([&] {
      h = http.get(url + "/health");
      const auto j = json::parse(h.body, nullptr, false);
      return !j.is_discarded() && j["g4"]["checks"].get<std::uint64_t>() > 0 && j["status"] == want;
    })) << h.body;
    EXPECT_EQ(h.status, 200) << h.body;
  }
}
#endif

}  // namespace remote_health_test
}  // namespace kvbm::router_process
