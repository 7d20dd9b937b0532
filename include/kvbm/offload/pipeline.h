// kvbm/offload/pipeline.h: moves registered blocks from tier Src to tier Dst.
//
// An OffloadPipeline<Src, Dst> (e.g. <G1, G2>, built by builder()) chains the
// stages of the offload spec (policies, precondition, batcher, executor; a
// sweeper removes cancelled containers) with cancellable queues between them,
// copies through an engine and registers the copies in Dst. enqueue(blocks,
// precondition) returns a TransferHandle (wait, cancel, status, report). The
// policies P1 to P6 hold; docs/offload.md has the stages, batching, threads and
// an example, the stage headers the details.
//
// enqueue() downgrades the blocks at once: until the executor seals the
// container (P3) the pipeline holds only WeakBlocks, so queued blocks never
// prevent eviction and a block evicted while queued is dropped, not copied;
// PipelineConfig::hold_queued_blocks keeps them strong until the seal instead.
// Threads: a policy thread (none when every policy is cheap()), one dispatcher
// (each the one loop of a detail::Worker), the sweeper's, plus the engine's
// completion callbacks, which register the copies in Dst.
//
// Shutdown: shutdown() (also run by the destructor) stops accepting work,
// cancels every container that has not passed the commitment point, waits
// for the committed ones to complete and joins the threads: afterwards no
// block of either tier is held by the pipeline. A policy call in progress
// is waited for.
//
// Lifetime: both managers and the engine must outlive the pipeline.
// Thread-safety: enqueue(), stats() and shutdown() may be called from any thread.

#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/error.h"
#include "kvbm/offload/batcher.h"
#include "kvbm/offload/cancel_sweeper.h"
#include "kvbm/offload/cancellable_queue.h"
#include "kvbm/offload/config.h"
#include "kvbm/offload/container.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/policy.h"
#include "kvbm/offload/policy_evaluator.h"
#include "kvbm/offload/precondition_awaiter.h"
#include "kvbm/offload/transfer_executor.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm {

/// A snapshot of where the containers of a pipeline are.
struct PipelineStats {
  std::size_t queued = 0;              ///< containers waiting for the policy stage
  std::size_t waiting = 0;             ///< containers waiting for their precondition
  std::size_t to_batch = 0;            ///< containers between the awaiter and the batcher
  std::size_t batcher_containers = 0;  ///< containers in the pending batch
  std::size_t batcher_blocks = 0;      ///< blocks in the pending batch
  std::size_t ready_batches = 0;       ///< batches waiting for a transfer slot
  std::size_t in_flight = 0;           ///< batches in the engine
};

/// The offload pipeline from tier Src to tier Dst; see the file comment.
template <TierMarker Src, TierMarker Dst>
class OffloadPipeline {
 public:
  /// Builds an OffloadPipeline; every option is checked by build().
  class Builder {
   public:
    /// The tier blocks come from (required).
    Builder& source(BlockManager<Src>& m) {
      src_ = &m;
      return *this;
    }
    /// The tier copies go to (required).
    Builder& destination(BlockManager<Dst>& m) {
      dst_ = &m;
      return *this;
    }
    /// The engine that copies Src blocks to Dst blocks (required).
    Builder& engine(std::shared_ptr<TransferEngine> e) {
      engine_ = std::move(e);
      return *this;
    }
    /// Adds a policy; all must pass a block (none: everything passes).
    Builder& policy(std::shared_ptr<OffloadPolicy> p) {
      policies_.push_back(std::move(p));
      return *this;
    }
    /// The pipeline's options (default: the spec's defaults).
    Builder& config(const PipelineConfig& c) {
      config_ = c;
      return *this;
    }
    /// The clock every interval and timeout is measured on (default steady).
    Builder& clock(std::shared_ptr<Clock> c) {
      clock_ = std::move(c);
      return *this;
    }
    /// Where the metrics go (default: the source manager's registry).
    Builder& metrics_registry(std::shared_ptr<prometheus::Registry> r) {
      metrics_ = std::move(r);
      return *this;
    }
    /// The `pipeline` label (default "<Src>_to_<Dst>", e.g. "G1_to_G2").
    Builder& name(std::string n) {
      name_ = std::move(n);
      return *this;
    }

