// src/router/router_metrics.cpp: the router layer's Prometheus series
// (src/router/router_metrics.h).

#include "router/router_metrics.h"

#include <map>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"

namespace kvbm::router::impl {

IndexerMetrics::IndexerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : set_(std::move(registry), {{"pool", "router"}}, "KvIndexer",
           "give each indexer its own registry, and routers sharing one different policies"),
      events_applied_(set_.counter("kvbm_router_events_applied_total",
                                   "KV events applied to the router's index", {})),
      resyncs_(set_.counter("kvbm_router_resyncs_total",
                            "Instances resynced (entries dropped, held batches applied)", {})),
      unknown_medium_(set_.counter("kvbm_router_unknown_medium_events_total",
                                   "KV events of a medium the indexer maps to no tier (ignored)",
                                   {})),
      removed_unknown_(set_.counter("kvbm_router_removed_unknown_blocks_total",
                                    "BlockRemoved hashes the index did not hold", {})),
      unkeyed_(set_.counter("kvbm_router_unkeyed_events_total",
                            "BlockStored events a token-keyed index could not key (no token ids, "
                            "or a parent it never saw): ignored",
                            {})),
      stale_instances_(
          set_.gauge("kvbm_router_stale_instances", "Live instances whose entries are stale", {})),
      instances_(set_.gauge("kvbm_router_instances", "Live instances in the index", {})) {
  static constexpr std::array<const char*, 4> kOutcomes{"applied", "duplicate", "gap", "restart"};
  for (std::size_t i = 0; i < kOutcomes.size(); ++i) {
    batches_[i] = set_.counter("kvbm_router_batches_total",
                               "KV event batches received, by what apply() did with them",
                               {{"outcome", kOutcomes[i]}});
  }
  for (const TierId t : kTierIds) {
    indexed_blocks_[t] = set_.gauge("kvbm_router_indexed_blocks",
                                    "Blocks indexed per tier: (instance, block) pairs for a local "
                                    "tier, blocks for a shared one",
                                    {{"tier", std::string(to_string(t))}});
  }
}

namespace {
inline void bump(prometheus::Counter* c, std::uint64_t n) noexcept {
  if (n != 0) c->Increment(static_cast<double>(n));
}
}  // namespace

void IndexerMetrics::add(const IndexerDelta& d) noexcept {
  bump(events_applied_, d.events_applied);
  for (std::size_t i = 0; i < batches_.size(); ++i) bump(batches_[i], d.batches[i]);
  bump(resyncs_, d.resyncs);
  bump(unknown_medium_, d.unknown_medium_events);
  bump(removed_unknown_, d.removed_unknown_blocks);
  bump(unkeyed_, d.unkeyed_events);
}

void IndexerMetrics::set_stale_instances(std::size_t n) noexcept {
  stale_instances_->Set(static_cast<double>(n));
}

void IndexerMetrics::set_instances(std::size_t n) noexcept {
  instances_->Set(static_cast<double>(n));
}

void IndexerMetrics::set_indexed_blocks(const TierBlockCounts& blocks) noexcept {
  for (const TierId t : kTierIds) indexed_blocks_[t]->Set(static_cast<double>(blocks[t]));
}

RouterMetrics::RouterMetrics(std::shared_ptr<prometheus::Registry> registry,
                             const std::string& policy)
    : set_(std::move(registry), {{"pool", "router"}}, "KvRouter",
           "give each indexer its own registry, and routers sharing one different policies"),
      decisions_(
          set_.counter("kvbm_router_decisions_total", "Requests routed", {{"policy", policy}})),
      stale_decisions_(set_.counter("kvbm_router_stale_decisions_total",
                                    "Routing decisions that relied on stale entries (use_stale)",
                                    {{"policy", policy}})),
      decisions_while_stale_(set_.counter("kvbm_router_decisions_while_stale_total",
                                          "Routing decisions made while any instance was stale",
                                          {{"policy", policy}})) {}

void RouterMetrics::decision(bool used_stale, bool any_stale) noexcept {
  decisions_->Increment();
  if (used_stale) stale_decisions_->Increment();
  if (any_stale) decisions_while_stale_->Increment();
}

}  // namespace kvbm::router::impl
