// src/facade/onboard_state.h (internal): one onboarding, shared by its handle and its copies.
//
// The facade's onboarding (facade/onboarding.h) takes its plan's runs into
// OnboardRecords (facade/onboard_records.h), one record per position of the
// prefix, and hands them to one OnboardState in at most two steps: begin(),
// from the caller's thread, with the runs of the local walk; adopt(), from the
// remote stage (with a remote tier, G4), with the runs after them, G4's
// fetched into their landing tier among them. Each step's copies up to G1
// (one engine batch per source tier) report through on_batch(), marking the
// records whose copy failed; the remote stage counts as one pending step
// until stage_done(). The last step to end runs finish(), which registers
// every copy that arrived (in G1, without the on_register hook: onboarded
// blocks are not written back down) and hands back the prefix up to the
// first position without its G1 block.
//
// Thread-safety: the records are written under the mutex (begin(), adopt(),
// on_batch()) and read by finish() once nothing is pending, or by a cancel
// that ended the onboarding with only the remote stage out (which then adopts
// nothing); the status, result and cancellation are guarded by the mutex.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <optional>
#include <vector>

#include "facade/onboard_records.h"
#include "facade/tiers.h"
#include "kvbm/block_manager.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/transfer/transfer_engine.h"

namespace prometheus {
class Counter;
}

namespace kvbm::detail {

/// One onboarding; see the file comment.
class OnboardState {
 public:
  struct Counters {
    TierArray<prometheus::Counter*> from_tier{};  ///< G1: hits; null: tier absent
    prometheus::Counter* failed = nullptr;
    prometheus::Counter* cancelled = nullptr;
  };

  BlockManager<G1>* g1 = nullptr;
  Counters counters;

  /// The walk's step, before any of its copies is submitted: its records
  /// (positions from 0), `no_space` of them left out for want of G1 blocks,
  /// `batches` engine batches and, when `remote`, the remote stage to come.
  void begin(facade::OnboardRecords&& records, std::size_t no_space, std::size_t batches,
             bool remote);
  /// The remote stage's step, before its copies are submitted: its records
  /// follow the walk's, `error` is why its runs ended early, if they did.
  /// Returns false, taking nothing, once the onboarding is being cancelled.
  bool adopt(facade::OnboardRecords& records, std::size_t no_space, std::optional<Error> error,
             std::size_t batches);
  /// The remote stage is over: its copies are submitted, or it adopted nothing.
  void stage_done() noexcept;
  /// Records one engine batch's outcome; `positions` maps batch index to position.
  void on_batch(const TransferOutcome& o, const std::vector<std::size_t>& positions) noexcept;
  /// Ends the onboarding (when every copy is back, or at once when none ran).
  void finish() noexcept;
  /// True once cancel() was asked for (or the last handle went away).
  [[nodiscard]] bool cancelling() const;

  TransferStatus status() const;
  TransferStatus wait() const;
  bool wait_for(std::chrono::nanoseconds t) const;
  bool cancel();
  /// The last handle is gone: releases the result now, or when the copies end.
  void abandon() noexcept;
  std::vector<ImmutableBlock<G1>> take_blocks();
  OnboardCounts counts() const;
  std::vector<TierId> origins() const;
  std::optional<Error> error() const;

 private:
  void end_cancelled() noexcept KVBM_REQUIRES(mu_);
  void register_arrived() noexcept;
  // Registers the copies that arrived; returns the prefix handed back and
  // counts where it came from and the copies that failed.
  std::vector<ImmutableBlock<G1>> assemble(TierArray<std::size_t>& per_tier, std::size_t& failed,
                                           std::vector<TierId>& origins) noexcept;

  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  TransferStatus status_ KVBM_GUARDED_BY(mu_) = TransferStatus::kTransferring;
  bool cancel_requested_ KVBM_GUARDED_BY(mu_) = false;
  std::size_t pending_ KVBM_GUARDED_BY(mu_) = 0;
  bool remote_outstanding_ KVBM_GUARDED_BY(mu_) = false;  // the remote stage has not adopted
  facade::OnboardRecords records_;                        // see the file comment
  std::optional<Error> error_ KVBM_GUARDED_BY(mu_);
  std::size_t no_space_ KVBM_GUARDED_BY(mu_) = 0;
  OnboardCounts counts_ KVBM_GUARDED_BY(mu_);
  std::vector<TierId> origins_ KVBM_GUARDED_BY(mu_);  // the tier of each returned block
  std::vector<ImmutableBlock<G1>> blocks_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm::detail
