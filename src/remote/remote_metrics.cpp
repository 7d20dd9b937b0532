#include "remote_metrics.h"

#include <functional>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"

namespace kvbm::remote {

struct RemoteMetrics::Series {
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Labels labels;
  template <class M>
  struct One {
    prometheus::Family<M>* family = nullptr;
    M* metric = nullptr;
  };
  One<prometheus::Counter> hits, misses, puts, failed_puts, read_bytes, written_bytes;
  std::array<One<prometheus::Counter>, kRemoteStatusCount> errors{};  // kOk and kNotFound unused
  std::array<One<prometheus::Histogram>, 3> seconds{};
  One<prometheus::Gauge> servers_available;
  std::vector<std::function<void()>> removers;

  One<prometheus::Counter> counter(const std::string& name, const std::string& help,
                                   const prometheus::Labels& extra = {}) {
    auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(*registry);
    prometheus::Labels l = labels;
    l.insert(extra.begin(), extra.end());
    KVBM_CHECK(!family.Has(l), "metrics registry already holds ", name, " for pool '",
               labels.at("pool"),
               "': give each remote store that shares a registry its own pool_name");
    auto* c = &family.Add(l);
    removers.emplace_back([&family, c] { family.Remove(c); });
    return {&family, c};
  }
};

RemoteMetrics::RemoteMetrics(std::shared_ptr<prometheus::Registry> registry,
                             const std::string& pool) {
  if (!registry) return;
  s_ = std::make_unique<Series>();
  auto& s = *s_;
  s.registry = std::move(registry);
  s.labels = {{"pool", pool}};
  try {
    s.hits = s.counter("kvbm_remote_hits_total", "Blocks found and verified by get");
    s.misses = s.counter("kvbm_remote_misses_total",
                         "Blocks get did not return (absent, corrupt or failed)");
    s.puts = s.counter("kvbm_remote_puts_total", "Blocks stored by put");
    s.failed_puts = s.counter("kvbm_remote_failed_puts_total", "Blocks put failed to store");
    s.read_bytes =
        s.counter("kvbm_remote_read_bytes_total", "Payload bytes of blocks returned by get");
    s.written_bytes =
        s.counter("kvbm_remote_written_bytes_total", "Payload bytes of blocks stored by put");
    for (std::size_t i = 0; i < kRemoteStatusCount; ++i) {
      const auto st = static_cast<RemoteStatus>(i);
      if (st == RemoteStatus::kOk || st == RemoteStatus::kNotFound) continue;
      s.errors[i] = s.counter("kvbm_remote_errors_total", "Blocks that failed, by kind",
                              {{"kind", std::string(to_string(st))}});
    }
    auto& hist = prometheus::BuildHistogram()
                     .Name("kvbm_remote_seconds")
                     .Help("Latency of one remote call (a whole batch)")
                     .Register(*s.registry);
    const prometheus::Histogram::BucketBoundaries buckets{
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};
    const char* ops[3] = {"exists", "get", "put"};
    for (std::size_t i = 0; i < 3; ++i) {
      prometheus::Labels l = s.labels;
      l["op"] = ops[i];
      KVBM_CHECK(!hist.Has(l), "metrics registry already holds kvbm_remote_seconds for pool '",
                 pool, "': give each remote store that shares a registry its own pool_name");
      auto* h = &hist.Add(l, buckets);
      s.removers.emplace_back([&hist, h] { hist.Remove(h); });
      s.seconds[i] = {&hist, h};
    }
    auto& gauge = prometheus::BuildGauge()
                      .Name("kvbm_remote_servers_available")
                      .Help("Remote servers whose last attempt succeeded")
                      .Register(*s.registry);
    KVBM_CHECK(!gauge.Has(s.labels),
               "metrics registry already holds kvbm_remote_servers_available for pool '", pool,
               "'");
    auto* g = &gauge.Add(s.labels);
    s.removers.emplace_back([&gauge, g] { gauge.Remove(g); });
    s.servers_available = {&gauge, g};
  } catch (...) {  // undo, then rethrow: nothing is swallowed
    for (auto& r : s.removers) r();
    throw;
  }
}

RemoteMetrics::~RemoteMetrics() {
  if (s_) {
    for (auto& r : s_->removers) r();
  }
}

void RemoteMetrics::record(RemoteOp op, double seconds, const RemoteCallCounts& c) noexcept {
  if (!s_) return;
  auto& s = *s_;
  auto add = [](auto& o, std::uint64_t v) {
    if (v != 0 && o.metric != nullptr) o.metric->Increment(static_cast<double>(v));
  };
  add(s.hits, c.hits);
  add(s.misses, c.misses);
  add(s.puts, c.puts);
  add(s.failed_puts, c.failed_puts);
  add(s.read_bytes, c.read_bytes);
  add(s.written_bytes, c.written_bytes);
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) add(s.errors[i], c.by_status[i]);
  s.seconds[static_cast<std::size_t>(op)].metric->Observe(seconds);
}

void RemoteMetrics::set_servers_available(std::size_t n) noexcept {
  if (s_) s_->servers_available.metric->Set(static_cast<double>(n));
}

}  // namespace kvbm::remote
