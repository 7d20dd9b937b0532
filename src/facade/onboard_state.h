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
// A cut (take_arrived(), or the deadline passing while the caller waits or
// asks for the status) ends the onboarding early: the leading positions whose
// copies are back become the prefix (registered as finish() would), and the
// rest is abandoned. A copy still running keeps its G1 target (quarantined:
// neither registered nor reused, since the engine may still be writing into
// it) and its source until its batch reports; the last step to end then lets
// every record go. The remote stage adopts nothing after a cut.
//
// Thread-safety: the records are written under the mutex (begin(), adopt(),
// on_batch()) and read by finish() once nothing is pending, or by a cancel
// that ended the onboarding with only the remote stage out (which then adopts
// nothing); a cut registers the leading records, whose batches have all
// reported, and leaves the others to their batches. The status, result,
// cancellation and cut are guarded by the mutex.

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <optional>
#include <vector>

#include "facade/onboard_records.h"
#include "facade/tiers.h"
#include "kvbm/block_manager.h"
#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/onboard_plan.h"
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
    prometheus::Counter* abandoned = nullptr;  ///< found below G1, not back by a cut
  };

  BlockManager<G1>* g1 = nullptr;
  Counters counters;
  /// The plan that cut the prefix (onboard with options), set before the
  /// handle is returned; read-only afterwards.
  std::optional<OnboardPlan> plan;

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
  /// True once cancel() was asked for (or the last handle went away), or a cut.
  [[nodiscard]] bool cancelling() const;
  /// Ends the onboarding by `at` on `clock`: a wait that reaches it, or a
  /// status() asked after it, cuts (kTimeout). Before the handle is returned.
  void set_deadline(std::shared_ptr<Clock> clock, Clock::time_point at);

  TransferStatus status();
  TransferStatus wait();
  bool wait_for(std::chrono::nanoseconds t);
  bool cancel();
  /// Cuts (see the file comment) unless already over, then takes the blocks.
  std::vector<ImmutableBlock<G1>> take_arrived();
  /// The leading positions that are G1 hits or whose copies are back (the
  /// prefix's length once over).
  [[nodiscard]] std::size_t arrived();
  /// Over, and no copy of a cut is still out.
  [[nodiscard]] bool settled() const;
  /// Waits until settled() (at shutdown: a cut's copies are still I/O in flight).
  void wait_settled();
  /// The last handle is gone: releases the result now, or when the copies end.
  void abandon() noexcept;
  std::vector<ImmutableBlock<G1>> take_blocks();
  OnboardCounts counts();
  std::vector<TierId> origins();
  std::optional<Error> error();

 private:
  void end_cancelled() noexcept KVBM_REQUIRES(mu_);
  // Ends the onboarding with what has arrived (see the file comment); `why`
  // becomes its error unless it has one. A no-op once over or finishing.
  void cut(std::optional<Error> why) noexcept;
  // The prefix a cut hands back: the leading records that are G1 hits or
  // whose copies arrived. Returns how many.
  std::size_t arrived_prefix() const noexcept KVBM_REQUIRES(mu_);
  // Counts and publishes a cut's result (the registered prefix, `abandoned`).
  void end_cut(std::vector<ImmutableBlock<G1>>&& out, TierArray<std::size_t> per_tier,
               std::vector<TierId>&& origins, std::size_t abandoned,
               std::optional<Error> why) noexcept;
  // One step after a cut reported; true for the last (which lets every record go).
  bool last_step_after_cut() noexcept KVBM_REQUIRES(mu_);
  // The last step after a cut: lets every record go, ends the quarantine.
  void release_after_cut() noexcept;
  // True when the deadline has passed (and there is one).
  [[nodiscard]] bool past_deadline() const noexcept;
  [[nodiscard]] Error deadline_error() const;
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
  bool cut_ KVBM_GUARDED_BY(mu_) = false;         // ended early; steps may still be out
  bool quarantine_ KVBM_GUARDED_BY(mu_) = false;  // cut with copies still out
  std::shared_ptr<Clock> clock_;                  // set once, before any other thread sees this
  std::optional<Clock::time_point> deadline_;
  Clock::Subscription subscription_;  // (mu_, cv_) on clock_, for a ManualClock
};

}  // namespace kvbm::detail
