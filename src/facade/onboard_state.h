// src/facade/onboard_state.h (internal): one onboarding, shared by its handle and its copies.
//
// The facade's onboarding (facade/onboarding.h) fills an OnboardState: the
// prefix's walk (per position, the tier it comes from), the G1 hits, one
// record per position below G1 (its hash, tier and source block, held until
// the copies end) and the G1 targets they are copied into. Each engine batch reports through
// on_batch(); the last one runs finish(), which registers every copy that arrived (in G1, without
// the on_register hook: onboarded blocks are not written back down) and hands back the prefix up to
// the first copy that did not.
//
// With a remote tier (G4), the positions after the walk are looked up by the
// remote tier's worker, which reports once through on_remote() (counted as
// one more pending batch): the rest of the prefix, already in G1.
//
// Thread-safety: the public members are filled by the onboarding thread
// before the first batch is submitted and read by finish() afterwards; the
// status, result and cancellation are guarded by one mutex.

#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "facade/tier.h"
#include "facade/tiers.h"
#include "kvbm/block_manager.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/transfer/transfer_engine.h"

namespace prometheus {
class Counter;
}

namespace kvbm::facade {

/// One position of a prefix below G1.
struct OnboardRecord {
  SequenceHash hash;
  TierId from = TierId::kG2;  ///< the tier its source block is in
  BlockId source = 0;         ///< that block
  std::size_t hold = 0;       ///< the index of the Hold keeping it (OnboardState::holds)
};

/// The rest of a prefix, after the walk's positions, brought by the remote
/// stage (facade/onboarding.cpp): G4's blocks fetched into G2, then the rest
/// onboarded from the tiers that hold it, registered in G1, in prefix order.
struct RemoteFetch {
  std::vector<ImmutableBlock<G1>> blocks;
  std::vector<TierId> origins;  ///< per block: where it came from (kG4: fetched from G4)
  std::size_t failed = 0;       ///< copies that failed
  std::size_t no_space = 0;     ///< blocks found that did not fit in G1
  std::optional<Error> error;   ///< the first copy error, if any
};

}  // namespace kvbm::facade

namespace kvbm::detail {

/// One onboarding; see the file comment.
class OnboardState {
 public:
  struct Counters {
    TierArray<prometheus::Counter*> from_tier{};  ///< G1: hits; null: tier absent
    prometheus::Counter* failed = nullptr;
    prometheus::Counter* cancelled = nullptr;
  };

  std::vector<TierId> walk;                          // per prefix position: its tier
  std::vector<ImmutableBlock<G1>> hits;              // the G1 positions' blocks, in order
  std::vector<facade::OnboardRecord> below;          // the positions below G1, in order
  std::vector<std::unique_ptr<facade::Hold>> holds;  // their source blocks
  std::vector<MutableBlock<G1>> targets;             // per below position
  BlockManager<G1>* g1 = nullptr;
  Counters counters;

  /// `batches` engine batches, and the remote stage when `remote`.
  void start_pending(std::size_t batches, bool remote) {
    LockGuard lock(mu_);
    pending_ = batches + (remote ? 1 : 0);
    remote_outstanding_ = remote;
  }
  void set_no_space(std::size_t n) { no_space_ = n; }

  /// Records one engine batch's outcome; `positions` maps batch index to below position.
  void on_batch(const TransferOutcome& o, const std::vector<std::size_t>& positions) noexcept;
  /// Records the remote tier's stage (one pending batch).
  void on_remote(facade::RemoteFetch&& fetch) noexcept;
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
  void release_sources() noexcept;
  void release_all() noexcept;
  void end_cancelled() noexcept KVBM_REQUIRES(mu_);
  std::vector<std::optional<ImmutableBlock<G1>>> register_arrived() noexcept;
  // Registers the copies that arrived; returns the prefix handed back and
  // counts where it came from and the copies that failed.
  std::vector<ImmutableBlock<G1>> assemble(TierArray<std::size_t>& per_tier, std::size_t& failed,
                                           std::vector<TierId>& origins) noexcept;

  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  TransferStatus status_ KVBM_GUARDED_BY(mu_) = TransferStatus::kTransferring;
  bool cancel_requested_ KVBM_GUARDED_BY(mu_) = false;
  std::size_t pending_ KVBM_GUARDED_BY(mu_) = 0;
  bool remote_outstanding_ KVBM_GUARDED_BY(mu_) = false;  // the remote stage has not reported
  std::vector<bool> failed_;  // written under mu_; read by finish() alone, once nothing is pending
  std::optional<Error> error_ KVBM_GUARDED_BY(mu_);
  std::size_t no_space_ = 0;
  facade::RemoteFetch remote_;  // as failed_
  OnboardCounts counts_ KVBM_GUARDED_BY(mu_);
  std::vector<TierId> origins_ KVBM_GUARDED_BY(mu_);  // the tier of each returned block
  std::vector<ImmutableBlock<G1>> blocks_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm::detail
