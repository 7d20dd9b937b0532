// src/facade/boundary.h (internal): how blocks move down from one tier to another.
//
// A Boundary<Upper> is what a tier's row (facade/pool_tier.h) holds for each
// tier below it, whatever that tier is and whatever the boundary's mode
// (TierSpec::mode of the lower tier):
//
//   kWriteThrough  take(blocks) enqueues the blocks registered in Upper;
//   kOnEviction    a listener on the upper pool, built before that pool,
//                  copies what Upper evicts; take() does nothing;
//   kNone          nothing moves down on its own.
//
// TierBoundary<Upper, Lower> is the boundary into a pooled tier: an
// OffloadPipeline (write-through, and one built on first explicit offload())
// or an EvictionCopier, refreshing the copies Lower already holds; the copies
// it registers in Lower go on through `next` (the lower row's intake). The
// boundary into a remote tier is in facade/remote_tier.h.
//
// Lifetime: the on-eviction listener is made first (make_copier), then the
// upper pool with it, then the boundary; nothing is bound afterwards.
// Shutdown in two steps, top-down: stop_pipelines() on every boundary, then
// (after onboarding has ended) stop_copier().
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
#include "kvbm/kv_block_manager_stats.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/pipeline.h"
#include "kvbm/offload/policy.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/offload/transfer_handle.h"

namespace kvbm::facade {

/// What a boundary needs besides its tiers: shared by every boundary.
struct BoundaryContext {
  std::shared_ptr<BlockRegistry> registry;
  std::shared_ptr<FrequencyTracker> tracker;
  std::shared_ptr<prometheus::Registry> metrics;
  std::shared_ptr<Clock> clock;  ///< every pipeline's intervals and timeouts
};

/// The policies of a boundary's config (e.g. a minimum frequency).
[[nodiscard]] inline std::vector<std::shared_ptr<OffloadPolicy>> boundary_policies(
    const OffloadPolicyConfig& policy, const BoundaryContext& ctx) {
  std::vector<std::shared_ptr<OffloadPolicy>> out;
  if (policy.min_frequency > 0) {
    out.push_back(std::make_shared<FrequencyPolicy>(ctx.tracker, policy.min_frequency));
  }
  return out;
}

/// A boundary from tier Upper to one tier below; see the file comment.
template <TierMarker Upper>
class Boundary {
 public:
  Boundary(TierId lower, OffloadMode mode) : lower_(lower), mode_(mode) {}
  virtual ~Boundary() = default;
  Boundary(const Boundary&) = delete;
  Boundary& operator=(const Boundary&) = delete;

  [[nodiscard]] TierId lower() const noexcept { return lower_; }
  [[nodiscard]] OffloadMode mode() const noexcept { return mode_; }

  /// Blocks just registered in Upper: write-through enqueues them once
  /// `pre` (if any) is met; the other modes do nothing.
  virtual void take(const std::vector<ImmutableBlock<Upper>>& blocks,
                    std::shared_ptr<Precondition> pre) = 0;
  /// Enqueues registered blocks whatever the mode; see KvBlockManager::offload.
  virtual TransferHandle offload(const std::vector<ImmutableBlock<Upper>>& blocks,
                                 std::shared_ptr<Precondition> pre) = 0;
  /// Waits for every block enqueued so far (and what it led to here).
  virtual void drain() = 0;
  /// Shutdown, first step.
  virtual void stop_pipelines() = 0;
  /// Shutdown, last step.
  virtual void stop_copier() noexcept {}
  /// What the boundary's offloads did, every mechanism summed.
  [[nodiscard]] virtual OffloadCounts counts() = 0;

 private:
  const TierId lower_;
  const OffloadMode mode_;
};

/// What a row below hands the row above it before that row's pool exists:
/// the listener that pool is built with (on-eviction; else null), and how
/// to make the boundary once it exists.
template <TierMarker Upper>
struct Link {
  OffloadMode mode = OffloadMode::kNone;
  std::shared_ptr<PoolListener> listener;
  std::function<std::unique_ptr<Boundary<Upper>>(BlockManager<Upper>&)> make;
};

/// A boundary into a pooled tier; see the file comment.
template <TierMarker Upper, TierMarker Lower>
class TierBoundary final : public Boundary<Upper> {
 public:
  /// Takes the copies this boundary registered in Lower (the lower row's intake).
  using Next = std::function<void(std::vector<ImmutableBlock<Lower>>&&)>;
  using Copier = EvictionCopier<Upper, Lower>;

  /// The listener the upper pool is built with when `lower` is on-eviction (else null).
  [[nodiscard]] static std::shared_ptr<Copier> make_copier(const TierSpec& lower,
                                                           BlockManager<Lower>& pool,
                                                           std::shared_ptr<TransferEngine> engine,
                                                           const BoundaryContext& ctx, Next next) {
    if (lower.mode != OffloadMode::kOnEviction) return nullptr;
    return std::make_shared<Copier>(
        pool, std::move(engine),
        std::make_shared<OffloadMetrics>(ctx.metrics, path() + "_on_eviction"),
        boundary_policies(*lower.policy, ctx), std::move(next));
  }

