#include "replay/cluster.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <queue>
#include <utility>

#include "kvbm/clock.h"
#include "kvbm/error.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/router/kv_event_feed.h"
#include "kvbm/router/kv_indexer.h"

namespace kvbm::replay {

const char* to_string(EventTransport t) noexcept {
  return t == EventTransport::kZmq ? "zmq" : t == EventTransport::kNone ? "none" : "in-process";
}

namespace {

// A routed request whose simulated prefill has not ended.
struct InFlight {
  double end_s = 0;
  router::RouteDecision decision;
  friend bool operator>(const InFlight& a, const InFlight& b) { return a.end_s > b.end_s; }
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

router::KvIndexerOptions indexer_options(const ClusterConfig& c) {
  router::KvIndexerOptions o;
  o.metrics_registry = c.metrics_registry;
  return o;
}

double imbalance(const std::vector<std::uint64_t>& v) {
  if (v.empty()) return 0;
  std::uint64_t sum = 0, max = 0;
  for (const auto x : v) {
    sum += x;
    max = std::max(max, x);
  }
  return sum == 0
             ? 0
             : static_cast<double>(max) * static_cast<double>(v.size()) / static_cast<double>(sum);
}

}  // namespace

struct Cluster::Impl {
  ClusterConfig config;
  std::uint32_t block_tokens = 0;
  router::KvIndexer index;                    // after config: built from it
  std::unique_ptr<router::KvEventFeed> feed;  // kZmq: the subscriber feeding the index
  std::vector<router::InstanceId> ids;
  std::vector<std::shared_ptr<events::KvEventPublisher>> publishers;
  std::unique_ptr<router::KvRouter> router;
  // kNone: the router's clock, moved to each request's arrival.
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  double clock_s = 0;
  // The simulation.
  std::vector<double> busy_until;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> in_flight;
  std::vector<double> ttft;
  std::vector<std::uint64_t> requests, computed;
  // The request being replayed.
  router::RouteDecision current;
  std::size_t current_k = 0;  // its instance's position in `ids`
  double arrival_s = 0;
  std::uint64_t predicted = 0, found = 0;