    /// Called with the copies each batch registered in Dst, before the
    /// batch's handles end (see TransferExecutor::RegisteredCallback).
    Builder& on_registered(typename TransferExecutor<Src, Dst>::RegisteredCallback cb) {
      on_registered_ = std::move(cb);
      return *this;
    }

    /// Returns the running pipeline. Throws UsageError naming the first
    /// invalid option.
    [[nodiscard]] std::unique_ptr<OffloadPipeline> build() {
      KVBM_CHECK(src_ != nullptr, "OffloadPipeline: source(manager) must be set");
      KVBM_CHECK(dst_ != nullptr, "OffloadPipeline: destination(manager) must be set");
      KVBM_CHECK(engine_ != nullptr, "OffloadPipeline: engine(...) must be set");
      KVBM_CHECK(src_->block_size() == dst_->block_size(), "OffloadPipeline: the source pool ",
                 src_->pool_name(), " holds blocks of ", src_->block_size(),
                 " tokens but the destination pool ", dst_->pool_name(), " holds ",
                 dst_->block_size(), "; both must use the same block size");
      for (const auto& p : policies_) KVBM_CHECK(p != nullptr, "OffloadPipeline: a policy is null");
      config_.validate();
      if (!clock_) clock_ = Clock::steady();
      if (!metrics_) metrics_ = src_->metrics_registry();
      if (name_.empty()) {
        name_ = copy_path_name<Src, Dst>();
      }
      return std::unique_ptr<OffloadPipeline>(new OffloadPipeline(*this));
    }

   private:
    friend class OffloadPipeline;
    BlockManager<Src>* src_ = nullptr;
    BlockManager<Dst>* dst_ = nullptr;
    std::shared_ptr<TransferEngine> engine_;
    std::vector<std::shared_ptr<OffloadPolicy>> policies_;
    PipelineConfig config_;
    std::shared_ptr<Clock> clock_;
    std::shared_ptr<prometheus::Registry> metrics_;
    std::string name_;
    typename TransferExecutor<Src, Dst>::RegisteredCallback on_registered_;
  };

  /// Returns a builder.
  static Builder builder() { return {}; }

  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;
  /// Runs shutdown().
  ~OffloadPipeline() { shutdown(); }

  /// Enqueues `blocks` (registered blocks of the source manager) as one
  /// container, to be copied once `precondition` (if any) is met. The blocks
  /// are downgraded: the pipeline holds none of them until the commitment
  /// point. An empty list gives a handle that is already kDone; after
  /// shutdown() the handle is kCancelled.
  TransferHandle enqueue(const std::vector<ImmutableBlock<Src>>& blocks,
                         std::shared_ptr<Precondition> precondition = nullptr) {
    auto [c, h] = OffloadContainer<Src>::make(blocks, std::move(precondition), metrics_,
                                              config_.hold_queued_blocks);
    c.state->set_wait_link(wait_link_);
    push(std::move(c));
    return h;
  }
  /// Enqueues weak references; see the other overload.
  TransferHandle enqueue(std::vector<WeakBlock<Src>> blocks,
                         std::shared_ptr<Precondition> precondition = nullptr) {
    auto [c, h] = OffloadContainer<Src>::make(std::move(blocks), std::move(precondition), metrics_,
                                              config_.hold_queued_blocks);
    c.state->set_wait_link(wait_link_);
    push(std::move(c));
    return h;
  }

