// src/facade/boundary.h (internal): how blocks move down from one tier to the next.
//
// A TierBoundary<Upper, Lower> is the one interface of a boundary, whatever
// its mode (TierSpec::mode of the lower tier):
//
//   kWriteThrough  take(blocks) enqueues the blocks registered in Upper in an
//                  OffloadPipeline (refreshing the copies Lower already holds);
//   kOnEviction    an EvictionCopier, a listener on the upper pool, copies
//                  what Upper evicts; take() does nothing;
//   kNone          nothing moves down on its own.
//
// Whatever the mode, offload(blocks) enqueues blocks explicitly (building a
// pipeline on first use outside write-through), and the copies registered in
// Lower go on to the boundary below through `next` (its intake(), set when
// that boundary is write-through). The facade builds one boundary per pair
// of present local tiers (G1-G3), bottom-up; G4's writes go through
// RemoteTier (remote_tier.h), not a boundary.
//
// Lifetime: construct before the upper pool (eviction_listener() goes into
// its builder), bind() once both pools and the engine exist. Shutdown in two
// steps, top-down: stop_pipelines() on every boundary, then (after
// onboarding has ended) stop_copier().
// Thread-safety: take(), offload(), drain() from any thread.

#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "facade/eviction_copier.h"
#include "facade/tiers.h"
#include "kvbm/block_manager.h"
#include "kvbm/block_registry.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/pipeline.h"
#include "kvbm/offload/policy.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/offload/transfer_handle.h"

namespace kvbm::facade {

/// What a boundary needs besides its pools: shared by every boundary.
struct BoundaryContext {
  std::shared_ptr<BlockRegistry> registry;
  std::shared_ptr<FrequencyTracker> tracker;
  std::shared_ptr<prometheus::Registry> metrics;
  std::shared_ptr<Clock> clock;  ///< every pipeline's intervals and timeouts
};

/// One tier boundary; see the file comment.
template <TierMarker Upper, TierMarker Lower>
class TierBoundary {
 public:
  /// Takes copies a boundary registered in Upper (this boundary's intake).
  using Intake = std::function<void(std::vector<ImmutableBlock<Upper>>&&)>;
  /// Takes the copies this boundary registered in Lower (the next one's intake).
  using Next = std::function<void(std::vector<ImmutableBlock<Lower>>&&)>;

  /// `lower` describes the tier below (its mode, policy and pipeline config).
  TierBoundary(const TierSpec& lower, BoundaryContext ctx)
      : mode_(lower.mode),
        policy_(*lower.policy),
        pipeline_config_(lower.pipeline),
        ctx_(std::move(ctx)) {
    if (mode_ == OffloadMode::kOnEviction)
      copier_ = std::make_shared<EvictionCopier<Upper, Lower>>();
  }
  TierBoundary(const TierBoundary&) = delete;
  TierBoundary& operator=(const TierBoundary&) = delete;

  /// The listener the upper pool is built with (on-eviction), else null.
  [[nodiscard]] std::shared_ptr<PoolListener> eviction_listener() const { return copier_; }
  [[nodiscard]] OffloadMode mode() const noexcept { return mode_; }

  /// Wires the boundary; `next` takes what it registers in Lower (may be empty).
  void bind(BlockManager<Upper>& upper, BlockManager<Lower>& lower,
            std::shared_ptr<TransferEngine> engine, Next next) {
    upper_ = &upper;
    lower_ = &lower;
    engine_ = std::move(engine);
    next_ = std::move(next);
    if (mode_ == OffloadMode::kWriteThrough) {
      auto b = builder();
      for (auto& p : policies()) b.policy(std::move(p));
      if (next_) b.on_registered(next_);
      pipeline_ = b.build();
    } else if (mode_ == OffloadMode::kOnEviction) {
      copier_->bind(lower_, engine_,
                    std::make_shared<OffloadMetrics>(ctx_.metrics, path() + "_on_eviction"),
                    policies(), next_);
    }
  }

  /// What the boundary above hands its copies in Upper to: write-through
  /// takes them, the other modes need nothing (empty).
  [[nodiscard]] Intake intake() {
    if (!pipeline_) return {};
    return [this](std::vector<ImmutableBlock<Upper>>&& blocks) { take(blocks, nullptr); };
  }

  /// Blocks just registered in Upper: write-through enqueues them once
  /// `pre` (if any) is met; the other modes do nothing.
  void take(const std::vector<ImmutableBlock<Upper>>& blocks, std::shared_ptr<Precondition> pre) {
    if (!pipeline_ || blocks.empty()) return;
    if (policy_.skip_present) refresh_present(blocks);
    track(pipeline_->enqueue(blocks, std::move(pre)));
  }

