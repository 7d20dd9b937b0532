// kvbm/offload/transfer_executor.h: the last pipeline stage.
//
// launch(batch) runs one batch, in this order:
//
//   1. sweep: drop the cancelled containers (P4: the last cancellation check)
//   2. seal each remaining container's token (P3: the commitment point; a
//      cancel() racing with this either wins, and the container is dropped
//      without ever pinning a block, or loses and waits for completion), then
//      upgrade its weak blocks to strong ones; a block evicted meanwhile is
//      dropped and reported (kEvicted)
//   3. flatten every container's blocks into one list (P5); a hash that
//      appears twice in the batch is copied once; a hash the destination
//      already holds is not copied (kAlreadyPresent)
//   4. allocate destination blocks: as many as fit (waiting up to
//      Options::space_wait for room, when set); each block that does
//      not fit is reported (kNoSpace) and released, the rest proceeds
//   5. submit the pairs to the transfer engine, in pieces of at most
//      `max_submit` pairs
//   6. on completion (on the engine's thread): register each copied block in
//      the destination under its sequence hash (the destination's duplicate
//      policy dedups); a block whose copy failed is never registered
//      (kCopyFailed; its destination block goes back to the reset pool);
//      hand the registered copies to `on_registered` (if set);
//      release every source and destination block, then end the handles
//      (kDone, or kFailed when a block did not fit or failed to copy)
//
// At most `max_concurrent_transfers` batches are in the engine at once:
// launch() requires can_launch(). `on_slot_free` runs (on the completing
// thread) each time a batch leaves the engine.
//
// Lifetime: the destination manager and the engine must outlive the executor;
// the destructor waits for every batch in flight (wait_idle()).
// Thread-safety: launch() from one thread at a time; the rest from any.

#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "kvbm/offload/container.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/transfer/stage_and_register.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm {

/// Upgrades, allocates, copies and registers batches; see the file comment.
template <TierMarker Src, TierMarker Dst>
class TransferExecutor {
 public:
  /// Receives the copies a batch registered in the destination, before the
  /// batch's handles end (on the engine's completion thread; must not throw
  /// and must not wait on the pipeline). The write-through chain G1 -> G2 ->
  /// G3 enqueues them in the next pipeline here.
  using RegisteredCallback = std::function<void(std::vector<ImmutableBlock<Dst>>&&)>;

  /// How a TransferExecutor runs, besides its destination and engine.
  struct Options {
    std::size_t max_concurrent_transfers = 1;  ///< batches in the engine at once (1 ..)
    std::size_t max_submit = 1;                ///< pairs per engine submit (1 ..)
    std::function<void()> on_slot_free;        ///< a batch left the engine (may be empty)
    std::shared_ptr<OffloadMetrics> metrics;   ///< may be null
    RegisteredCallback on_registered;          ///< may be empty
    /// Step 4 waits up to this long (on `clock`) for room in the destination;
    /// zero: no wait.
    std::chrono::nanoseconds space_wait{0};
    /// Ends that wait early once it returns true (looked at every few ms).
    std::function<bool()> stopping;
    /// Measures space_wait; Clock::steady() when null.
    std::shared_ptr<Clock> clock;
  };

  /// Throws UsageError when the engine is null or a limit is 0.
  TransferExecutor(BlockManager<Dst>& dst, std::shared_ptr<TransferEngine> engine, Options options)
      : core_(std::make_shared<Core>()),
        engine_(std::move(engine)),
        max_concurrent_(options.max_concurrent_transfers),
        max_submit_(options.max_submit),
        space_wait_(options.space_wait),
        stopping_(std::move(options.stopping)),
        clock_(options.clock ? std::move(options.clock) : Clock::steady()),
        metrics_(std::move(options.metrics)) {
    KVBM_CHECK(engine_ != nullptr, "TransferExecutor needs a transfer engine");
    KVBM_CHECK(max_concurrent_ >= 1,
               "TransferExecutor: max_concurrent_transfers must be at least 1");
    KVBM_CHECK(max_submit_ >= 1, "TransferExecutor: max_batch_size must be at least 1");
    KVBM_CHECK(space_wait_.count() >= 0, "TransferExecutor: space_wait must not be negative");
    core_->dst = &dst;
    core_->on_slot_free = std::move(options.on_slot_free);
    core_->on_registered = std::move(options.on_registered);
  }
  /// The same, without a space wait; see Options.
  TransferExecutor(BlockManager<Dst>& dst, std::shared_ptr<TransferEngine> engine,
                   std::size_t max_concurrent_transfers, std::size_t max_submit,
                   std::function<void()> on_slot_free = {},
                   std::shared_ptr<OffloadMetrics> metrics = nullptr,
                   RegisteredCallback on_registered = {})
      : TransferExecutor(dst, std::move(engine),
                         Options{max_concurrent_transfers,
                                 max_submit,
                                 std::move(on_slot_free),
                                 std::move(metrics),
                                 std::move(on_registered),
                                 {},
                                 {},
                                 {}}) {}
  ~TransferExecutor() { wait_idle(); }

