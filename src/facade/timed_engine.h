// src/facade/timed_engine.h (internal): an engine whose batches are timed into the facade's costs.
//
// TimedEngine wraps one tier's engine (its `down` or `up`, facade/tier_engines.h)
// and records each batch's duration, from submit() to its completion, on
// Costs' clock into the path `from` -> `to` (facade/costs.h). The record is
// the first callback of the completion, so it has run before any caller's
// callback (an onboarding's end) sees the outcome. Everything else (name,
// counts) is the wrapped engine's.
//
// Thread-safety: as the wrapped engine.

#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "facade/costs.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm::facade {

/// See the file comment.
class TimedEngine final : public TransferEngine {
 public:
  TimedEngine(std::shared_ptr<TransferEngine> inner, std::shared_ptr<Costs> costs, TierId from,
              TierId to)
      : inner_(std::move(inner)), costs_(std::move(costs)), from_(from), to_(to) {}

  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override {
    const Clock::time_point start = costs_->clock().now();
    auto done = inner_->submit(pairs);
    done->on_complete(
        [costs = costs_, from = from_, to = to_, n = pairs.size(), start](const TransferOutcome&) {
          costs->record(from, to, n, costs->clock().now() - start);
        });
    return done;
  }
  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept override {
    return inner_->counts();
  }

 private:
  std::shared_ptr<TransferEngine> inner_;
  std::shared_ptr<Costs> costs_;
  TierId from_, to_;
};

/// Wraps `engine` (when not null) in a TimedEngine for path `from` -> `to`.
[[nodiscard]] inline std::shared_ptr<TransferEngine> timed(std::shared_ptr<TransferEngine> engine,
                                                           const std::shared_ptr<Costs>& costs,
                                                           TierId from, TierId to) {
  if (!engine) return engine;
  return std::make_shared<TimedEngine>(std::move(engine), costs, from, to);
}

}  // namespace kvbm::facade