  /// `lower` describes the tier below (its mode, policy and pipeline config);
  /// `copier` is make_copier()'s, which the upper pool listens with.
  TierBoundary(const TierSpec& lower, BlockManager<Upper>& upper, BlockManager<Lower>& lower_pool,
               std::shared_ptr<TransferEngine> engine, BoundaryContext ctx,
               std::shared_ptr<Copier> copier, Next next)
      : Boundary<Upper>(lower.id, lower.mode),
        policy_(*lower.policy),
        pipeline_config_(lower.pipeline),
        ctx_(std::move(ctx)),
        upper_(upper),
        lower_(lower_pool),
        engine_(std::move(engine)),
        next_(std::move(next)),
        copier_(std::move(copier)) {
    if (this->mode() == OffloadMode::kWriteThrough) {
      auto b = builder();
      for (auto& p : boundary_policies(policy_, ctx_)) b.policy(std::move(p));
      if (next_) b.on_registered(next_);
      pipeline_ = b.build();
    }
  }

  void take(const std::vector<ImmutableBlock<Upper>>& blocks,
            std::shared_ptr<Precondition> pre) override {
    if (!pipeline_ || blocks.empty()) return;
    if (policy_.skip_present) refresh_present(blocks);
    track(pipeline_->enqueue(blocks, std::move(pre)));
  }

  TransferHandle offload(const std::vector<ImmutableBlock<Upper>>& blocks,
                         std::shared_ptr<Precondition> pre) override {
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

  void drain() override {
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

  void stop_pipelines() override {
    {
      detail::LockGuard lock(explicit_mu_);  // offload() may be building it
      if (explicit_) explicit_->shutdown();
    }
    if (pipeline_) pipeline_->shutdown();
  }
  void stop_copier() noexcept override {
    if (copier_) copier_->disable();
  }

  /// Their OffloadMetrics counters, read (write-through, explicit, on-eviction).
  [[nodiscard]] OffloadCounts counts() override {
    OffloadCounts c;
    if (pipeline_) c += pipeline_->metrics().counts();
    if (copier_) c += copier_->counts();
    detail::LockGuard lock(explicit_mu_);
    if (explicit_) c += explicit_->metrics().counts();
    return c;
  }

 private:
  static std::string path() { return copy_path_name<Upper, Lower>(); }

  // The pipeline's common options: the tiers, the engine, the config and the
  // presence policy when asked for.
  typename OffloadPipeline<Upper, Lower>::Builder builder() {
    auto b = OffloadPipeline<Upper, Lower>::builder();
    b.source(upper_)
        .destination(lower_)
        .engine(engine_)
        .config(pipeline_config_)
        .metrics_registry(ctx_.metrics)
        .clock(ctx_.clock);
    if (policy_.skip_present) b.policy(std::make_shared<PresencePolicy<Lower>>(ctx_.registry));
    return b;
  }

  // A block written through to a tier that already holds it is not copied
  // again (the presence policy filters it), but that copy is refreshed: it is
  // in use above right now, so it is the tier's most recently used block.
  // The same rule as an on-eviction copy that finds its block below.
  void refresh_present(const std::vector<ImmutableBlock<Upper>>& blocks) {
    std::vector<SequenceHash> hashes;
    hashes.reserve(blocks.size());
    for (const auto& b : blocks) hashes.push_back(b.sequence_hash());
    (void)lower_.refresh(hashes);
  }

  void track(const TransferHandle& h) {
    if (!h.valid()) return;
    detail::LockGuard lock(handles_mu_);
    if (handles_.size() >= 256) {
      std::erase_if(handles_, [](const TransferHandle& x) { return is_terminal(x.status()); });
    }
    handles_.push_back(h);
  }

  const OffloadPolicyConfig policy_;
  const PipelineConfig pipeline_config_;
  const BoundaryContext ctx_;
  BlockManager<Upper>& upper_;
  BlockManager<Lower>& lower_;
  std::shared_ptr<TransferEngine> engine_;
  Next next_;
  std::shared_ptr<Copier> copier_;
  detail::Mutex handles_mu_;
  std::vector<TransferHandle> handles_ KVBM_GUARDED_BY(handles_mu_);
  detail::Mutex explicit_mu_;
  // Pipelines last: destroyed first, while the handles, pools and engine exist.
  std::unique_ptr<OffloadPipeline<Upper, Lower>> pipeline_;
  std::unique_ptr<OffloadPipeline<Upper, Lower>> explicit_ KVBM_GUARDED_BY(explicit_mu_);
};

}  // namespace kvbm::facade