  TransferExecutor(const TransferExecutor&) = delete;
  TransferExecutor& operator=(const TransferExecutor&) = delete;

  /// Returns true when another batch may be launched.
  [[nodiscard]] bool can_launch() const noexcept { return in_flight() < max_concurrent_; }
  /// Returns the number of batches in the engine.
  [[nodiscard]] std::size_t in_flight() const noexcept {
    return core_->in_flight.load(std::memory_order_acquire);
  }
  /// Returns the largest number of batches that were in the engine at once.
  [[nodiscard]] std::size_t peak_in_flight() const noexcept {
    return core_->peak.load(std::memory_order_relaxed);
  }

  /// Runs a batch (steps 1 to 5 on this thread, 6 on completion). Requires
  /// can_launch() and every precondition in the batch met (else UsageError,
  /// the batch untouched).
  void launch(OffloadBatch<Src>&& batch) {
    KVBM_CHECK(can_launch(), "TransferExecutor::launch: ", in_flight(),
               " batches already in flight (max_concurrent_transfers ", max_concurrent_,
               "); wait for can_launch()");
    batch.sweep_cancelled();  // P4
    KVBM_CHECK(batch.preconditions_met(),
               "TransferExecutor::launch: a container's precondition is not met yet");
    auto f = std::make_shared<Flight>();
    std::unordered_map<std::uint64_t, std::size_t> first;  // hash -> index in f->src
    for (auto& c : batch.containers) {
      if (!c.token.try_seal()) {  // cancelled since the sweep
        c.finish_cancelled();
        continue;
      }
      c.state->advance(TransferStatus::kTransferring);
      const auto owner = static_cast<std::uint32_t>(f->owners.size());
      f->owners.push_back(c.state);
      for (const auto& w : c.blocks) {
        auto strong = w.upgrade();  // P3
        if (!strong) {
          c.state->add_result(w.sequence_hash(), BlockOutcome::kEvicted);
          continue;
        }
        const std::uint64_t key = w.sequence_hash().value();
        if (const auto it = first.find(key); it != first.end()) {
          f->dups.push_back({owner, it->second});
          continue;
        }
        first.emplace(key, f->src.size());
        f->hashes.push_back(w.sequence_hash());
        f->src.push_back(std::move(*strong));
        f->owner.push_back(owner);
      }
    }
    batch.containers.clear();
    if (f->owners.empty()) return;
    prune_present(*f);
    allocate(*f);
    if (f->src.empty()) {
      Core::finish(*core_, *f, false);
      return;
    }
    submit(std::move(f));
  }

  /// Blocks until no batch is in flight.
  void wait_idle() {
    detail::UniqueLock lock(core_->mu);
    core_->cv.wait(lock.native(), [&]() KVBM_REQUIRES(core_->mu) { return core_->flights == 0; });
  }