  /// Stops accepting work, cancels what has not passed the commitment
  /// point, waits for what has, joins the threads. Idempotent.
  void shutdown() {
    {
      detail::LockGuard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    wait_link_->cut();  // handles outlive the pipeline
    cv_.notify_all();
    policy_queue_.close();
    for (auto& c : policy_queue_.drain()) c.cancel();
    if (policy_worker_) policy_worker_->stop();  // after a policy call in progress
    awaiter_.close();  // cancels the waiting containers; no sink runs after this
    batch_queue_.close();
    transfer_queue_.close();
    sweeper_.stop();
    dispatch_worker_->stop();
    subscription_.reset();
    for (auto& c : policy_queue_.drain()) c.cancel();
    for (auto& c : batch_queue_.drain()) c.cancel();
    auto batched = [this] {
      detail::LockGuard lock(mu_);
      return batcher_.take_all();
    }();
    for (auto& c : batched) c.cancel();
    for (auto& b : transfer_queue_.drain()) {
      for (auto& c : b.containers) c.cancel();
    }
    executor_.wait_idle();
  }

  /// Returns where the containers are (a consistent snapshot as far as the
  /// batcher and the executor are concerned).
  [[nodiscard]] PipelineStats stats() const {
    PipelineStats s;
    s.queued = policy_queue_.size();
    s.waiting = awaiter_.waiting();
    detail::LockGuard lock(mu_);
    s.to_batch = batch_queue_.size();
    s.batcher_containers = batcher_.pending_containers();
    s.batcher_blocks = batcher_.pending_blocks();
    s.ready_batches = transfer_queue_.size();
    s.in_flight = executor_.in_flight();
    return s;
  }

  [[nodiscard]] const PipelineConfig& config() const noexcept { return config_; }
  [[nodiscard]] const std::string& name() const noexcept { return metrics_->pipeline(); }
  /// Returns the pipeline's metrics.
  [[nodiscard]] const OffloadMetrics& metrics() const noexcept { return *metrics_; }
  /// Returns the policies in evaluation order (AllOf members flattened).
  [[nodiscard]] const std::vector<std::shared_ptr<OffloadPolicy>>& policies() const noexcept {
    return evaluator_.policies();
  }
  /// Returns the cancel sweeper (its pass counts, for diagnostics and tests).
  [[nodiscard]] const CancelSweeper& sweeper() const noexcept { return sweeper_; }
  /// Returns the largest number of batches that were in the engine at once.
  [[nodiscard]] std::size_t peak_in_flight() const noexcept { return executor_.peak_in_flight(); }

 private:
  explicit OffloadPipeline(Builder& b)
      : config_(b.config_),
        clock_(std::move(b.clock_)),
        metrics_(std::make_shared<OffloadMetrics>(std::move(b.metrics_), b.name_)),
        policy_queue_(),
        evaluator_(b.policies_, config_.policy_timeout, clock_, metrics_),
        awaiter_([this](OffloadContainer<Src>&& c) {
          // push moves only when it accepts; closed: shutting down.
          if (!batch_queue_.push(std::move(c))) c.cancel();  // NOLINT(bugprone-use-after-move)
        }),
        batch_queue_([this] { wake(); }),
        batcher_(config_.batch_config, clock_),
        transfer_queue_(),
        executor_(*b.dst_, std::move(b.engine_), executor_options(b)),
        sweeper_(clock_, config_.sweep_interval) {
    sweeper_.add_target([this] { return policy_queue_.sweep(); });
    sweeper_.add_target([this] { return batch_queue_.sweep(); });
    sweeper_.add_target([this] {
      detail::LockGuard lock(mu_);
      return batcher_.sweep() + transfer_queue_.sweep();
    });
    wait_link_->wake = [this] { wake(); };
    subscription_ = clock_->subscribe(mu_.native(), cv_);
    // Cheap policies (or none) run on the enqueuing thread: no policy thread.
    const auto& ps = evaluator_.policies();
    inline_policies_ = std::all_of(ps.begin(), ps.end(), [](const auto& p) { return p->cheap(); });
    if (!inline_policies_) {
      policy_worker_ = std::make_unique<detail::Worker>("kvbm offload policies");
      (void)policy_worker_->post([this] { run_policy(); });
    }
    dispatch_worker_ = std::make_unique<detail::Worker>("kvbm offload dispatch");
    (void)dispatch_worker_->post([this] { run_dispatch(); });
    sweeper_.start();
  }

  typename TransferExecutor<Src, Dst>::Options executor_options(Builder& b) {
    typename TransferExecutor<Src, Dst>::Options o;
    o.max_concurrent_transfers = config_.max_concurrent_transfers;
    o.max_submit = config_.batch_config.max_batch_size;
    o.on_slot_free = [this] { wake(); };
    o.metrics = metrics_;
    o.on_registered = std::move(b.on_registered_);
    o.space_wait = config_.space_wait;
    o.stopping = [this] {
      detail::LockGuard lock(mu_);  // the dispatcher launches without it
      return stopped_;
    };
    o.clock = clock_;
    return o;
  }

  void push(OffloadContainer<Src>&& c) {
    metrics_->add_enqueued(c.blocks.size());
    if (c.blocks.empty()) {
      c.finish();
      return;
    }
    if (inline_policies_) {
      if (policy_queue_.closed()) {  // shut down
        c.cancel();
        return;
      }
      {
        detail::LockGuard lock(evaluate_mu_);  // the evaluator is not reentrant
        if (!evaluator_.evaluate(c)) {
          c.finish();  // every block filtered
          return;
        }
      }
      awaiter_.submit(std::move(c));  // cancels it once the awaiter is closed
      return;
    }
    // push moves only when it accepts; refused: shut down.
    if (!policy_queue_.push(std::move(c))) c.cancel();  // NOLINT(bugprone-use-after-move)
  }

  // Tells the dispatcher to look at its queues. Only the first call after the
  // dispatcher last looked takes its lock and signals; the others find the
  // wake already pending (the dispatcher clears the flag before it looks, so
  // it sees their work).
  void wake() {
    if (wake_pending_.exchange(true)) return;
    { detail::LockGuard lock(mu_); }
    cv_.notify_all();
  }

  // The policy stage: evaluate, then hand to the awaiter.
  void run_policy() {
    while (auto c = policy_queue_.pop()) {
      if (c->sweep()) continue;
      if (!evaluator_.evaluate(*c)) {
        c->finish();  // every block filtered
        continue;
      }
      awaiter_.submit(std::move(*c));
    }
  }

  // The batcher and the executor.
  void run_dispatch() {
    std::vector<OffloadBatch<Src>> ready;
    detail::UniqueLock lock(mu_);
    while (!stopped_) {
      wake_pending_.store(false);
      while (auto c = batch_queue_.try_pop()) batcher_.add(std::move(*c), ready);
      batcher_.poll(ready);
      for (auto& b : ready) {
        if (!transfer_queue_.push(std::move(b))) {  // moves only when it accepts
          for (auto& c : b.containers) c.cancel();  // NOLINT(bugprone-use-after-move)
        }
      }
      ready.clear();
      bool launched = false;
      while (!stopped_ && executor_.can_launch()) {
        auto b = transfer_queue_.try_pop();
        if (!b) break;
        lock.unlock();  // completions may run here, on this thread, and wake() takes mu_
        executor_.launch(std::move(*b));
        lock.lock();
        launched = true;
      }
      if (launched) continue;  // look at the queues again before sleeping
      // A wake that came after the flag was cleared may have found the
      // queues as they were looked at: look again rather than sleep.
      if (wake_pending_.load()) continue;
      clock_->wait_until(lock.native(), cv_,
                         batcher_.deadline().value_or(Clock::time_point::max()));
    }
  }

  const PipelineConfig config_;
  const std::shared_ptr<Clock> clock_;
  const std::shared_ptr<OffloadMetrics> metrics_;

  mutable detail::Mutex mu_;  // the dispatcher's: batcher_, stopped_
  std::condition_variable cv_;
  bool stopped_ KVBM_GUARDED_BY(mu_) = false;
  std::atomic<bool> wake_pending_{false};  // see wake()
  // A waiter wakes the dispatcher, whose batcher then flushes the waited-for
  // container's batch.
  std::shared_ptr<detail::WaitLink> wait_link_ = std::make_shared<detail::WaitLink>();
  bool inline_policies_ = false;  // fixed at construction
  detail::Mutex evaluate_mu_;     // inline evaluation

  CancellableQueue<OffloadContainer<Src>> policy_queue_;
  PolicyEvaluator<Src> evaluator_;
  PreconditionAwaiter<Src> awaiter_;
  CancellableQueue<OffloadContainer<Src>> batch_queue_;
  Batcher<Src> batcher_ KVBM_GUARDED_BY(mu_);
  CancellableQueue<OffloadBatch<Src>> transfer_queue_;
  TransferExecutor<Src, Dst> executor_;
  CancelSweeper sweeper_;
  Clock::Subscription subscription_;
  std::unique_ptr<detail::Worker> policy_worker_;    // runs run_policy(); null: inline policies
  std::unique_ptr<detail::Worker> dispatch_worker_;  // runs run_dispatch()
};

}  // namespace kvbm
