// src/facade/onboarding.h (internal): onboarding and probing.
//
// onboard(hashes) walks the prefix, each block from the fastest tier that
// holds it (tiers in TierTypes order, G1 first), up to the first block no
// tier holds; allocates G1 targets for the positions below G1 (cutting the
// prefix where G1 has no more room); and submits one batch per source tier
// with that tier's `up` engine. probe() is the same walk without taking or
// copying anything. Each onboarding's counters (kvbm_onboard_blocks_total by
// tier, kvbm_onboard_cancelled_total) are made once here.
//
// Lifetime: the pools and engines outlive the Onboarding; wait_all() before
// they go (shutdown does).
// Thread-safety: every member from any thread.

#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "facade/onboard_state.h"
#include "facade/remote_tier.h"
#include "facade/tier_engines.h"
#include "facade/tiers.h"
#include "kvbm/block_registry.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/series_set.h"
#include "kvbm/kv_block_manager.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace kvbm::facade {

/// The facade's onboarding; see the file comment.
class Onboarding {
 public:
  /// `remote` (G4) may be null.
  Onboarding(Pools& pools, const std::array<TierEngines, kTierCount>& engines,
             std::shared_ptr<BlockRegistry> registry, std::shared_ptr<prometheus::Registry> metrics,
             RemoteTier* remote);
  /// Takes the onboarding series out of the (possibly shared) registry; call
  /// wait_all() first (no onboarding touches a counter afterwards).
  ~Onboarding() = default;
  Onboarding(const Onboarding&) = delete;
  Onboarding& operator=(const Onboarding&) = delete;

  /// See KvBlockManager::onboard.
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes);
  /// See KvBlockManager::probe.
  [[nodiscard]] OnboardCounts probe(std::span<const SequenceHash> hashes) const;
  /// Waits for every onboarding started so far.
  void wait_all();
  /// The onboarding counters (kvbm_onboard_*), for reading.
  [[nodiscard]] const detail::OnboardState::Counters& counters() const noexcept {
    return counters_;
  }

 private:
  using State = detail::OnboardState;
  OnboardHandle start(std::shared_ptr<State> s, std::span<const SequenceHash> hashes,
                      bool ask_remote);
  RemoteFetch onboard_rest(const State& parent, std::span<const SequenceHash> rest);
  std::size_t walk_rest(std::span<const SequenceHash> rest,
                        std::vector<ImmutableBlock<G2>>* fetched, std::vector<std::uint8_t>& from,
                        std::optional<Error>* error = nullptr) const;
  // Per prefix position, the index of the fastest tier that holds it.
  std::vector<std::uint8_t> fastest_tiers(std::span<const SequenceHash> hashes,
                                          bool stop_at_miss) const;
  void walk_prefix(std::span<const SequenceHash> hashes, State& s);
  void cut(State& s, std::size_t got);
  void submit(const std::shared_ptr<State>& s, bool remote_stage);
  void remember(const std::shared_ptr<State>& s);

  Pools& pools_;
  const std::array<TierEngines, kTierCount>& engines_;
  std::shared_ptr<BlockRegistry> registry_;
  RemoteTier* remote_;
  detail::SeriesSet series_;  // the onboarding series; removed with the Onboarding
  State::Counters counters_;  // in series_
  detail::Mutex inflight_mu_;
  std::vector<std::weak_ptr<State>> inflight_ KVBM_GUARDED_BY(inflight_mu_);
};

}  // namespace kvbm::facade
