// src/router/router_metrics.h: the router layer's Prometheus series.
//
// Built once, when a KvIndexer or KvRouter is constructed with a registry;
// the hot paths only add to counters and store gauges. Every series carries
// pool="router"; the router's also carry its policy, so that routers of
// different policies (a replay comparing them) may share one registry. A
// second indexer, or a second router of the same policy, on one registry is
// refused with a UsageError (they would share, then remove, each other's
// series). docs/metrics.md lists the series.

#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvbm/detail/series_set.h"
#include "kvbm/router/overlap.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
}  // namespace prometheus

namespace kvbm::router::impl {

/// Counter increments of one KvIndexer call, added after its lock is released.
struct IndexerDelta {
  std::uint64_t events_applied = 0;
  std::array<std::uint64_t, 4> batches{};  ///< by ApplyStatus
  std::uint64_t resyncs = 0;
  std::uint64_t unknown_medium_events = 0;
  std::uint64_t removed_unknown_blocks = 0;
  std::uint64_t unkeyed_events = 0;
  std::uint64_t group_mismatch_events = 0;  ///< counted in KvIndexerStats only
};

/// The KvIndexer's series.
class IndexerMetrics {
 public:
  explicit IndexerMetrics(std::shared_ptr<prometheus::Registry> registry);
  void add(const IndexerDelta& d) noexcept;
  void set_stale_instances(std::size_t n) noexcept;
  void set_instances(std::size_t n) noexcept;
  /// `blocks[t]` for tiers 1..4.
  void set_indexed_blocks(const TierBlockCounts& blocks) noexcept;

 private:
  detail::SeriesSet set_;
  prometheus::Counter* events_applied_;
  std::array<prometheus::Counter*, 4> batches_{};
  prometheus::Counter* resyncs_;
  prometheus::Counter* unknown_medium_;
  prometheus::Counter* removed_unknown_;
  prometheus::Counter* unkeyed_;
  prometheus::Gauge* stale_instances_;
  prometheus::Gauge* instances_;
  TierArray<prometheus::Gauge*> indexed_blocks_{};
};

/// The KvRouter's series (label policy).
class RouterMetrics {
 public:
  RouterMetrics(std::shared_ptr<prometheus::Registry> registry, const std::string& policy);
  /// One decision: whether it used stale entries, whether any instance was stale.
  void decision(bool used_stale, bool any_stale) noexcept;

 private:
  detail::SeriesSet set_;
  prometheus::Counter* decisions_;
  prometheus::Counter* stale_decisions_;
  prometheus::Counter* decisions_while_stale_;
};

}  // namespace kvbm::router::impl
