#include "remote_metrics.h"

#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "kvbm/detail/series_set.h"

namespace kvbm::remote {

struct RemoteMetrics::Series {
  Series(std::shared_ptr<prometheus::Registry> r, const std::string& pool)
      : set(std::move(r), {{"pool", pool}}, "RemoteMetrics",
            "give each remote store that shares a registry its own pool_name") {}

  detail::SeriesSet set;
  prometheus::Counter *hits = nullptr, *misses = nullptr, *puts = nullptr, *failed_puts = nullptr,
                      *read_bytes = nullptr, *written_bytes = nullptr;
  std::array<prometheus::Counter*, kRemoteStatusCount> errors{};  // kOk and kNotFound unused
  std::array<prometheus::Counter*, kRemoteRefusalCount> refused{};
  std::array<prometheus::Gauge*, kRemoteStateCount> state{};
  std::array<prometheus::Histogram*, 3> seconds{};
  prometheus::Gauge* servers_available = nullptr;
};

RemoteMetrics::RemoteMetrics(std::shared_ptr<prometheus::Registry> registry,
                             const std::string& pool) {
  if (!registry) return;
  s_ = std::make_unique<Series>(std::move(registry), pool);
  auto& s = *s_;
  s.hits = s.set.counter("kvbm_remote_hits_total", "Blocks found and verified by get");
  s.misses = s.set.counter("kvbm_remote_misses_total",
                           "Blocks get did not return (absent, corrupt or failed)");
  s.puts = s.set.counter("kvbm_remote_puts_total", "Blocks stored by put");
  s.failed_puts = s.set.counter("kvbm_remote_failed_puts_total", "Blocks put failed to store");
  s.read_bytes =
      s.set.counter("kvbm_remote_read_bytes_total", "Payload bytes of blocks returned by get");
  s.written_bytes =
      s.set.counter("kvbm_remote_written_bytes_total", "Payload bytes of blocks stored by put");
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) {
    const auto st = static_cast<RemoteStatus>(i);
    if (st == RemoteStatus::kOk || st == RemoteStatus::kNotFound) continue;
    s.errors[i] = s.set.counter("kvbm_remote_errors_total", "Blocks that failed, by kind",
                                {{"kind", std::string(to_string(st))}});
  }
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i) {
    s.refused[i] =
        s.set.counter("kvbm_remote_refused_total",
                      "Blocks the servers refused (credentials or ACL), by the kind of refusal",
                      {{"reason", std::string(to_string(static_cast<RemoteRefusal>(i)))}});
  }
  for (std::size_t i = 0; i < kRemoteStateCount; ++i) {
    const auto st = static_cast<RemoteState>(i);
    s.state[i] = s.set.gauge("kvbm_remote_state",
                             "1 for the remote tier's state (ok, down: a server does not answer, "
                             "refused: a server refuses the credentials or an ACL right)",
                             {{"state", std::string(to_string(st))}});
    s.state[i]->Set(st == RemoteState::kOk ? 1.0 : 0.0);
  }
  const std::vector<double> buckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                    0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};
  const char* ops[3] = {"exists", "get", "put"};
  for (std::size_t i = 0; i < 3; ++i) {
    s.seconds[i] =
        s.set.histogram("kvbm_remote_seconds", "Latency of one remote call (a whole batch)",
                        buckets, {{"op", ops[i]}});
  }
  s.servers_available =
      s.set.gauge("kvbm_remote_servers_available", "Remote servers whose last attempt succeeded");
}

RemoteMetrics::~RemoteMetrics() = default;

void RemoteMetrics::record(RemoteOp op, double seconds, const RemoteCallCounts& c) noexcept {
  if (!s_) return;
  auto& s = *s_;
  auto add = [](prometheus::Counter* counter, std::uint64_t v) {
    if (v != 0 && counter != nullptr) counter->Increment(static_cast<double>(v));
  };
  add(s.hits, c.hits);
  add(s.misses, c.misses);
  add(s.puts, c.puts);
  add(s.failed_puts, c.failed_puts);
  add(s.read_bytes, c.read_bytes);
  add(s.written_bytes, c.written_bytes);
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) add(s.errors[i], c.by_status[i]);
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i) add(s.refused[i], c.refused[i]);
  s.seconds[static_cast<std::size_t>(op)]->Observe(seconds);
}

void RemoteMetrics::set_servers_available(std::size_t n) noexcept {
  if (s_) s_->servers_available->Set(static_cast<double>(n));
}

void RemoteMetrics::set_state(RemoteState state) noexcept {
  if (!s_) return;
  for (std::size_t i = 0; i < kRemoteStateCount; ++i)
    s_->state[i]->Set(i == static_cast<std::size_t>(state) ? 1.0 : 0.0);
}

}  // namespace kvbm::remote