  /// Enqueues registered blocks whatever the mode; see KvBlockManager::offload.
  TransferHandle offload(const std::vector<ImmutableBlock<Upper>>& blocks,
                         std::shared_ptr<Precondition> pre) {
    OffloadPipeline<Upper, Lower>* pipeline = pipeline_.get();
    if (pipeline == nullptr) {
      detail::LockGuard lock(explicit_mu_);
      if (!explicit_) {
        auto b = builder();
        b.name(path() + "_explicit");
        if (next_) b.on_registered(next_);
        explicit_ = b.build();
      }
      pipeline = explicit_.get();
    }
    auto h = pipeline->enqueue(blocks, std::move(pre));
    track(h);
    return h;
  }

  /// Waits for every handle enqueued so far (and those they lead to here).
  void drain() {
    for (;;) {
      std::vector<TransferHandle> hs;
      {
        detail::LockGuard lock(handles_mu_);
        hs.swap(handles_);
      }
      if (hs.empty()) return;
      for (auto& h : hs) h.wait();
    }
  }

  /// Shutdown, first step: the pipelines stop (see OffloadPipeline::shutdown).
  void stop_pipelines() {
    {
      detail::LockGuard lock(explicit_mu_);  // offload() may be building it
      if (explicit_) explicit_->shutdown();
    }
    if (pipeline_) pipeline_->shutdown();
  }
  /// Shutdown, last step: the on-eviction copier stops for good.
  void stop_copier() noexcept {
    if (copier_) copier_->disable();
  }

  /// What the boundary's offloads did, every mechanism summed (write-through,
  /// explicit, on-eviction): their OffloadMetrics counters, read.
  [[nodiscard]] OffloadCounts counts() {
    OffloadCounts c;
    if (pipeline_) c += pipeline_->metrics().counts();
    if (copier_) c += copier_->counts();
    detail::LockGuard lock(explicit_mu_);
    if (explicit_) c += explicit_->metrics().counts();
    return c;
  }

 private:
  static std::string path() {
    return std::string(tier_name<Upper>()) + "_to_" + std::string(tier_name<Lower>());
  }

  // The pipeline's common options: the tiers, the engine, the config and the
  // presence policy when asked for.
  typename OffloadPipeline<Upper, Lower>::Builder builder() {
    auto b = OffloadPipeline<Upper, Lower>::builder();
    b.source(*upper_)
        .destination(*lower_)
        .engine(engine_)
        .config(pipeline_config_)
        .metrics_registry(ctx_.metrics)
        .clock(ctx_.clock);
    if (policy_.skip_present) b.policy(std::make_shared<PresencePolicy<Lower>>(ctx_.registry));
    return b;
  }

  std::vector<std::shared_ptr<OffloadPolicy>> policies() const {
    std::vector<std::shared_ptr<OffloadPolicy>> out;
    if (policy_.min_frequency > 0) {
      out.push_back(std::make_shared<FrequencyPolicy>(ctx_.tracker, policy_.min_frequency));
    }
    return out;
  }

  // A block written through to a tier that already holds it is not copied
  // again (the presence policy filters it), but that copy is refreshed: it is
  // in use above right now, so it is the tier's most recently used block.
  // The same rule as an on-eviction copy that finds its block below.
  void refresh_present(const std::vector<ImmutableBlock<Upper>>& blocks) {
    std::vector<SequenceHash> hashes;
    hashes.reserve(blocks.size());
    for (const auto& b : blocks) hashes.push_back(b.sequence_hash());
    (void)lower_->refresh(hashes);
  }

  void track(const TransferHandle& h) {
    if (!h.valid()) return;
    detail::LockGuard lock(handles_mu_);
    if (handles_.size() >= 256) {
      std::erase_if(handles_, [](const TransferHandle& x) { return is_terminal(x.status()); });
    }
    handles_.push_back(h);
  }

  const OffloadMode mode_;
  const OffloadPolicyConfig policy_;
  const PipelineConfig pipeline_config_;
  const BoundaryContext ctx_;
  BlockManager<Upper>* upper_ = nullptr;
  BlockManager<Lower>* lower_ = nullptr;
  std::shared_ptr<TransferEngine> engine_;
  Next next_;
  std::shared_ptr<EvictionCopier<Upper, Lower>> copier_;
  detail::Mutex handles_mu_;
  std::vector<TransferHandle> handles_ KVBM_GUARDED_BY(handles_mu_);
  detail::Mutex explicit_mu_;
  // Pipelines last: destroyed first, while the handles, pools and engine exist.
  std::unique_ptr<OffloadPipeline<Upper, Lower>> pipeline_;
  std::unique_ptr<OffloadPipeline<Upper, Lower>> explicit_ KVBM_GUARDED_BY(explicit_mu_);
};

/// One boundary per pair of adjacent tiers (null when the lower tier is absent).
template <class Tuple, class Seq>
struct BoundariesOf;
template <class Tuple, std::size_t... I>
struct BoundariesOf<Tuple, std::index_sequence<I...>> {
  using type = std::tuple<std::unique_ptr<
      TierBoundary<std::tuple_element_t<I, Tuple>, std::tuple_element_t<I + 1, Tuple>>>...>;
};
using Boundaries = BoundariesOf<TierTypes, std::make_index_sequence<kTierCount - 1>>::type;

}  // namespace kvbm::facade
