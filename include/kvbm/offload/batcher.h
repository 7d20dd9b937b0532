// kvbm/offload/batcher.h: the third pipeline stage.
//
// The Batcher groups whole containers (never split, P1) into batches:
//
//   - a batch holds at most max_batch_size blocks; a container that would
//     overflow the pending batch flushes it first, and a single container
//     larger than max_batch_size becomes a batch of its own;
//   - the pending batch is flushed as soon as it holds min_batch_size
//     blocks, or once flush_interval has passed (on the clock) since its
//     first container arrived (poll() does that; deadline() says when), or
//     as soon as someone waits on the handle of one of its containers;
//   - a batch never mixes containers whose preconditions differ unless all
//     of them are met: a container that does not fit that rule flushes the
//     pending batch first. (In the pipeline the PreconditionAwaiter comes
//     first, so every container arrives with its precondition met.)
//
// Cancelled containers are dropped on arrival and by sweep(); they never
// count towards a batch's size.
//
// Thread-safety: none; one owner (the pipeline's dispatcher) at a time.

#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/error.h"
#include "kvbm/offload/config.h"
#include "kvbm/offload/container.h"

namespace kvbm {

/// Groups containers into batches; see the file comment.
template <TierMarker Src>
class Batcher {
 public:
  /// Throws UsageError when the config is invalid or the clock is null.
  Batcher(const BatchConfig& config, std::shared_ptr<Clock> clock)
      : config_(config), clock_(std::move(clock)) {
    PipelineConfig whole;
    whole.batch_config = config;
    whole.validate();
    KVBM_CHECK(clock_ != nullptr, "Batcher: the clock is null");
  }

  /// Adds a container; appends to `out` every batch that became ready.
  void add(OffloadContainer<Src>&& c, std::vector<OffloadBatch<Src>>& out) {
    if (c.sweep()) return;
    if (c.blocks.empty()) {  // nothing to move
      c.finish();
      return;
    }
    if (!pending_.empty() &&
        (!compatible(c) || pending_blocks_ + c.blocks.size() > config_.max_batch_size)) {
      flush(out);
    }
    if (pending_.empty()) first_arrival_ = clock_->now();
    c.state->advance(TransferStatus::kBatched);
    pending_blocks_ += c.blocks.size();
    const bool waited = c.state->waited();
    pending_.containers.push_back(std::move(c));
    if (pending_blocks_ >= config_.min_batch_size || waited) flush(out);
  }

  /// Flushes the pending batch into `out` when its flush_interval has passed
  /// or someone waits for one of its containers.
  void poll(std::vector<OffloadBatch<Src>>& out) {
    if (pending_.empty()) return;
    const bool waited = std::any_of(pending_.containers.begin(), pending_.containers.end(),
                                    [](const auto& c) { return c.state->waited(); });
    if (waited || clock_->now() >= first_arrival_ + config_.flush_interval) flush(out);
  }

  /// Flushes the pending batch (if any) into `out` now.
  void flush(std::vector<OffloadBatch<Src>>& out) {
    pending_.sweep_cancelled();
    if (!pending_.empty()) out.push_back(std::move(pending_));
    pending_ = {};
    pending_blocks_ = 0;
  }

  /// Returns when poll() will flush the pending batch; nullopt when empty.
  [[nodiscard]] std::optional<Clock::time_point> deadline() const {
    if (pending_.empty()) return std::nullopt;
    return first_arrival_ + config_.flush_interval;
  }

  /// Drops the cancelled pending containers; returns how many.
  std::size_t sweep() {
    const std::size_t n = pending_.sweep_cancelled();
    if (n != 0) pending_blocks_ = pending_.block_count();
    return n;
  }

  /// Takes every pending container (shutdown).
  std::vector<OffloadContainer<Src>> take_all() {
    auto out = std::move(pending_.containers);
    pending_ = {};
    pending_blocks_ = 0;
    return out;
  }

  /// Returns the blocks in the pending batch.
  [[nodiscard]] std::size_t pending_blocks() const noexcept { return pending_blocks_; }
  /// Returns the containers in the pending batch.
  [[nodiscard]] std::size_t pending_containers() const noexcept {
    return pending_.containers.size();
  }
  [[nodiscard]] const BatchConfig& config() const noexcept { return config_; }

 private:
  // A container may join the pending batch when every container there has
  // the same precondition, or when all of them and it are met.
  bool compatible(const OffloadContainer<Src>& c) const {
    bool same = true;
    bool all_met = c.precondition_met();
    for (const auto& p : pending_.containers) {
      same = same && p.precondition == c.precondition;
      all_met = all_met && p.precondition_met();
    }
    return same || all_met;
  }

  BatchConfig config_;
  std::shared_ptr<Clock> clock_;
  OffloadBatch<Src> pending_;
  std::size_t pending_blocks_ = 0;
  Clock::time_point first_arrival_{};
};

}  // namespace kvbm
