// src/facade/eviction_copier.h (internal): the on-eviction mode of a tier boundary.
//
// An EvictionCopier<Src, Dst> is a PoolListener on the upper pool. When an
// allocation there evicts blocks, it copies them into the pool below,
// synchronously, before the allocation that evicted them returns (that
// allocation waits for the copy). One batch per eviction, in eviction order:
//
//   1. the blocks the tier below already holds are not copied, but their
//      copies there are refreshed (moved to the most-recent end, in eviction
//      order: they were in use above until now);
//   2. the boundary's policies (e.g. a minimum frequency) drop what they
//      filter;
//   3. room is allocated below for the rest at once (which may evict there,
//      and copy on down); what does not fit is dropped (kNoSpace);
//   4. the batch is copied, and the new copies are registered in eviction
//      order, more recent than the refreshed ones, and handed to the next
//      boundary (when it is write-through).
//
// Lifetime: built complete, before the upper pool (which it listens to);
// disable() (at shutdown) waits for a copy in progress and turns the copier
// off for good.
// Thread-safety: one copy at a time per boundary (mu_, which guards the
// copier's state); on_evicting from any allocating thread.

#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "kvbm/block_manager.h"
#include "kvbm/blocks/release_order.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/logging.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/policy.h"
#include "kvbm/pool_listener.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm::facade {

/// Copies what the upper pool evicts into the pool below; see the file comment.
template <TierMarker Src, TierMarker Dst>
class EvictionCopier final : public PoolListener {
 public:
  /// Receives the copies registered below (the next boundary's intake).
  using Registered = std::function<void(std::vector<ImmutableBlock<Dst>>&&)>;

  /// Copies into `dst` with `engine`; `on_registered` (may be empty) takes
  /// the copies registered there.
  EvictionCopier(BlockManager<Dst>& dst, std::shared_ptr<TransferEngine> engine,
                 std::shared_ptr<OffloadMetrics> metrics,
                 std::vector<std::shared_ptr<OffloadPolicy>> policies, Registered on_registered)
      : dst_(&dst),
        engine_(std::move(engine)),
        metrics_(std::move(metrics)),
        policies_(std::move(policies)),
        on_registered_(std::move(on_registered)) {}

  void disable() noexcept {
    detail::LockGuard lock(mu_);  // waits for a copy in progress
    enabled_.store(false, std::memory_order_release);
    engine_.reset();
    on_registered_ = nullptr;
    dst_ = nullptr;
    if (metrics_) final_counts_ = metrics_->counts();
    metrics_.reset();  // its series leave the registry now, not with the pool's last block
  }

  /// What the copier's offloads did so far: its OffloadMetrics counters,
  /// read (kept when disable() takes the series out of the registry). Waits
  /// for a copy in progress.
  [[nodiscard]] OffloadCounts counts() const {
    detail::LockGuard lock(mu_);
    return metrics_ ? metrics_->counts() : final_counts_;
  }

  void on_evicting(std::span<const EvictedBlock> blocks) noexcept override {
    if (!enabled_.load(std::memory_order_acquire)) return;
    detail::LockGuard lock(mu_);
    if (!enabled_.load(std::memory_order_relaxed)) return;
    try {
      copy(blocks);
    } catch (const std::exception& e) {
      logger()->error("on-eviction offload {}_to_{} failed: {}", tier_name<Src>(), tier_name<Dst>(),
                      e.what());
      metrics_->add_blocks(BlockOutcome::kCopyFailed, blocks.size());
    }
  }