  Impl(std::size_t n, std::uint32_t bt, const ClusterConfig& c)
      : config(c),
        block_tokens(bt),
        index(indexer_options(c)),
        busy_until(n, 0.0),
        requests(n, 0),
        computed(n, 0) {
    KVBM_CHECK(n >= 1, "Cluster: instances must be at least 1");
    KVBM_CHECK(bt > 0, "Cluster: block_tokens must be > 0");
    KVBM_CHECK(c.prefill_tokens_per_s > 0, "Cluster: prefill_tokens_per_s must be > 0, not ",
               c.prefill_tokens_per_s);
    if (c.transport == EventTransport::kZmq) feed = std::make_unique<router::KvEventFeed>(index);
    for (std::size_t k = 0; k < n; ++k) {
      const std::string name = "instance-" + std::to_string(k);
      if (c.transport == EventTransport::kNone) {  // no publisher: nothing to attach
        ids.push_back(index.add_instance(name));
        continue;
      }
      events::KvEventPublisherOptions po;
      po.background_flush = false;
      po.max_batch_size = 1u << 16;
      po.clock = [] { return 0.0; };  // the timestamps do not matter to the index
      std::shared_ptr<events::EventSink> sink;
      if (feed) {
        // A PUB socket and its replay socket on ephemeral loopback ports.
        events::ZmqEventSinkOptions zo;
        zo.endpoint = "tcp://127.0.0.1:*";
        zo.replay_endpoint = "tcp://127.0.0.1:*";
        zo.topic = "kv-events";
        auto zmq = std::make_shared<events::ZmqEventSink>(zo);
        ids.push_back(
            feed->add_instance(name, {name, zmq->endpoint(), zo.topic, zmq->replay_endpoint()}));
        sink = std::move(zmq);
      } else {
        const router::InstanceId id = index.add_instance(name);
        ids.push_back(id);
        sink = std::make_shared<events::CallbackEventSink>(
            [this, id](std::uint64_t seq, const events::KvEventBatch& batch,
                       std::span<const std::uint8_t> /*payload*/) { index.apply(id, seq, batch); });
      }
      publishers.push_back(std::make_shared<events::KvEventPublisher>(std::move(sink), po));
    }
    router::KvRouterOptions ro = c.options;
    ro.policy = c.policy;
    ro.block_size = bt;
    ro.metrics_registry = c.metrics_registry;
    ro.clock = clock;
    router = std::make_unique<router::KvRouter>(index, ro);
    if (c.transport == EventTransport::kNone) {
      for (const router::InstanceId id : ids) router->set_approximate(id);
    }
  }
};

Cluster::Cluster(std::size_t instances, std::uint32_t block_tokens, const ClusterConfig& config)
    : impl_(std::make_unique<Impl>(instances, block_tokens, config)) {}

Cluster::~Cluster() = default;

void Cluster::attach(std::size_t k, KvBlockManagerConfig& config) {
  if (impl_->publishers.empty()) return;  // kNone: no events
  auto& p = impl_->publishers.at(k);
  const std::uint32_t bt = impl_->block_tokens;
  config.device_listeners.push_back(p->listener(events::kMediumGpu, bt));
  if (config.host.blocks != 0 || config.host.bytes != 0) {
    config.host_listeners.push_back(p->listener(events::kMediumCpu, bt));
  }
  if (config.disk.blocks != 0 || config.disk.bytes != 0) {
    config.disk_listeners.push_back(p->listener(events::kMediumDisk, bt));
  }
  if (!config.remote.urls.empty()) {
    config.remote_listeners.push_back(p->listener(events::kMediumRemote, bt));
  }
}

std::size_t Cluster::route(const TraceRequest& request) {
  Impl& m = *impl_;
  m.arrival_s = request.timestamp_ms / 1000.0;
  if (m.arrival_s > m.clock_s) {  // the router's TTL runs in trace time
    m.clock->advance(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(m.arrival_s - m.clock_s)));
    m.clock_s = m.arrival_s;
  }
  while (!m.in_flight.empty() && m.in_flight.top().end_s <= m.arrival_s) {
    m.router->finish(m.in_flight.top().decision);
    m.in_flight.pop();
  }
  std::vector<std::uint64_t> hashes;
  hashes.reserve(request.hashes.size());
  for (const auto& h : request.hashes) hashes.push_back(h.value());
  m.current = m.router->route(hashes, request.input_length);
  const auto it = std::find(m.ids.begin(), m.ids.end(), m.current.instance);
  KVBM_CHECK(it != m.ids.end(), "Cluster: the router chose an unknown instance");
  m.current_k = static_cast<std::size_t>(it - m.ids.begin());
  return m.current_k;
}

void Cluster::completed(const TierArray<std::uint64_t>& hit_tokens, std::uint64_t hit_blocks,
                        std::uint64_t computed_tokens) {
  Impl& m = *impl_;
  const std::size_t k = m.current_k;
  double work = static_cast<double>(computed_tokens) * m.config.options.compute_cost;
  for (const TierId t : kTierIds) {
    work += static_cast<double>(hit_tokens[t]) * m.config.options.tier_cost[t];
  }
  const double start = std::max(m.arrival_s, m.busy_until[k]);
  const double end = start + work / m.config.prefill_tokens_per_s;
  m.busy_until[k] = end;
  m.ttft.push_back(end - m.arrival_s);
  m.in_flight.push({end, m.current});
  ++m.requests[k];
  m.computed[k] += computed_tokens;
  m.predicted += m.current.overlap.prefix_blocks;
  m.found += hit_blocks;
  for (std::size_t i = 0; i < m.publishers.size(); ++i) {
    auto& p = *m.publishers[i];
    if (p.flush() == 0 || !m.feed) continue;
    // Sequences count every batch handed to the sink, taken or not.
    const events::KvEventPublisherStats ps = p.stats();
    const std::uint64_t last = ps.batches_published + ps.failed_batches - 1;
    KVBM_CHECK(m.feed->wait_applied(m.ids[i], last, std::chrono::seconds(30)),
               "kvbm-replay: batch ", last, " of instance ", i,
               " did not reach the router's index over ZeroMQ within 30 s");
  }
}

ClusterFigures Cluster::figures() const {
  const Impl& m = *impl_;
  ClusterFigures f;
  f.policy = router::to_string(m.config.policy);
  f.transport = to_string(m.config.transport);
  f.prefill_tokens_per_s = m.config.prefill_tokens_per_s;
  f.requests = m.requests;
  f.computed_tokens = m.computed;
  f.request_imbalance = imbalance(m.requests);
  f.token_imbalance = imbalance(m.computed);
  double sum = 0;
  for (const double t : m.ttft) sum += t;
  f.ttft_mean_s = m.ttft.empty() ? 0 : sum / static_cast<double>(m.ttft.size());
  f.ttft_p50_s = percentile(m.ttft, 0.50);
  f.ttft_p90_s = percentile(m.ttft, 0.90);
  f.ttft_p99_s = percentile(m.ttft, 0.99);
  const router::KvIndexerStats is = m.index.stats();
  f.events_applied = is.events_applied;
  f.batches_applied = is.batches_applied;
  f.gaps = is.gaps;
  if (m.feed) f.replays = m.feed->stats().replays_requested;
  f.stale_decisions = m.router->stats().stale_decisions;
  f.predicted_blocks = m.predicted;
  f.found_blocks = m.found;
  return f;
}

}  // namespace kvbm::replay
