// src/facade/costs.h (internal): the facade's measured costs, one estimator per copy path.
//
// Costs holds a TransferCostEstimator (kvbm/transfer/transfer_cost_estimator.h)
// per copy path the tiers make (kvbm/transfer_costs.h lists them) and one for
// the engine's prefill (report_prefill(), a "block" being a token), plus
// their gauges. It is fed where batches complete: the engines between the
// pooled tiers are wrapped in a TimedEngine (facade/timed_engine.h), the G4
// fetch times its round trip (remote_tier.cpp), the G4 writer reports each
// write batch. Every duration is read from the config's clock.
//
// Gauges are refreshed by record() at most every 10 ms of the clock per path
// (a refit of the window; record() itself is one ring write), and by
// snapshot().
//
// Lifetime: shared by the engines' wrappers and the G4 tier; outlives them.
// Thread-safety: every member from any thread.

#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "facade/tiers.h"
#include "kvbm/clock.h"
#include "kvbm/detail/series_set.h"
#include "kvbm/transfer_costs.h"

namespace prometheus {
class Gauge;
}

namespace kvbm::facade {

/// The facade's measured costs; see the file comment.
class Costs {
 public:
  /// The paths of `specs`' present tiers, timed on `c.clock` (null: steady),
  /// gauges in `c.metrics_registry`.
  Costs(const TierSpecs& specs, const KvBlockManagerConfig& c);
  ~Costs();
  Costs(const Costs&) = delete;
  Costs& operator=(const Costs&) = delete;

  [[nodiscard]] Clock& clock() const noexcept { return *clock_; }
  /// The same clock, for what may outlive the manager (an onboarding's deadline).
  [[nodiscard]] const std::shared_ptr<Clock>& shared_clock() const noexcept { return clock_; }
  /// True when the tiers make copies from `from` to `to`.
  [[nodiscard]] bool has(TierId from, TierId to) const noexcept { return at(from, to) != nullptr; }
  /// Records one batch of `blocks` on path `from` -> `to` (ignored when absent).
  void record(TierId from, TierId to, std::size_t blocks, Clock::duration took) noexcept;
  /// The model of path `from` -> `to` for the manager's blocks (unknown when absent).
  [[nodiscard]] TransferCostModel model(TierId from, TierId to) const;
  /// Records one prefill batch of `tokens` tokens.
  void report_prefill(std::size_t tokens, Clock::duration took) noexcept;
  /// The prefill model: the reports', else the configured rate, else unknown.
  [[nodiscard]] TransferCostModel prefill() const;
  /// Every path's cost and the prefill's; refreshes every gauge.
  [[nodiscard]] TransferCosts snapshot() const;

 private:
  struct Path {
    TierId from, to;
    TransferCostEstimator estimator;
    prometheus::Gauge* p50 = nullptr;
    prometheus::Gauge* p99 = nullptr;
    prometheus::Gauge* bytes_per_second = nullptr;
    std::atomic<std::int64_t> refreshed_ns{INT64_MIN};
  };
  [[nodiscard]] Path* at(TierId from, TierId to) const noexcept { return paths_[from][to].get(); }
  void refresh(Path& p) const;
  void refresh_prefill() const;

  std::shared_ptr<Clock> clock_;
  std::size_t block_bytes_;
  double configured_tps_;
  detail::SeriesSet series_;
  TierArray<TierArray<std::unique_ptr<Path>>> paths_;
  TransferCostEstimator prefill_;
  prometheus::Gauge* prefill_gauge_ = nullptr;
};

}  // namespace kvbm::facade
