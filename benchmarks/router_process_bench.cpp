// benchmarks/router_process_bench.cpp: kvbm-router's request latency beside a
// bare HTTP round trip on the same machine, the same client and the same
// server stack.
//
//   BM_Baseline_HttpRoundTrip  POST of a /route-sized JSON body to a CivetWeb
//                              handler that answers {"ok": true} (HttpServer,
//                              the class kvbm-router serves with)
//   BM_RouterProcess_Route     POST /route to a RouterService over 8 instances
//                              fed by real kvbm publishers over ZeroMQ; the
//                              request's 32 blocks (a 512-token prompt) are held
//                              by one instance; /finish follows, untimed
//
// One libcurl easy handle per benchmark (a keep-alive connection on loopback);
// each iteration is one request, timed on the client (manual time), and the
// run's p50 and p99 are reported as counters (microseconds). Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N so
// that the two alternate (docs/benchmarks.md, "Router process").

#include <algorithm>
#include <chrono>
#include <curl/curl.h>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/config.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/router/kv_event_feed.h"
#include "router/http_server.h"
#include "router/router_service.h"

namespace {

using namespace kvbm;
using namespace std::chrono_literals;
using router_process::HttpReply;
using router_process::HttpRequest;
using router_process::HttpServer;

constexpr int kInstances = 8;
constexpr int kBlocks = 32;

std::size_t discard(char*, std::size_t size, std::size_t n, void*) { return size * n; }

/// A keep-alive POST client.
class Client {
 public:
  explicit Client(const std::string& url) : curl_(curl_easy_init()), url_(url) {
    headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_TCP_NODELAY, 1L);
  }
  ~Client() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  /// POSTs `body` to url + path; returns the status (0 on a transport error).
  long post(const std::string& path, const std::string& body, std::string* out = nullptr) {
    const std::string url = url_ + path;
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    if (out != nullptr) {
      out->clear();
      curl_easy_setopt(
          curl_, CURLOPT_WRITEFUNCTION, +[](char* d, std::size_t s, std::size_t n, void* o) {
            static_cast<std::string*>(o)->append(d, s * n);
            return s * n;
          });
      curl_easy_setopt(curl_, CURLOPT_WRITEDATA, out);
    } else {
      curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &discard);
    }
    if (curl_easy_perform(curl_) != CURLE_OK) return 0;
    long status = 0;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }

 private:
  CURL* curl_;
  curl_slist* headers_ = nullptr;
  std::string url_;
};

std::string route_body() {
  std::string b = R"({"hashes": [)";
  for (int i = 0; i < kBlocks; ++i)
    b += (i ? ", " : "") + std::to_string(1'000'000'007ull * (i + 1));
  return b + R"(], "tokens": 512})";
}

/// Times `request` once per iteration, then runs `after` untimed (manual time);
/// reports p50 and p99 in microseconds.
template <class F, class G>
void timed(benchmark::State& state, F&& request, G&& after) {
  std::vector<double> us;
  us.reserve(1 << 16);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = request();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ok || !after()) {
      state.SkipWithError("request failed");
      return;
    }
    state.SetIterationTime(s);
    us.push_back(s * 1e6);
  }
  std::sort(us.begin(), us.end());
  const auto at = [&us](double q) {
    return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))];
  };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
}

void BM_Baseline_HttpRoundTrip(benchmark::State& state) {
  static HttpServer server("127.0.0.1", 0, 4, [](const HttpRequest&) {
    return HttpReply{200, "application/json", R"({"ok": true})"};
  });
  Client client(server.url());
  const std::string body = route_body();
  timed(
      state, [&] { return client.post("/route", body) == 200; }, [] { return true; });
}
BENCHMARK(BM_Baseline_HttpRoundTrip)->UseManualTime()->Unit(benchmark::kMicrosecond);

#if KVBM_HAVE_ZMQ

/// 8 kvbm publishers, a RouterService subscribed to them, and its HttpServer.
struct Cluster {
  Cluster() {
    router_process::RouterProcessOptions o;
    for (int i = 0; i < kInstances; ++i) {
      events::ZmqEventSinkOptions zo;
      zo.endpoint = "tcp://127.0.0.1:*";
      zo.replay_endpoint = "tcp://127.0.0.1:*";
      zo.linger = 0ms;
      sinks.push_back(std::make_shared<events::ZmqEventSink>(zo));
      events::KvEventPublisherOptions po;
      po.background_flush = false;
      publishers.push_back(std::make_unique<events::KvEventPublisher>(sinks.back(), po));
      o.instances.push_back({"engine-" + std::to_string(i), sinks.back()->endpoint(), "",
                             sinks.back()->replay_endpoint()});
    }
    service = std::make_unique<router_process::RouterService>(o);
    for (int i = 0; i < kInstances; ++i) {
      // 2,000 blocks per instance; instance 3 also holds the request's 32.
      for (int batch = 0; batch < 20; ++batch) {
        events::BlockStored e;
        e.medium = "GPU";
        e.block_size = 16;
        for (int b = 0; b < 100; ++b)
          e.block_hashes.push_back((i + 1) * 10'000'000ull + batch * 100 + b);
        if (i == 3 && batch == 0) {
          for (int b = 0; b < kBlocks; ++b) e.block_hashes.push_back(1'000'000'007ull * (b + 1));
        }
        publishers[i]->record(std::move(e));
        publishers[i]->flush();
      }
      const auto id = service->instance_id("engine-" + std::to_string(i));
      if (!id || !service->feed().wait_applied(*id, 19, 10'000ms)) std::abort();
    }
    server = std::make_unique<HttpServer>(
        "127.0.0.1", 0, 4, [this](const HttpRequest& r) { return service->handle(r); });
  }
  std::vector<std::shared_ptr<events::ZmqEventSink>> sinks;
  std::vector<std::unique_ptr<events::KvEventPublisher>> publishers;
  std::unique_ptr<router_process::RouterService> service;
  std::unique_ptr<HttpServer> server;
};

void BM_RouterProcess_Route(benchmark::State& state) {
  static Cluster cluster;
  Client client(cluster.server->url());
  const std::string body = route_body();
  std::string reply;
  timed(
      state,
      [&] {
        return client.post("/route", body, &reply) == 200 &&
               reply.find("\"instance\":\"engine-3\"") != std::string::npos;
      },
      [&] {  // untimed: take the request off the instance's load
        const auto at = reply.find("\"request_id\":\"") + 14;
        const std::string id = reply.substr(at, reply.find('"', at) - at);
        return client.post("/finish", R"({"request_id": ")" + id + "\"}") == 200;
      });
}
BENCHMARK(BM_RouterProcess_Route)->UseManualTime()->Unit(benchmark::kMicrosecond);

#endif

}  // namespace

BENCHMARK_MAIN();
