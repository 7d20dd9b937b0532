#include "kvbm/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"

namespace kvbm {

struct PoolMetrics::Series {
  std::shared_ptr<prometheus::Registry> registry;
  std::string pool;

  struct CounterSeries {
    prometheus::Family<prometheus::Counter>* family;
    prometheus::Counter* counter;
  };
  struct GaugeSeries {
    prometheus::Family<prometheus::Gauge>* family;
    prometheus::Gauge* gauge;
  };

  CounterSeries allocations, allocations_from_reset, evictions, registrations, duplicate_blocks,
      registration_dedup, stagings, match_hashes_requested, match_blocks_returned,
      scan_hashes_requested, scan_blocks_returned;
  GaugeSeries inflight_mutable, inflight_immutable, reset_pool_size, inactive_pool_size;

  CounterSeries counter(const std::string& name, const std::string& help) {
    auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(*registry);
    KVBM_CHECK(!family.Has({{"pool", pool}}), "metrics registry already holds ", name, "{pool=\"",
               pool,
               "\"}: give each block pool that shares a registry its own name "
               "(BlockManager builder .pool_name(...))");
    return {&family, &family.Add({{"pool", pool}})};
  }
  GaugeSeries gauge(const std::string& name, const std::string& help) {
    auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(*registry);
    KVBM_CHECK(!family.Has({{"pool", pool}}), "metrics registry already holds ", name, "{pool=\"",
               pool,
               "\"}: give each block pool that shares a registry its own name "
               "(BlockManager builder .pool_name(...))");
    return {&family, &family.Add({{"pool", pool}})};
  }
};

PoolMetrics::PoolMetrics(std::shared_ptr<prometheus::Registry> registry, std::string_view pool)
    : s_(std::make_unique<Series>()) {
  KVBM_CHECK(registry != nullptr, "PoolMetrics needs a prometheus registry");
  s_->registry = std::move(registry);
  s_->pool = std::string(pool);
  auto& s = *s_;
  s.allocations = s.counter("kvbm_allocations_total", "Total blocks allocated from pools");
  s.allocations_from_reset =
      s.counter("kvbm_allocations_from_reset_total", "Total blocks allocated from the reset pool");
  s.evictions = s.counter("kvbm_evictions_total", "Total blocks evicted from inactive pool");
  s.registrations = s.counter("kvbm_registrations_total",
                              "Total blocks registered (CompleteBlock -> ImmutableBlock)");
  s.duplicate_blocks =
      s.counter("kvbm_duplicate_blocks_total", "Total duplicate blocks created (Allow policy)");
  s.registration_dedup = s.counter("kvbm_registration_dedup_total",
                                   "Total block registrations deduplicated (Reject policy)");
  s.stagings = s.counter("kvbm_stagings_total", "Total MutableBlock -> CompleteBlock transitions");
  s.match_hashes_requested = s.counter("kvbm_match_hashes_requested_total",
                                       "Total hashes requested in match_blocks calls");
  s.match_blocks_returned = s.counter("kvbm_match_blocks_returned_total",
                                      "Total blocks returned from match_blocks calls");
  s.scan_hashes_requested =
      s.counter("kvbm_scan_hashes_requested_total", "Total hashes requested in scan_matches calls");
  s.scan_blocks_returned =
      s.counter("kvbm_scan_blocks_returned_total", "Total blocks returned from scan_matches calls");
  s.inflight_mutable = s.gauge("kvbm_inflight_mutable", "Current MutableBlocks held outside pool");
  s.inflight_immutable =
      s.gauge("kvbm_inflight_immutable", "Current ImmutableBlocks held outside pool");
  s.reset_pool_size = s.gauge("kvbm_reset_pool_size", "Current reset pool size");
  s.inactive_pool_size = s.gauge("kvbm_inactive_pool_size", "Current inactive pool size");
}

PoolMetrics::~PoolMetrics() {
  auto& s = *s_;
  for (auto* c :
       {&s.allocations, &s.allocations_from_reset, &s.evictions, &s.registrations,
        &s.duplicate_blocks, &s.registration_dedup, &s.stagings, &s.match_hashes_requested,
        &s.match_blocks_returned, &s.scan_hashes_requested, &s.scan_blocks_returned}) {
    c->family->Remove(c->counter);
  }
  for (auto* g :
       {&s.inflight_mutable, &s.inflight_immutable, &s.reset_pool_size, &s.inactive_pool_size}) {
    g->family->Remove(g->gauge);
  }
}

namespace {
inline void bump(prometheus::Counter* c, std::uint64_t n) noexcept {
  if (n != 0) c->Increment(static_cast<double>(n));
}
}  // namespace

void PoolMetrics::add(const PoolCounterDelta& d) noexcept {
  auto& s = *s_;
  bump(s.allocations.counter, d.allocations);
  bump(s.allocations_from_reset.counter, d.allocations_from_reset);
  bump(s.evictions.counter, d.evictions);
  bump(s.registrations.counter, d.registrations);
  bump(s.duplicate_blocks.counter, d.duplicate_blocks);
  bump(s.registration_dedup.counter, d.registration_dedup);
  bump(s.stagings.counter, d.stagings);
  bump(s.match_hashes_requested.counter, d.match_hashes_requested);
  bump(s.match_blocks_returned.counter, d.match_blocks_returned);
  bump(s.scan_hashes_requested.counter, d.scan_hashes_requested);
  bump(s.scan_blocks_returned.counter, d.scan_blocks_returned);
}

void PoolMetrics::add_staging() noexcept { s_->stagings.counter->Increment(); }

PoolCounterDelta PoolMetrics::counts() const noexcept {
  const auto& s = *s_;
  auto value = [](const Series::CounterSeries& c) {
    return static_cast<std::uint64_t>(c.counter->Value());
  };
  PoolCounterDelta d;
  d.allocations = value(s.allocations);
  d.allocations_from_reset = value(s.allocations_from_reset);
  d.evictions = value(s.evictions);
  d.registrations = value(s.registrations);
  d.duplicate_blocks = value(s.duplicate_blocks);
  d.registration_dedup = value(s.registration_dedup);
  d.stagings = value(s.stagings);
  d.match_hashes_requested = value(s.match_hashes_requested);
  d.match_blocks_returned = value(s.match_blocks_returned);
  d.scan_hashes_requested = value(s.scan_hashes_requested);
  d.scan_blocks_returned = value(s.scan_blocks_returned);
  return d;
}

void PoolMetrics::set_inflight_mutable(std::uint64_t v) noexcept {
  s_->inflight_mutable.gauge->Set(static_cast<double>(v));
}
void PoolMetrics::set_inflight_immutable(std::uint64_t v) noexcept {
  s_->inflight_immutable.gauge->Set(static_cast<double>(v));
}
void PoolMetrics::set_reset_pool_size(std::uint64_t v) noexcept {
  s_->reset_pool_size.gauge->Set(static_cast<double>(v));
}
void PoolMetrics::set_inactive_pool_size(std::uint64_t v) noexcept {
  s_->inactive_pool_size.gauge->Set(static_cast<double>(v));
}

const std::shared_ptr<prometheus::Registry>& PoolMetrics::registry() const noexcept {
  return s_->registry;
}
const std::string& PoolMetrics::pool() const noexcept { return s_->pool; }

}  // namespace kvbm
