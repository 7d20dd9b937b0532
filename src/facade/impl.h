// src/facade/impl.h (internal): what a KvBlockManager holds, and where each part lives.
//
//   config.cpp          the config's checks (and the offload modes' names)
//   tiers.h / .cpp      the tiers as data: TierTypes and describe_tiers()
//   tier_memory.cpp     each tier's memory and layout
//   tier_engines.cpp    each tier's engines (down from the tier above, up into G1)
//   build.cpp           building it all, tier by tier: memory, pools, engines, boundaries
//   boundary.h          one tier boundary (write-through pipeline or on-eviction copier)
//   eviction_copier.h   the on-eviction copier
//   remote_tier.cpp     the remote tier G4: its writer (G2 -> G4) and fetches (G4 -> G2 -> G1)
//   onboarding.cpp      onboarding and probing; onboard_state.cpp: one onboarding
//   lifecycle.cpp       registration, explicit offload, drain, shutdown and audit
//   kv_block_manager.cpp the public class, forwarding here
//
// Members are destroyed in reverse order: the boundaries (their pipelines)
// first, then onboarding, the engines, the pools and last the memory
// everything refers to.

#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facade/boundary.h"
#include "facade/onboarding.h"
#include "facade/remote_tier.h"
#include "facade/tier_engines.h"
#include "facade/tier_memory.h"
#include "facade/tiers.h"
#include "kvbm/block_registry.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/kv_block_manager.h"

namespace kvbm {

class KvBlockManagerImpl {
 public:
  explicit KvBlockManagerImpl(KvBlockManagerConfig c) : config_(std::move(c)) {}
  ~KvBlockManagerImpl();
  KvBlockManagerImpl(const KvBlockManagerImpl&) = delete;
  KvBlockManagerImpl& operator=(const KvBlockManagerImpl&) = delete;

  // build.cpp
  void build();

  // lifecycle.cpp
  // `tokens`: one span of block_size() tokens per block, for the pool's listeners.
  std::vector<ImmutableBlock<G1>> register_blocks(
      std::vector<CompleteBlock<G1>>&& blocks, std::shared_ptr<Precondition> pre,
      std::optional<std::span<const std::span<const Token>>> tokens = std::nullopt);
  TransferHandle offload(const std::vector<ImmutableBlock<G1>>& blocks,
                         std::shared_ptr<Precondition> pre);
  void drain();
  void shutdown();
  std::string audit() const;
  std::optional<RecoverySummary> disk_recovery() const { return disk_recovery_; }

  template <std::size_t I>
  auto* pool() noexcept {
    auto& p = std::get<I>(pools_);
    return p ? &*p : nullptr;
  }

  KvBlockManagerConfig config_;
  facade::TierSpecs specs_{};
  std::shared_ptr<FrequencyTracker> tracker_;
  std::shared_ptr<BlockRegistry> registry_;
  std::array<facade::TierMemory, facade::kTierCount> memory_;  // first: destroyed last
  facade::Pools pools_;
  std::array<facade::TierEngines, facade::kTierCount> engines_;
  std::unique_ptr<facade::Onboarding> onboarding_;
  std::optional<RecoverySummary> disk_recovery_;  // what a persistent G3 recovered at build
  std::unique_ptr<facade::RemoteTier> remote_;    // G4, or null
  facade::Boundaries boundaries_;                 // last: destroyed first

 private:
  void build_pools();
  template <std::size_t I>
  void build_pool();
  void build_boundaries();
  void recover_disk();
  template <class Block>
  void check_own(const std::vector<Block>& blocks, const char* call) const;

  detail::Mutex shutdown_mu_;
  bool stopped_ KVBM_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace kvbm