 private:
  struct Dup {
    std::uint32_t owner;  // container of the duplicate
    std::size_t primary;  // index of the copied block in src
  };
  // One launched batch, flattened (P5).
  struct Flight {
    std::vector<std::shared_ptr<detail::OffloadState>> owners;
    std::vector<SequenceHash> hashes;             // per pair
    std::vector<ImmutableBlock<Src>> src;         // per pair
    std::vector<MutableBlock<Dst>> dst;           // per pair
    std::vector<ImmutableBlock<Dst>> registered;  // for on_registered
    std::vector<std::uint32_t> owner;             // per pair
    std::vector<BlockOutcome> outcome;            // per pair, once known
    std::vector<Dup> dups;
    detail::Mutex mu;
    std::vector<bool> failed KVBM_GUARDED_BY(mu);  // per pair
    std::optional<Error> error KVBM_GUARDED_BY(mu);
    std::atomic<std::size_t> pieces_left{0};
  };
  struct Core {
    BlockManager<Dst>* dst = nullptr;
    std::function<void()> on_slot_free;
    RegisteredCallback on_registered;
    std::atomic<std::size_t> in_flight{0};
    std::atomic<std::size_t> peak{0};
    detail::Mutex mu;
    std::condition_variable cv;
    std::size_t flights KVBM_GUARDED_BY(mu) = 0;  // submitted and not finished

    // Step 6 (and the end of batches that copy nothing).
    static void finish(Core& core, Flight& f, bool submitted) noexcept {
      // Every piece has ended: nothing writes failed or error any more.
      std::vector<bool> failed;
      std::optional<Error> error;
      {
        detail::LockGuard lock(f.mu);
        failed.swap(f.failed);
        error.swap(f.error);
      }
      f.outcome.resize(f.src.size(), BlockOutcome::kTransferred);
      // Registered, then dropped (after on_registered, if set): the copy
      // stays matchable in the inactive pool. A failed copy's f.dst[i] goes
      // back to the reset pool below.
      // (`failed` is empty when nothing was submitted.)
      stage_and_register_copies(
          *core.dst, f.dst, failed, [&](std::size_t i) { return f.hashes[i]; },
          [&](std::size_t i, std::optional<ImmutableBlock<Dst>>&& registered) {
            if (!registered) {
              f.outcome[i] = BlockOutcome::kCopyFailed;
            } else if (core.on_registered) {
              f.registered.push_back(std::move(*registered));
            }
          });
      if (core.on_registered && !f.registered.empty()) core.on_registered(std::move(f.registered));
      // Release every block before any handle ends, so that nothing is pinned
      // once a waiter returns.
      f.registered.clear();
      f.src.clear();
      f.dst.clear();
      for (std::size_t i = 0; i < f.outcome.size(); ++i) {
        f.owners[f.owner[i]]->add_result(f.hashes[i], f.outcome[i]);
      }
      for (const Dup& d : f.dups) {
        f.owners[d.owner]->add_result(f.hashes[d.primary], f.outcome[d.primary]);
      }
      if (error) {
        for (const auto& s : f.owners) s->add_error(*error);
      }
      for (const auto& s : f.owners) s->finish();
      if (!submitted) return;
      core.in_flight.fetch_sub(1, std::memory_order_acq_rel);
      if (core.on_slot_free) core.on_slot_free();
      detail::LockGuard lock(core.mu);
      if (--core.flights == 0) core.cv.notify_all();
    }
  };

  // Blocks whose hash the destination already holds are not copied.
  void prune_present(Flight& f) {
    if (f.src.empty()) return;
    const std::vector<bool> present =
        core_->dst->registry()->template presence<Dst>(std::span<const SequenceHash>(f.hashes));
    std::size_t out = 0;
    for (std::size_t i = 0; i < f.src.size(); ++i) {
      if (present[i]) {
        f.owners[f.owner[i]]->add_result(f.hashes[i], BlockOutcome::kAlreadyPresent);
        retarget_dups(f, i, std::nullopt, BlockOutcome::kAlreadyPresent);
        continue;
      }
      retarget_dups(f, i, out, BlockOutcome::kAlreadyPresent);
      if (out != i) {
        f.src[out] = std::move(f.src[i]);
        f.hashes[out] = f.hashes[i];
        f.owner[out] = f.owner[i];
      }
      ++out;
    }
    f.src.erase(f.src.begin() + static_cast<std::ptrdiff_t>(out), f.src.end());
    f.hashes.resize(out);
    f.owner.resize(out);
  }

