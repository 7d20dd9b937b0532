// replay/cluster.h: the replay's instances as a cluster behind a router.
//
// With ReplayConfig::router set, every instance publishes its KV events
// (kvbm/events/kv_events.h: G1 as "GPU", G2 "CPU", G3 "STORAGE", G4
// "REMOTE") and one KvIndexer (kvbm/router/kv_indexer.h) consumes them; a
// KvRouter places each request. The events travel either in-process (a
// CallbackEventSink applies each batch as it is flushed) or over real ZeroMQ
// sockets on loopback (a PUB and a replay ROUTER per instance, one
// subscriber for the cluster). Either way each instance's events are flushed
// after each request, and the next request is routed only once the indexer
// has applied them, so the figures are the same on every run and for both
// transports.
//
// Load and time to first token are simulated from the trace's timestamps,
// not measured: each instance prefills one request at a time, in arrival
// order; a request's prefill takes (tokens it computed + its copies, each
// hit block's tokens weighted by the router's tier_cost) / prefill
// tokens per second. The router's load is the tokens still to prefill of the
// requests routed to an instance whose simulated prefill has not ended when
// the next request arrives. The cache itself is not delayed by the queue: a
// request's blocks are computed when it is replayed.
//
// Thread-safety: one Cluster is driven by the replay's thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvbm/kv_block_manager.h"
#include "kvbm/router/kv_router.h"
#include "replay/trace.h"

namespace prometheus {
class Registry;
}

namespace kvbm::replay {

/// How the instances' KV events reach the indexer (kNone: they publish none;
/// the router remembers where it sent each prefix, KvRouter::set_approximate,
/// its TTL measured in trace time).
enum class EventTransport : std::uint8_t { kInProcess, kZmq, kNone };

/// Returns "in-process", "zmq" or "none".
[[nodiscard]] const char* to_string(EventTransport t) noexcept;

/// The router of a replay (ReplayConfig::router).
struct ClusterConfig {
  router::RoutePolicy policy = router::RoutePolicy::kKv;
  /// The router's weights (block_size and the registry are set by the replay).
  router::KvRouterOptions options;
  EventTransport transport = EventTransport::kInProcess;
  /// Simulated prefill throughput of one instance (tokens per second).
  double prefill_tokens_per_s = 31'000;
  /// Where the index's and the router's series go (pool="router"; none when
  /// null). run_replay sets the replay's registry when it has one.
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

/// What the cluster did, beside the hit counts of ReplayResult.
struct ClusterFigures {
  std::string policy;     ///< "kv", "round_robin", "random"
  std::string transport;  ///< "in-process", "zmq"
  double prefill_tokens_per_s = 0;
  std::vector<std::uint64_t> requests;         ///< per instance
  std::vector<std::uint64_t> computed_tokens;  ///< per instance: tokens prefilled
  double request_imbalance = 0;                ///< max / mean requests per instance
  double token_imbalance = 0;                  ///< max / mean computed tokens per instance
  double ttft_mean_s = 0;                      ///< simulated time to first token
  double ttft_p50_s = 0;
  double ttft_p90_s = 0;
  double ttft_p99_s = 0;
  std::uint64_t events_applied = 0;  ///< by the indexer
  std::uint64_t batches_applied = 0;
  std::uint64_t gaps = 0;     ///< sequence gaps the indexer saw (and had replayed)
  std::uint64_t replays = 0;  ///< replays the ZeroMQ feed asked publishers for
  std::uint64_t stale_decisions = 0;
  /// Prefix blocks the router expected (by the index) and the instance found.
  std::uint64_t predicted_blocks = 0;
  std::uint64_t found_blocks = 0;
};

/// The router, the index and the event path of one replay; see the file comment.
class Cluster {
 public:
  /// Precondition: instances >= 1, block_tokens > 0.
  Cluster(std::size_t instances, std::uint32_t block_tokens, const ClusterConfig& config);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  /// Adds instance `k`'s event listeners to its manager's config (before build).
  void attach(std::size_t k, KvBlockManagerConfig& config);

  /// Routes `request` (arriving at its timestamp) and returns the instance.
  std::size_t route(const TraceRequest& request);

  /// Records what the routed request did on its instance: `hits` prefix
  /// blocks by source tier (index TierId), `hit_tokens` their tokens per
  /// tier, `computed_tokens` the prompt tokens it prefilled. Then publishes
  /// the instance's events and waits until the indexer has applied them.
  void completed(const TierArray<std::uint64_t>& hit_tokens, std::uint64_t hit_blocks,
                 std::uint64_t computed_tokens);

  /// Returns the figures so far.
  [[nodiscard]] ClusterFigures figures() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::replay