 private:
  // Steps 1 to 4 of the file comment.
  void copy(std::span<const EvictedBlock> blocks) KVBM_REQUIRES(mu_) {
    metrics_->add_enqueued(blocks.size());
    std::vector<std::size_t> todo = not_held_below(blocks);
    metrics_->add_blocks(BlockOutcome::kAlreadyPresent, blocks.size() - todo.size());
    filter(blocks, todo);
    if (todo.empty()) return;
    auto dst = dst_->allocate_at_most(todo.size());
    const std::size_t got = dst.size();
    metrics_->add_blocks(BlockOutcome::kNoSpace, todo.size() - got);
    if (got == 0) return;
    std::vector<TransferPair> pairs(got);
    for (std::size_t i = 0; i < got; ++i) {
      pairs[i] = {blocks[todo[i]].id, dst[i].block_id(), blocks[todo[i]].hash.value()};
    }
    metrics_->add_batch();
    const TransferOutcome outcome = engine_->submit(pairs)->wait();
    std::vector<bool> failed(got, false);
    for (const auto k : outcome.failed) failed[k] = true;
    std::vector<ImmutableBlock<Dst>> registered = register_arrived(blocks, todo, dst, failed);
    const std::size_t copied = registered.size();
    if (on_registered_ && !registered.empty()) {
      on_registered_(std::move(registered));
    } else {
      release_in_order(registered);
    }
    metrics_->add_blocks(BlockOutcome::kTransferred, copied);
    metrics_->add_blocks(BlockOutcome::kCopyFailed, got - copied);
    if (!outcome.ok()) {
      logger()->warn("on-eviction offload {}_to_{}: {} of {} copies failed: {}", tier_name<Src>(),
                     tier_name<Dst>(), got - copied, got, outcome.message());
    }
  }

  // Step 4: stages the copies that arrived and registers them in one batch,
  // in eviction order. The batch is one lock and overlaps the index's cache
  // misses; it leaves the pool as registering and releasing each copy in
  // turn would (the same order of registration, then of release: the
  // batch's hashes are distinct, so no copy can be deduplicated against
  // another of the batch).
  std::vector<ImmutableBlock<Dst>> register_arrived(std::span<const EvictedBlock> blocks,
                                                    const std::vector<std::size_t>& todo,
                                                    std::vector<MutableBlock<Dst>>& dst,
                                                    const std::vector<bool>& failed)
      KVBM_REQUIRES(mu_) {
    const std::uint32_t block_size = dst_->block_size();
    std::vector<CompleteBlock<Dst>> staged;
    staged.reserve(dst.size());
    for (std::size_t i = 0; i < dst.size(); ++i) {
      if (failed[i]) continue;
      auto s = std::move(dst[i]).stage(blocks[todo[i]].hash, block_size);
      if (s.ok()) staged.push_back(std::move(s).value());
    }
    return dst_->register_copies(std::move(staged));
  }

  // Step 1: refreshes the copies the tier below holds; returns the indices of
  // the others, in eviction order.
  std::vector<std::size_t> not_held_below(std::span<const EvictedBlock> blocks) KVBM_REQUIRES(mu_) {
    std::vector<SequenceHash> hashes;
    hashes.reserve(blocks.size());
    for (const auto& b : blocks) hashes.push_back(b.hash);
    const std::vector<bool> held = dst_->refresh(hashes);
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (!held[i]) todo.push_back(i);
    }
    return todo;
  }

  // Step 2: the blocks still to copy that a policy filters are counted and dropped.
  void filter(std::span<const EvictedBlock> blocks, std::vector<std::size_t>& todo)
      KVBM_REQUIRES(mu_) {
    if (policies_.empty() || todo.empty()) return;
    std::vector<SequenceHash> hashes;
    hashes.reserve(todo.size());
    for (const auto i : todo) hashes.push_back(blocks[i].hash);
    std::vector<bool> pass(todo.size(), true);
    for (const auto& p : policies_) p->evaluate(hashes, pass);
    std::size_t kept = 0;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      if (pass[k]) todo[kept++] = todo[k];
    }
    metrics_->add_blocks(BlockOutcome::kFiltered, todo.size() - kept);
    todo.resize(kept);
  }

  mutable detail::Mutex mu_;  // one on-eviction copy at a time per boundary
  std::atomic<bool> enabled_{true};
  BlockManager<Dst>* dst_ KVBM_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<TransferEngine> engine_ KVBM_GUARDED_BY(mu_);
  std::shared_ptr<OffloadMetrics> metrics_ KVBM_GUARDED_BY(mu_);
  OffloadCounts final_counts_ KVBM_GUARDED_BY(mu_);  // metrics_'s counts when disable() dropped it
  std::vector<std::shared_ptr<OffloadPolicy>> policies_ KVBM_GUARDED_BY(mu_);
  Registered on_registered_ KVBM_GUARDED_BY(mu_);  // e.g. the next tier's write-through pipeline
};

}  // namespace kvbm::facade
