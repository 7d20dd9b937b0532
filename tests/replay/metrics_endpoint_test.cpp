// The live metrics endpoint of kvbm-replay (--metrics-port): a MetricsServer
// serves the registry the KvBlockManager publishes into; a real HTTP client
// (libcurl) scrapes it while the replay's manager is alive, and the series
// must say what the replay did.

#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "replay/metrics_server.h"
#include "replay/replay.h"
#include "replay_test_util.h"

#if KVBM_HAVE_CURL
#include <curl/curl.h>
#endif

namespace kvbm::replay {
namespace metrics_endpoint_test {

#if KVBM_HAVE_CURL

struct HttpResponse {
  long status = 0;
  std::string content_type;
  std::string body;
  std::string error;
};

std::size_t append(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

HttpResponse http_get(const std::string& url) {
  HttpResponse r;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    r.error = "curl_easy_init failed";
    return r;
  }
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  const CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    r.error = curl_easy_strerror(rc);
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    char* ct = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
    if (ct != nullptr) r.content_type = ct;
  }
  curl_easy_cleanup(curl);
  return r;
}

// Parses the Prometheus text format into "name{labels}" -> value.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

double series(const std::map<std::string, double>& m, const std::string& key) {
  const auto it = m.find(key);
  if (it == m.end()) {
    ADD_FAILURE() << "series " << key << " not served";
    return -1;
  }
  return it->second;
}

TEST(ReplayMetricsEndpoint, ScrapedSeriesMatchWhatTheReplayDid) {
  if (!test::shipped_trace_path()) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const std::size_t requests =
      std::max<std::size_t>(300, static_cast<std::size_t>(1'500 * test::stress_scale()));
  const Trace trace =
      read_trace_file(*test::shipped_trace_path(), TraceOptions{.max_requests = requests});

  auto registry = std::make_shared<prometheus::Registry>();
  MetricsServer server("127.0.0.1", 0, registry);  // any free port
  ASSERT_GT(server.port(), 0);
  test::ScratchDir dir("kvbm-replay-metrics");

  ReplayConfig c;
  c.layout = LayoutConfig{
      .num_layers = 2, .outer_dim = 2, .page_size = 512, .inner_dim = 1, .dtype_bytes = 1};
  c.device = TierConfig{.blocks = 2'000};
  c.host = TierConfig{.blocks = 4'000};
  c.disk = TierConfig{.blocks = 8'000};
  c.disk_directory = dir.path();
  c.metrics_registry = registry;
  HttpResponse during;  // scraped while the replay runs
  c.progress_every = 100;
  c.progress = [&](std::size_t done, std::size_t) {
    if (done == 100) during = http_get(server.url());
  };
  HttpResponse after;  // scraped after the last request, manager still alive
  c.on_finished = [&](KvBlockManager&) { after = http_get(server.url()); };
  const ReplayResult r = run_replay(trace, c);

  ASSERT_EQ(during.error, "");
  EXPECT_EQ(during.status, 200);
  const auto mid = parse_exposition(during.body);
  EXPECT_EQ(series(mid, R"(kvbm_replay_requests_total{pool="G1"})"), 100.0);
  EXPECT_GT(series(mid, R"(kvbm_allocations_total{pool="G1"})"), 0.0);

  ASSERT_EQ(after.error, "");
  EXPECT_EQ(after.status, 200);
  EXPECT_NE(after.content_type.find("text/plain"), std::string::npos) << after.content_type;
  const auto m = parse_exposition(after.body);
  ASSERT_EQ(r.onboard_no_space, 0u);
  ASSERT_EQ(r.onboard_failed, 0u);
  ASSERT_EQ(r.uncached_blocks, 0u);
  // G1 allocated the blocks the replay computed and those it onboarded from below.
  EXPECT_EQ(series(m, R"(kvbm_allocations_total{pool="G1"})"),
            static_cast<double>(r.computed_blocks + r.hit_blocks[TierId::kG2] +
                                r.hit_blocks[TierId::kG3]));
  EXPECT_EQ(series(m, R"(kvbm_evictions_total{pool="G1"})"),
            static_cast<double>(r.evictions[TierId::kG1]));
  EXPECT_EQ(series(m, R"(kvbm_evictions_total{pool="G2"})"),
            static_cast<double>(r.evictions[TierId::kG2]));
  EXPECT_EQ(series(m, R"(kvbm_inflight_mutable{pool="G1"})"), 0.0);
  EXPECT_EQ(series(m, R"(kvbm_inflight_immutable{pool="G1"})"), 0.0);
  EXPECT_EQ(series(m, R"(kvbm_reset_pool_size{pool="G1"})") +
                series(m, R"(kvbm_inactive_pool_size{pool="G1"})"),
            2'000.0);
  EXPECT_EQ(series(m, R"(kvbm_replay_requests_total{pool="G1"})"), static_cast<double>(r.requests));
  EXPECT_EQ(series(m, R"(kvbm_replay_blocks_total{pool="G1"})"), static_cast<double>(r.blocks));
  for (const TierId t : kPoolTiers) {
    EXPECT_EQ(series(m, std::string("kvbm_replay_hit_blocks_total{pool=\"") +
                            std::string(to_string(t)) + "\"}"),
              static_cast<double>(r.hit_blocks[t]));
  }
  EXPECT_GT(r.hit_blocks[TierId::kG2], 0u);
  EXPECT_EQ(series(m, R"(kvbm_transfer_bytes_total{path="G2_to_G1"})"),
            static_cast<double>(r.hit_blocks[TierId::kG2] * r.block_bytes));
  EXPECT_GT(series(m, R"(kvbm_transfer_bytes_total{path="G1_to_G2"})"), 0.0);
  EXPECT_EQ(series(m, R"(kvbm_replay_verify_failures_total{pool="G1"})"), 0.0);
  EXPECT_EQ(r.audit, "");
  curl_global_cleanup();
}

#else

TEST(ReplayMetricsEndpoint, ScrapedSeriesMatchWhatTheReplayDid) {
  KVBM_SKIP_OR_FAIL("built without libcurl: install libcurl4-openssl-dev (bash scripts/deps.sh)");
}

#endif

TEST(ReplayMetricsEndpoint, BusyPortIsReported) {
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsServer first("127.0.0.1", 0, registry);
  EXPECT_THROW(MetricsServer("127.0.0.1", first.port(), registry), std::runtime_error);
}

}  // namespace metrics_endpoint_test
}  // namespace kvbm::replay
