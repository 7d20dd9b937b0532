// src/facade/onboarding.h (internal): onboarding and probing.
//
// onboard(hashes) follows a plan (facade/onboard_plan.h): the prefix as runs
// of positions from one tier. Each step takes its runs in order into one
// OnboardRecord per position (a block that cannot be handed over ends the
// prefix there), gives the records below G1 their G1 targets at once (the
// prefix is cut where G1 has no more room) and submits their copies, one
// batch per source tier with that tier's `up` engine; every step completes
// into the onboarding's one OnboardState (facade/onboard_state.h). Two steps
// at most:
//
//   the walk     on the caller's thread: the local tiers' plan, up to the
//                first position no local tier holds;
//   the rest     with a remote tier (G4), on this Onboarding's worker (never
//                the caller's thread): every tier's plan of the positions
//                after the walk's. A remote run is fetched into its landing
//                tier (verified, registered there, held), and its records
//                are copied up from there like that tier's own blocks.
//
// probe() counts the same plans without taking anything; locate() answers
// every position, past misses too. plan() weighs the plan against the
// measured costs (facade/costs.h) and chooses where to stop loading
// (facade/onboard_cut.h); onboard() with a plan onboards up to its cut. The counters
// (kvbm_onboard_blocks_total by tier, kvbm_onboard_cancelled_total) are made once here.
//
// Lifetime: the rows outlive the Onboarding; wait_all() then stop() before
// they go (shutdown does).
// Thread-safety: every member from any thread.

#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "facade/costs.h"
#include "facade/onboard_cut.h"
#include "facade/onboard_plan.h"
#include "facade/onboard_records.h"
#include "facade/onboard_state.h"
#include "facade/pool_tier.h"
#include "facade/tier.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/series_set.h"
#include "kvbm/detail/worker.h"
#include "kvbm/kv_block_manager.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace kvbm::facade {

/// The facade's onboarding; see the file comment.
class Onboarding {
 public:
  /// `rows`: every present tier (G1 among them), fastest first.
  /// `costs`: what plan() weighs; `block_size`: tokens per block.
  Onboarding(const Rows& rows, std::shared_ptr<prometheus::Registry> metrics,
             std::shared_ptr<const Costs> costs, std::uint32_t block_size);
  /// Takes the onboarding series out of the (possibly shared) registry; call
  /// wait_all() and stop() first (no onboarding touches a counter afterwards).
  ~Onboarding() = default;
  Onboarding(const Onboarding&) = delete;
  Onboarding& operator=(const Onboarding&) = delete;

  /// See KvBlockManager::onboard.
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes);
  /// Onboards up to `plan`'s cut (its loaded() blocks of `hashes`); the
  /// handle's plan() returns it. With plan.deadline, the onboarding is cut
  /// (facade/onboard_state.h) at `asked` + that deadline on the costs' clock.
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes, const OnboardPlan& plan,
                                      Clock::time_point asked);
  /// See KvBlockManager::plan_onboard.
  [[nodiscard]] OnboardPlan plan(std::span<const SequenceHash> hashes,
                                 const OnboardOptions& options) const;
  /// See KvBlockManager::probe.
  [[nodiscard]] OnboardCounts probe(std::span<const SequenceHash> hashes) const;
  /// See KvBlockManager::locate.
  [[nodiscard]] std::vector<std::optional<TierId>> locate(
      std::span<const SequenceHash> hashes) const;
  /// Waits for every onboarding started so far, and the remote stages posted.
  void wait_all();
  /// Shutdown: the remote stage takes no more work (what is posted runs).
  void stop();
  /// The onboarding counters (kvbm_onboard_*), for reading.
  [[nodiscard]] const detail::OnboardState::Counters& counters() const noexcept {
    return counters_;
  }

 private:
  using State = detail::OnboardState;
  // A step's copies: per source tier, its pairs and their positions in the prefix.
  struct Copies {
    TierArray<std::vector<TransferPair>> pairs;
    TierArray<std::shared_ptr<std::vector<std::size_t>>> positions;
    [[nodiscard]] std::size_t batches() const noexcept;
  };
  // The copies of `records`, whose first is at position `first`.
  static Copies copies_of(const OnboardRecords& records, std::size_t first);

  // found() with the remote tier's answer waited for only until `until`.
  [[nodiscard]] Plan found_by(std::span<const SequenceHash> hashes, Clock::time_point until) const;
  OnboardHandle start(std::span<const SequenceHash> hashes, std::optional<OnboardPlan> plan,
                      std::optional<Clock::time_point> deadline);
  // The prefix found: the walk, then (with a remote tier) the rest's plan after it.
  Plan found(std::span<const SequenceHash> hashes) const;
  OnboardRecords take(std::span<const SequenceHash> hashes, const Plan& plan,
                      std::optional<Error>* error);
  std::size_t give_targets(OnboardRecords& records);
  void onboard_rest(const std::shared_ptr<State>& s, std::span<const SequenceHash> rest,
                    std::size_t first);
  void submit(const std::shared_ptr<State>& s, const Copies& copies);
  void remember(const std::shared_ptr<State>& s);

  const Rows& rows_;
  PoolTier<G1>& g1_;
  Planner planner_;
  std::shared_ptr<const Costs> costs_;
  std::uint32_t block_size_;
  detail::SeriesSet series_;  // the onboarding series; removed with the Onboarding
  State::Counters counters_;  // in series_
  detail::Mutex inflight_mu_;
  std::vector<std::weak_ptr<State>> inflight_ KVBM_GUARDED_BY(inflight_mu_);
  std::unique_ptr<detail::Worker> worker_;  // the remote stage (with remote rows); last
};

}  // namespace kvbm::facade