  // Allocates as many destination blocks as fit, waiting up to space_wait_
  // (on clock_) for the rest; what still does not fit is kNoSpace.
  void allocate(Flight& f) {
    if (f.src.empty()) return;
    std::uint64_t seen = core_->dst->releases();
    f.dst = core_->dst->allocate_at_most(f.src.size());
    if (f.dst.size() < f.src.size() && space_wait_.count() > 0) {
      // Woken when a destination block leaves use. The pool's wait knows
      // neither clock_ nor stopping_: the deadline and the stop flag are looked
      // at least every kCheck (real time).
      constexpr auto kCheck = std::chrono::milliseconds(5);
      const Clock::time_point deadline = clock_->now() + space_wait_;
      while (f.dst.size() < f.src.size() && clock_->now() < deadline &&
             !(stopping_ && stopping_())) {
        if (!core_->dst->wait_for_release(seen, std::chrono::steady_clock::now() + kCheck)) {
          continue;
        }
        seen = core_->dst->releases();
        for (auto& b : core_->dst->allocate_at_most(f.src.size() - f.dst.size())) {
          f.dst.push_back(std::move(b));
        }
      }
    }
    for (std::size_t i = f.dst.size(); i < f.src.size(); ++i) {
      f.owners[f.owner[i]]->add_result(f.hashes[i], BlockOutcome::kNoSpace);
      retarget_dups(f, i, std::nullopt, BlockOutcome::kNoSpace);
    }
    f.src.erase(f.src.begin() + static_cast<std::ptrdiff_t>(f.dst.size()), f.src.end());
    f.hashes.resize(f.dst.size());
    f.owner.resize(f.dst.size());
  }

  // Duplicates of pair `i` follow it to index `to`, or are resolved with
  // outcome `o` when it leaves the flight.
  static void retarget_dups(Flight& f, std::size_t i, std::optional<std::size_t> to,
                            BlockOutcome o) {
    for (auto it = f.dups.begin(); it != f.dups.end();) {
      if (it->primary != i) {
        ++it;
      } else if (to) {
        it->primary = *to;
        ++it;
      } else {
        f.owners[it->owner]->add_result(f.hashes[i], o);
        it = f.dups.erase(it);
      }
    }
  }

  void submit(std::shared_ptr<Flight> f) {
    const std::size_t n = f->src.size();
    std::vector<TransferPair> pairs(n);
    for (std::size_t i = 0; i < n; ++i) {
      pairs[i] = {f->src[i].block_id(), f->dst[i].block_id(), f->src[i].sequence_hash().value()};
    }
    {
      detail::LockGuard lock(f->mu);  // not shared yet; the lock costs one uncontended pair
      f->failed.assign(n, false);
    }
    const std::size_t pieces = (n + max_submit_ - 1) / max_submit_;
    f->pieces_left.store(pieces, std::memory_order_relaxed);
    {
      detail::LockGuard lock(core_->mu);
      ++core_->flights;
    }
    const std::size_t now = core_->in_flight.fetch_add(1, std::memory_order_acq_rel) + 1;
    std::size_t peak = core_->peak.load(std::memory_order_relaxed);
    while (now > peak && !core_->peak.compare_exchange_weak(peak, now)) {
    }
    if (metrics_) metrics_->add_batch();
    const std::shared_ptr<Core> core = core_;
    for (std::size_t p = 0; p < pieces; ++p) {
      const std::size_t begin = p * max_submit_;
      const std::size_t count = std::min(max_submit_, n - begin);
      auto done = [core, f, begin, count](const TransferOutcome& o) {
        {
          detail::LockGuard lock(f->mu);
          for (const std::size_t k : o.failed) {
            if (k < count) f->failed[begin + k] = true;
          }
          if (!o.ok() && !f->error) {
            f->error = o.error ? *o.error : Error{ErrorKind::kInternal, 0, "copy failed"};
          }
        }
        if (f->pieces_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          Core::finish(*core, *f, true);
        }
      };
      submit_or_refuse(*engine_, std::span<const TransferPair>(pairs).subspan(begin, count))
          ->on_complete(std::move(done));
    }
  }

  std::shared_ptr<Core> core_;
  std::shared_ptr<TransferEngine> engine_;
  std::size_t max_concurrent_;
  std::size_t max_submit_;
  std::chrono::nanoseconds space_wait_;
  std::function<bool()> stopping_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<OffloadMetrics> metrics_;
};

}  // namespace kvbm
