// src/facade/costs.cpp: the facade's measured costs (facade/costs.h).

#include "facade/costs.h"

#include <cmath>
#include <string>
#include <utility>

#include <prometheus/gauge.h>

namespace kvbm::facade {
namespace {

constexpr std::int64_t kRefreshNs = 10'000'000;  // 10 ms of the clock between refreshes

std::int64_t now_ns(const Clock& c) { return c.now().time_since_epoch().count(); }

}  // namespace

Costs::Costs(const TierSpecs& specs, const KvBlockManagerConfig& c)
    : clock_(c.clock ? c.clock : Clock::steady()),
      block_bytes_(c.layout.block_bytes()),
      configured_tps_(c.prefill_tokens_per_second),
      series_(c.metrics_registry, {}, "KvBlockManager transfer costs",
              "give each manager its own registry, or destroy the other manager first") {
  auto add = [&](TierId from, TierId to) {
    auto p = std::make_unique<Path>();
    p->from = from;
    p->to = to;
    const std::string name = copy_path_name(from, to);
    const std::string help = "Duration of one batch on the copy path, recent quantile (seconds)";
    p->p50 = series_.gauge("kvbm_transfer_seconds", help, {{"path", name}, {"quantile", "0.5"}});
    p->p99 = series_.gauge("kvbm_transfer_seconds", help, {{"path", name}, {"quantile", "0.99"}});
    p->bytes_per_second =
        series_.gauge("kvbm_transfer_bytes_per_second",
                      "Recent throughput of the copy path (bytes per second)", {{"path", name}});
    paths_[from][to] = std::move(p);
  };
  for (const TierId t : kTierIds) {
    const TierSpec& s = specs[t];
    if (!s.present || t == TierId::kG1) continue;
    add(s.above, t);
    add(t, s.storage == StorageKind::kRemote ? s.above : TierId::kG1);
  }
  prefill_gauge_ = series_.gauge("kvbm_prefill_seconds_per_token",
                                 "The engine's prefill time per token, as estimated (0: unknown)");
  refresh_prefill();
}

Costs::~Costs() = default;

void Costs::record(TierId from, TierId to, std::size_t blocks, Clock::duration took) noexcept {
  Path* p = at(from, to);
  if (p == nullptr) return;
  p->estimator.record(blocks, block_bytes_, took);
  const std::int64_t now = now_ns(*clock_);
  std::int64_t last = p->refreshed_ns.load(std::memory_order_relaxed);
  if (last != INT64_MIN && now - last < kRefreshNs) return;
  if (!p->refreshed_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  try {
    refresh(*p);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a gauge left stale until the next refresh
  }
}

void Costs::refresh(Path& p) const {
  const auto sizes = p.estimator.summary();
  for (const auto& s : sizes) {
    if (s.block_bytes != block_bytes_) continue;
    p.p50->Set(std::chrono::duration<double>(s.p50).count());
    p.p99->Set(std::chrono::duration<double>(s.p99).count());
    p.bytes_per_second->Set(s.bytes_per_second);
  }
}

TransferCostModel Costs::model(TierId from, TierId to) const {
  const Path* p = at(from, to);
  return p != nullptr ? p->estimator.model(block_bytes_) : TransferCostModel{};
}

void Costs::report_prefill(std::size_t tokens, Clock::duration took) noexcept {
  prefill_.record(tokens, 1, took);
  try {
    refresh_prefill();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a gauge left stale until the next refresh
  }
}

TransferCostModel Costs::prefill() const {
  TransferCostModel m = prefill_.model(1);
  if (m.known) return m;
  if (configured_tps_ > 0) {
    m.known = true;
    m.per_block_s = 1.0 / configured_tps_;
  }
  return m;
}

void Costs::refresh_prefill() const {
  const TransferCostModel m = prefill();
  prefill_gauge_->Set(m.known ? m.per_block_s * m.ratio_p50 : 0.0);
}

TransferCosts Costs::snapshot() const {
  TransferCosts out;
  out.block_bytes = block_bytes_;
  for (const TierId from : kTierIds) {
    for (const TierId to : kTierIds) {
      Path* p = at(from, to);
      if (p == nullptr) continue;
      refresh(*p);
      out.paths.push_back({.from = from,
                           .to = to,
                           .path = copy_path_name(from, to),
                           .sizes = p->estimator.summary(),
                           .model = p->estimator.model(block_bytes_)});
    }
  }
  out.prefill.configured_tokens_per_second = configured_tps_;
  if (auto s = prefill_.summary(); !s.empty()) out.prefill.reported = s.front();
  out.prefill.model = prefill();
  refresh_prefill();
  return out;
}

}  // namespace kvbm::facade
