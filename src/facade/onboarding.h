// src/facade/onboarding.h (internal): onboarding and probing.
//
// onboard(hashes) walks the prefix over the rows (facade/tier.h), each block
// from the fastest local tier that holds it, up to the first block none
// holds, recording one OnboardRecord per position below G1; allocates G1
// targets for those (cutting the prefix where G1 has no more room); and
// submits one batch per source tier with that tier's `up` engine. The rest
// of the prefix goes to the remote stage, on this Onboarding's worker (never
// the caller's thread): it walks the rest over the local tiers and the
// remote ones (G4) for the runs no local tier holds, takes the remote runs
// into their landing tier, and onboards the rest like any prefix. probe() is
// the same walk without taking or copying anything; locate() answers every
// position, past misses too (each local tier asked once, then each remote
// tier once for what none holds). The counters
// (kvbm_onboard_blocks_total by tier, kvbm_onboard_cancelled_total) are made
// once here.
//
// Lifetime: the rows outlive the Onboarding; wait_all() then stop() before
// they go (shutdown does).
// Thread-safety: every member from any thread.

#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

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
  Onboarding(const Rows& rows, std::shared_ptr<prometheus::Registry> metrics);
  /// Takes the onboarding series out of the (possibly shared) registry; call
  /// wait_all() and stop() first (no onboarding touches a counter afterwards).
  ~Onboarding() = default;
  Onboarding(const Onboarding&) = delete;
  Onboarding& operator=(const Onboarding&) = delete;

  /// See KvBlockManager::onboard.
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes);
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
  // Per position, the fastest local tier holding it (nullopt: none does).
  using Fastest = std::vector<std::optional<TierId>>;

  OnboardHandle start(std::shared_ptr<State> s, std::span<const SequenceHash> hashes,
                      bool ask_remote);
  RemoteFetch onboard_rest(const State& parent, std::span<const SequenceHash> rest);
  std::size_t walk_rest(std::span<const SequenceHash> rest, std::vector<Taken>* fetched,
                        std::vector<TierId>& from, std::optional<Error>* error = nullptr) const;
  Fastest fastest_tiers(std::span<const SequenceHash> hashes, bool stop_at_miss) const;
  void walk_prefix(std::span<const SequenceHash> hashes, State& s);
  void cut(State& s, std::size_t got);
  void submit(const std::shared_ptr<State>& s, bool remote_stage);
  void remember(const std::shared_ptr<State>& s);

  const Rows& rows_;
  PoolTier<G1>& g1_;
  std::vector<Tier*> local_;   // the present local rows, fastest first (G1 first)
  std::vector<Tier*> remote_;  // the present remote rows, fastest first
  detail::SeriesSet series_;   // the onboarding series; removed with the Onboarding
  State::Counters counters_;   // in series_
  detail::Mutex inflight_mu_;
  std::vector<std::weak_ptr<State>> inflight_ KVBM_GUARDED_BY(inflight_mu_);
  std::unique_ptr<detail::Worker> worker_;  // the remote stage (with remote rows); last
};

}  // namespace kvbm::facade
