#include "kvbm/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "kvbm/detail/series_set.h"
#include "kvbm/error.h"

namespace kvbm {

struct PoolMetrics::Series {
  Series(std::shared_ptr<prometheus::Registry> r, std::string p)
      : pool(std::move(p)),
        set(std::move(r), {{"pool", pool}}, "PoolMetrics",
            "give each block pool that shares a registry its own name (BlockManager builder "
            ".pool_name(...))") {}

  std::string pool;
  detail::SeriesSet set;
  prometheus::Counter *allocations = nullptr, *allocations_from_reset = nullptr,
                      *evictions = nullptr, *registrations = nullptr, *duplicate_blocks = nullptr,
                      *registration_dedup = nullptr, *stagings = nullptr,
                      *match_hashes_requested = nullptr, *match_blocks_returned = nullptr,
                      *scan_hashes_requested = nullptr, *scan_blocks_returned = nullptr;
  prometheus::Gauge *inflight_mutable = nullptr, *inflight_immutable = nullptr,
                    *reset_pool_size = nullptr, *inactive_pool_size = nullptr;
};

PoolMetrics::PoolMetrics(std::shared_ptr<prometheus::Registry> registry, std::string_view pool)
    : s_(std::make_unique<Series>(std::move(registry), std::string(pool))) {
  auto& s = *s_;
  auto counter = [&](const char* name, const char* help) { return s.set.counter(name, help); };
  auto gauge = [&](const char* name, const char* help) { return s.set.gauge(name, help); };
  s.allocations = counter("kvbm_allocations_total", "Total blocks allocated from pools");
  s.allocations_from_reset =
      counter("kvbm_allocations_from_reset_total", "Total blocks allocated from the reset pool");
  s.evictions = counter("kvbm_evictions_total", "Total blocks evicted from inactive pool");
  s.registrations = counter("kvbm_registrations_total",
                            "Total blocks registered (CompleteBlock -> ImmutableBlock)");
  s.duplicate_blocks =
      counter("kvbm_duplicate_blocks_total", "Total duplicate blocks created (Allow policy)");
  s.registration_dedup = counter("kvbm_registration_dedup_total",
                                 "Total block registrations deduplicated (Reject policy)");
  s.stagings = counter("kvbm_stagings_total", "Total MutableBlock -> CompleteBlock transitions");
  s.match_hashes_requested =
      counter("kvbm_match_hashes_requested_total", "Total hashes requested in match_blocks calls");
  s.match_blocks_returned =
      counter("kvbm_match_blocks_returned_total", "Total blocks returned from match_blocks calls");
  s.scan_hashes_requested =
      counter("kvbm_scan_hashes_requested_total", "Total hashes requested in scan_matches calls");
  s.scan_blocks_returned =
      counter("kvbm_scan_blocks_returned_total", "Total blocks returned from scan_matches calls");
  s.inflight_mutable = gauge("kvbm_inflight_mutable", "Current MutableBlocks held outside pool");
  s.inflight_immutable =
      gauge("kvbm_inflight_immutable", "Current ImmutableBlocks held outside pool");
  s.reset_pool_size = gauge("kvbm_reset_pool_size", "Current reset pool size");
  s.inactive_pool_size = gauge("kvbm_inactive_pool_size", "Current inactive pool size");
}

PoolMetrics::~PoolMetrics() = default;

namespace {
inline void bump(prometheus::Counter* c, std::uint64_t n) noexcept {
  if (n != 0) c->Increment(static_cast<double>(n));
}
}  // namespace

void PoolMetrics::add(const PoolCounterDelta& d) noexcept {
  auto& s = *s_;
  bump(s.allocations, d.allocations);
  bump(s.allocations_from_reset, d.allocations_from_reset);
  bump(s.evictions, d.evictions);
  bump(s.registrations, d.registrations);
  bump(s.duplicate_blocks, d.duplicate_blocks);
  bump(s.registration_dedup, d.registration_dedup);
  bump(s.stagings, d.stagings);
  bump(s.match_hashes_requested, d.match_hashes_requested);
  bump(s.match_blocks_returned, d.match_blocks_returned);
  bump(s.scan_hashes_requested, d.scan_hashes_requested);
  bump(s.scan_blocks_returned, d.scan_blocks_returned);
}

void PoolMetrics::add_staging() noexcept { s_->stagings->Increment(); }

PoolCounterDelta PoolMetrics::counts() const noexcept {
  const auto& s = *s_;
  auto value = [](const prometheus::Counter* c) { return static_cast<std::uint64_t>(c->Value()); };
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
  s_->inflight_mutable->Set(static_cast<double>(v));
}
void PoolMetrics::set_inflight_immutable(std::uint64_t v) noexcept {
  s_->inflight_immutable->Set(static_cast<double>(v));
}
void PoolMetrics::set_reset_pool_size(std::uint64_t v) noexcept {
  s_->reset_pool_size->Set(static_cast<double>(v));
}
void PoolMetrics::set_inactive_pool_size(std::uint64_t v) noexcept {
  s_->inactive_pool_size->Set(static_cast<double>(v));
}

const std::shared_ptr<prometheus::Registry>& PoolMetrics::registry() const noexcept {
  return s_->set.registry();
}
const std::string& PoolMetrics::pool() const noexcept { return s_->pool; }

}  // namespace kvbm
