// tests/router_process/http_api_test.cpp: kvbm-router's HTTP/JSON API
// (tools/router/router_service.h on tools/router/http_server.h) over real
// loopback sockets: real publishers (kvbm's own, and one speaking vLLM's
// original wire layout) feed the index over ZeroMQ, a real HTTP client
// (libcurl) routes and finishes, and every malformed request is answered with
// its status and a message that says what to send. Skipped without ZeroMQ.

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "kvbm/events/event_group.h"
#include "kvbm/router/kv_event_feed.h"
#include "kvbm/router/kv_router.h"
#include "router/http_server.h"
#include "router/options.h"
#include "router/router_service.h"
#include "router_process_test_util.h"
#include "skip_or_fail.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::router_process {
namespace http_api_test {

using nlohmann::json;
using test::HttpClient;
using test::KvbmPublisher;

constexpr auto kPatience = std::chrono::milliseconds(10'000);

#if KVBM_HAVE_ZMQ

/// A RouterService behind an HttpServer on an ephemeral loopback port.
struct Router {
  explicit Router(RouterProcessOptions o = {})
      : service(o),
        server("127.0.0.1", 0, 4, [this](const HttpRequest& r) { return service.handle(r); }) {}
  [[nodiscard]] std::string url(const std::string& path) const { return server.url() + path; }
  /// Waits until the index has applied batch `seq` of instance `name`.
  bool applied(const std::string& name, std::uint64_t seq) {
    const auto id = service.instance_id(name);
    return id && service.feed().wait_applied(*id, seq, kPatience);
  }
  RouterService service;
  HttpServer server;
};

RouterProcessOptions with(std::vector<events::EventSource> instances) {
  RouterProcessOptions o;
  o.instances = std::move(instances);
  return o;
}

json route_body(const std::vector<std::uint64_t>& hashes, std::uint64_t tokens) {
  return json{{"hashes", hashes}, {"tokens", tokens}};
}

TEST(RouterProcessHttp, RoutesToTheInstanceHoldingThePrefixAndFinishes) {
  KvbmPublisher a("engine-a");
  KvbmPublisher b("engine-b");
  Router r(with({a.source, b.source}));
  a.store({1, 2});                                                   // a holds the first two blocks
  ASSERT_TRUE(r.applied("engine-b", b.store({1, 2, 3, 4}, "CPU")));  // b all four, in G2
  ASSERT_TRUE(r.applied("engine-a", 0));

  HttpClient http;
  const auto res = http.post(r.url("/route"), route_body({1, 2, 3, 4}, 64).dump());
  ASSERT_EQ(res.error, "");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_NE(res.content_type.find("application/json"), std::string::npos);
  const json d = json::parse(res.body);
  EXPECT_EQ(d["instance"], "engine-b");
  EXPECT_EQ(d["instance_id"], 1);
  EXPECT_EQ(d["overlap"]["prefix_blocks"], 4);
  EXPECT_EQ(d["overlap"]["per_tier"]["G2"], 4);
  EXPECT_EQ(d["overlap"]["stale"], false);
  EXPECT_EQ(d["tokens_to_compute"], 0);
  EXPECT_DOUBLE_EQ(d["cost"].get<double>(), 0.05 * 64);
  EXPECT_EQ(d["load"], 0);
  const std::string id = d["request_id"];

  // Hashes may come as decimal strings (for clients without 64-bit integers).
  const json s =
      json::parse(http.post(r.url("/route"), R"({"hashes": ["1", "2"], "tokens": 40})").body);
  EXPECT_EQ(s["overlap"]["prefix_blocks"], 2);
  EXPECT_EQ(s["tokens_to_compute"], 8);

  const auto fin = http.post(r.url("/finish"), json{{"request_id", id}}.dump());
  EXPECT_EQ(fin.status, 200) << fin.body;
  EXPECT_EQ(json::parse(fin.body)["instance"], "engine-b");
  const auto again = http.post(r.url("/finish"), json{{"request_id", id}}.dump());
  EXPECT_EQ(again.status, 404);
  EXPECT_NE(again.body.find("finished already"), std::string::npos) << again.body;
  const auto other = http.post(r.url("/finish"), json{{"request_id", s["request_id"]}}.dump());
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(r.service.router().stats().load, (std::vector<std::uint64_t>{0, 0}));
}

TEST(RouterProcessHttp, KeyedByTokensRoutesATokenIdRequest) {
  // Engines whose block hashes the router cannot compute (vLLM seeds its own
  // per process): with --key tokens the index keys their blocks by the
  // tokens their events carry, and /route takes the prompt's token ids.
  KvbmPublisher a("engine-a");
  KvbmPublisher b("engine-b");
  RouterProcessOptions o = with({a.source, b.source});
  o.key = router::BlockKey::kTokens;
  Router r(o);
  std::vector<std::uint32_t> prompt(3 * 16 + 5);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::uint32_t>(i * 7);
  events::BlockStored e;
  e.block_hashes = {0xAAAA1, 0xAAAA2, 0xAAAA3};  // engine b's own hashes
  e.token_ids.assign(prompt.begin(), prompt.begin() + 3 * 16);
  e.block_size = 16;
  e.medium = "GPU";
  b.publisher->record(std::move(e));
  b.publisher->flush();
  ASSERT_TRUE(r.applied("engine-b", b.sent++));

  HttpClient http;
  const auto res = http.post(r.url("/route"), json{{"token_ids", prompt}}.dump());
  ASSERT_EQ(res.status, 200) << res.body;
  const json d = json::parse(res.body);
  EXPECT_EQ(d["instance"], "engine-b");
  EXPECT_EQ(d["overlap"]["prefix_blocks"], 3);
  EXPECT_EQ(d["tokens_to_compute"], 5);
  // Hashes are refused by a token-keyed router, and token ids by a hash-keyed one.
  const auto hashes = http.post(r.url("/route"), route_body({0xAAAA1}, 16).dump());
  EXPECT_EQ(hashes.status, 400);
  EXPECT_NE(hashes.body.find("token_ids"), std::string::npos) << hashes.body;
  const auto bad = http.post(r.url("/route"), R"({"token_ids": [1, -2]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("[1] must be a token id"), std::string::npos) << bad.body;
  Router by_hash(with({a.source}));
  const auto tokens = http.post(by_hash.url("/route"), json{{"token_ids", prompt}}.dump());
  EXPECT_EQ(tokens.status, 400);
  EXPECT_NE(tokens.body.find("--key tokens"), std::string::npos) << tokens.body;
}

TEST(RouterProcessHttp, AHybridModelsRouterCountsOnlyWhatEveryGroupHolds) {
  // --model-groups gpt-oss-20b: full attention and a 128-token window (8
  // blocks of 16). Both engines hold the full group's 16 blocks; a holds the
  // window's first 8 blocks, b its last 8: only b serves the whole prompt.
  const char* argv[] = {"kvbm-router", "--model-groups", "gpt-oss-20b"};
  RouterProcessOptions o = parse_router_options(3, argv);
  ASSERT_EQ(o.groups.size(), 2U);
  EXPECT_EQ(o.router.block_size, 16U);  // the groups' hash block
  KvbmPublisher a("engine-a");
  KvbmPublisher b("engine-b");
  o.instances = {a.source, b.source};
  Router r(o);
  std::vector<std::uint64_t> hashes;
  for (std::uint64_t i = 1; i <= 16; ++i) hashes.push_back(0x5000 + i);
  const auto keys = router::kvbm_group_keys(hashes, o.groups);
  auto publish = [&](KvbmPublisher& p, std::size_t window_first) {
    for (std::size_t g = 0; g < 2; ++g) {
      events::BlockStored e;
      const std::size_t first = g == 0 ? 0 : window_first;
      const std::size_t last = g == 0 ? 16 : window_first + 8;
      e.block_hashes.assign(keys[g].begin() + static_cast<std::ptrdiff_t>(first),
                            keys[g].begin() + static_cast<std::ptrdiff_t>(last));
      e.block_size = 16;
      e.medium = "GPU";
      const events::EventGroup eg = events::event_group(o.groups[g]);
      e.group_idx = eg.group_idx;
      e.kv_cache_spec_kind = eg.kind;
      e.kv_cache_spec_sliding_window = eg.sliding_window;
      p.publisher->record(std::move(e));
    }
    p.publisher->flush();
    return p.sent++;
  };
  ASSERT_TRUE(r.applied("engine-a", publish(a, 0)));
  ASSERT_TRUE(r.applied("engine-b", publish(b, 8)));
  HttpClient http;
  const auto res = http.post(r.url("/route"), route_body(hashes, 256).dump());
  ASSERT_EQ(res.status, 200) << res.body;
  const json d = json::parse(res.body);
  EXPECT_EQ(d["instance"], "engine-b");
  EXPECT_EQ(d["overlap"]["prefix_blocks"], 16);
  EXPECT_EQ(d["tokens_to_compute"], 0);
  // a's overlap: the longest cut whose window tail it holds, 8 blocks.
  const auto scores = r.service.index().overlaps(hashes);
  EXPECT_EQ(scores.instances.at(0).prefix_blocks, 8U);
  const json health = json::parse(http.get(r.url("/health")).body);
  EXPECT_EQ(health["model_groups"], "gpt-oss-20b");
}

TEST(RouterProcessHttp, ReadsVllmsOriginalWireLayoutFromAPublisherWithoutReplay) {
  test::VllmStylePublisher v("vllm-0");
  KvbmPublisher k("kvbm-0");
  Router r(with({v.source, k.source}));
  // No replay socket: what the PUB sends before the subscription reaches it
  // is lost (ZeroMQ's slow joiner), so publish until a batch is indexed.
  ASSERT_TRUE(test::poll_until([&] {
    v.store({70, 71, 72});
    return r.service.index().holds(*r.service.instance_id("vllm-0"), 72, TierId::kG1);
  }));
  HttpClient http;
  const json d = json::parse(http.post(r.url("/route"), route_body({70, 71, 72}, 48).dump()).body);
  EXPECT_EQ(d["instance"], "vllm-0");
  EXPECT_EQ(d["overlap"]["per_tier"]["G1"], 3);
  const json h = json::parse(http.get(r.url("/health")).body);
  EXPECT_EQ(h["instances"].size(), 2u);
  EXPECT_EQ(h["instances"][1]["name"], "vllm-0");  // sorted by name
  EXPECT_EQ(h["instances"][1]["replay_endpoint"], "");
  EXPECT_GE(h["instances"][1]["blocks"]["G1"], 3);
}

struct BadRequest {
  const char* method;
  const char* path;
  const char* body;
  long status;
  const char* says;  // a part of the error message
};

TEST(RouterProcessHttp, MalformedRequestsAreRefusedWithTheirReason) {
  KvbmPublisher a("a");
  Router r(with({a.source}));
  const BadRequest cases[] = {
      {"POST", "/route", "{\"hashes\": [1,", 400, "not JSON"},
      {"POST", "/route", "[1, 2]", 400, "JSON object"},
      {"POST", "/route", "{\"tokens\": 16}", 400, "\"hashes\" is missing"},
      {"POST", "/route", "{\"hashes\": 5, \"tokens\": 16}", 400, "must be an array"},
      {"POST", "/route", "{\"hashes\": [1, -2], \"tokens\": 16}", 400, "\"hashes\"[1]: -2"},
      {"POST", "/route", "{\"hashes\": [1.5], \"tokens\": 16}", 400, "\"hashes\"[0]: 1.5"},
      {"POST", "/route", "{\"hashes\": [\"x1\"], \"tokens\": 16}", 400, "decimal string"},
      {"POST", "/route", "{\"hashes\": [18446744073709551616], \"tokens\": 1}", 400,
       "\"hashes\"[0]"},
      {"POST", "/route", "{\"hashes\": [1]}", 400, "\"tokens\" is missing"},
      {"POST", "/route", "{\"hashes\": [1], \"tokens\": -1}", 400, "token count"},
      {"POST", "/route", "{\"hashes\": [1], \"tokens\": \"16\"}", 400, "token count"},
      {"POST", "/route", "{\"hashes\": [1], \"tokens\": 16, \"request_id\": 7}", 400,
       "must be a string"},
      {"POST", "/route", "{\"token_ids\": [1, 2, 3]}", 400, "--key tokens"},
      {"GET", "/route", "", 405, "takes POST"},
      {"POST", "/finish", "{}", 400, "\"request_id\" is missing"},
      {"POST", "/finish", "{\"request_id\": \"nope\"}", 404, "unknown \"request_id\""},
      {"POST", "/health", "", 405, "takes GET"},
      {"GET", "/nowhere", "", 404, "the endpoints are"},
      {"DELETE", "/instances/ghost", "", 404, "no instance named \"ghost\""},
      {"POST", "/instances", "{\"name\": \"x\"}", 400, "\"endpoint\" is missing"},
      {"POST", "/instances", "{\"name\": \"x\", \"endpoint\": \"nowhere\"}", 400,
       "not a ZeroMQ endpoint"},
      {"POST", "/instances", "{\"name\": \"\", \"endpoint\": \"tcp://127.0.0.1:1\"}", 400,
       "\"name\" is empty"},
  };
  HttpClient http;
  for (const auto& c : cases) {
    const auto res = http.request(c.method, r.url(c.path), c.body);
    ASSERT_EQ(res.error, "");
    EXPECT_EQ(res.status, c.status) << c.method << " " << c.path << " " << c.body;
    json j;
    ASSERT_NO_THROW(j = json::parse(res.body)) << res.body;
    ASSERT_TRUE(j.contains("error")) << res.body;
    EXPECT_NE(j["error"].get<std::string>().find(c.says), std::string::npos)
        << c.body << " -> " << j["error"];
  }
  // Nothing was routed, and every refusal was counted by status.
  EXPECT_EQ(r.service.router().stats().decisions, 0u);
  const std::string m = http.get(r.url("/metrics")).body;
  EXPECT_NE(
      m.find(R"(kvbm_router_http_requests_total{code="400",endpoint="route",pool="router"} 13)"),
      std::string::npos)
      << m;
}

TEST(RouterProcessHttp, InstancesAreAddedAndRemovedAndNoneLiveIs503) {
  Router r;  // no instance
  HttpClient http;
  const auto none = http.post(r.url("/route"), route_body({1}, 16).dump());
  EXPECT_EQ(none.status, 503);
  EXPECT_NE(none.body.find("no live instance"), std::string::npos) << none.body;
  EXPECT_EQ(http.get(r.url("/health")).status, 503);

  KvbmPublisher a("a");
  const json add = {{"name", "a"},
                    {"endpoint", a.source.endpoint},
                    {"replay_endpoint", a.source.replay_endpoint},
                    {"topic", "kv-events"}};
  const auto added = http.post(r.url("/instances"), add.dump());
  ASSERT_EQ(added.status, 201) << added.body;
  EXPECT_EQ(json::parse(added.body)["name"], "a");
  EXPECT_EQ(http.post(r.url("/instances"), add.dump()).status, 409);  // a name is live once
  // An endpoint ZeroMQ refuses leaves no trace: the name can be used again.
  const auto refused = http.post(r.url("/instances"),
                                 json{{"name", "b"}, {"endpoint", "tcp://no-port-here"}}.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  KvbmPublisher b("b");
  EXPECT_EQ(
      http.post(r.url("/instances"), json{{"name", "b"}, {"endpoint", b.source.endpoint}}.dump())
          .status,
      201);
  ASSERT_TRUE(r.applied("a", a.store({5, 6})));
  const json d = json::parse(http.post(r.url("/route"), route_body({5, 6}, 32).dump()).body);
  EXPECT_EQ(d["instance"], "a");
  EXPECT_EQ(json::parse(http.get(r.url("/instances")).body)["instances"].size(), 2u);

  EXPECT_EQ(http.request("DELETE", r.url("/instances/a")).status, 200);
  EXPECT_EQ(http.request("DELETE", r.url("/instances/a")).status, 404);
  // The request routed to a before it went can still be finished.
  EXPECT_EQ(http.post(r.url("/finish"), json{{"request_id", d["request_id"]}}.dump()).status, 200);
  const json e = json::parse(http.post(r.url("/route"), route_body({5, 6}, 32).dump()).body);
  EXPECT_EQ(e["instance"], "b");
  EXPECT_EQ(http.request("DELETE", r.url("/instances/b")).status, 200);
  EXPECT_EQ(http.post(r.url("/route"), route_body({5}, 16).dump()).status, 503);
}

TEST(RouterProcessHttp, DuplicateRequestIdsAndTheInFlightLimitAreRefused) {
  KvbmPublisher a("a");
  RouterProcessOptions o = with({a.source});
  o.max_in_flight = 2;
  Router r(o);
  HttpClient http;
  const std::string mine = R"({"hashes": [1], "tokens": 16, "request_id": "mine"})";
  EXPECT_EQ(http.post(r.url("/route"), mine).status, 200);
  EXPECT_EQ(http.post(r.url("/route"), mine).status, 409);
  EXPECT_EQ(http.post(r.url("/route"), route_body({1}, 16).dump()).status, 200);
  const auto full = http.post(r.url("/route"), route_body({1}, 16).dump());
  EXPECT_EQ(full.status, 503);
  EXPECT_NE(full.body.find("--max-in-flight"), std::string::npos) << full.body;
  // Refused requests left no load behind: only the two routed ones count.
  EXPECT_EQ(r.service.router().stats().load, (std::vector<std::uint64_t>{32}));
  EXPECT_EQ(http.post(r.url("/finish"), R"({"request_id": "mine"})").status, 200);
  EXPECT_EQ(json::parse(http.get(r.url("/health")).body)["in_flight"], 1);
}

TEST(RouterProcessHttp, MetricsAndHealthSayWhatHappened) {
  KvbmPublisher a("a");
  RouterProcessOptions o = with({a.source});
  o.silence_timeout = std::chrono::milliseconds(1500);
  Router r(o);
  ASSERT_TRUE(r.applied("a", a.store({9})));
  HttpClient http;
  json h = json::parse(http.get(r.url("/health")).body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["instances"][0]["state"], "fresh");
  EXPECT_EQ(h["instances"][0]["blocks"]["G1"], 1);
  for (int i = 0; i < 3; ++i) http.post(r.url("/route"), route_body({9}, 16).dump());

  const auto m = http.get(r.url("/metrics"));
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.content_type.find("text/plain"), std::string::npos);
  for (const char* line :
       {R"(kvbm_router_decisions_total{policy="kv",pool="router"} 3)",
        R"(kvbm_router_http_requests_total{code="200",endpoint="route",pool="router"} 3)",
        R"(kvbm_router_requests_in_flight{pool="router"} 3)",
        R"(kvbm_router_instances{pool="router"} 1)",
        R"(kvbm_router_events_applied_total{pool="router"} 1)",
        "kvbm_router_feed_batches_received_total{pool=\"router\"} "}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
  }
  // The publisher says nothing more (no heartbeat): silent, hence stale, and
  // the router says it is degraded but still routes (by load).
  ASSERT_TRUE(test::poll_until([&] {
    h = json::parse(http.get(r.url("/health")).body);
    return h["instances"][0]["state"] == "silent";
  }));
  EXPECT_EQ(h["status"], "degraded");
  EXPECT_EQ(h["in_flight"], 3);
  const json d = json::parse(http.post(r.url("/route"), route_body({9}, 16).dump()).body);
  EXPECT_EQ(d["overlap"]["stale"], true);
  EXPECT_EQ(d["overlap"]["prefix_blocks"], 0);  // stale entries are not used
}

TEST(RouterProcessHttp, ConcurrentClientsRouteAndFinishEveryRequest) {
  KvbmPublisher a("a");
  KvbmPublisher b("b");
  Router r(with({a.source, b.source}));
  ASSERT_TRUE(r.applied("a", a.store({1, 2, 3})));
  constexpr int kThreads = 4;
  constexpr int kRequests = 100;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      HttpClient http;
      for (int i = 0; i < kRequests; ++i) {
        const auto res = http.post(
            r.url("/route"), route_body({1, 2, 3, static_cast<std::uint64_t>(100 + t)}, 64).dump());
        if (res.status != 200) continue;
        const json d = json::parse(res.body);
        if (http.post(r.url("/finish"), json{{"request_id", d["request_id"]}}.dump()).status ==
            200) {
          ++ok;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), kThreads * kRequests);
  const auto s = r.service.router().stats();
  EXPECT_EQ(s.decisions, static_cast<std::uint64_t>(kThreads * kRequests));
  EXPECT_EQ(s.load, (std::vector<std::uint64_t>{0, 0}));
}

TEST(RouterProcessHttp, ABusyPortIsReported) {
  Router first;
  EXPECT_THROW(HttpServer("127.0.0.1", first.server.port(), 1,
                          [](const HttpRequest&) { return HttpReply{}; }),
               std::runtime_error);
}

#else

TEST(RouterProcessHttp, RoutesToTheInstanceHoldingThePrefixAndFinishes) {
  KVBM_SKIP_OR_FAIL(
      "kvbm built without ZeroMQ: install libzmq3-dev and cppzmq-dev (bash scripts/deps.sh)");
}

#endif

}  // namespace http_api_test
}  // namespace kvbm::router_process
