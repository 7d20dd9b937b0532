// src/facade/impl.h (internal): what a KvBlockManager holds, and where each part lives.
//
//   config.cpp          the config's checks (and the offload modes' names)
//   tiers.h / .cpp      the tiers as data: TierId, TierArray, describe_tiers()
//   tier_memory.cpp     each tier's memory and layout
//   tier_engines.cpp    each tier's engines (down from the tier above, up into G1)
//   tier.h              one row of the runtime list of tiers: the interface
//   pool_tier.h         a pooled tier (G1..G3) and its boundaries down
//   remote_tier.cpp     the remote tier G4 and the boundary into it
//   boundary.h          one boundary into a pooled tier (pipeline or on-eviction copier)
//   eviction_copier.h   the on-eviction copier
//   build.cpp           building it all: memory, engines, then the rows bottom-up
//   onboarding.cpp      onboarding and probing: onboard_plan.cpp its plan (runs per tier),
//                       onboard_records.cpp a record per position, onboard_state.cpp one
//                       onboarding, onboard_cut.cpp where it stops loading (load or recompute)
//   costs.cpp           every copy path's measured cost (timed_engine.h feeds it) and the prefill
//   lifecycle.cpp       registration, explicit offload, drain, shutdown and audit
//   kv_block_manager.cpp the public class, forwarding here
//
// The destructor stops everything, then drops the boundaries top-down, then
// onboarding and the rows (fastest first); the engines and last the memory
// everything refers to go with the members.

#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facade/costs.h"
#include "facade/onboarding.h"
#include "facade/pool_tier.h"
#include "facade/tier.h"
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

  /// The pool of tier T, or null when it is absent.
  template <PooledTier T>
  [[nodiscard]] BlockManager<T>* pool() const noexcept {
    auto* row = static_cast<facade::PoolTier<T>*>(rows_[tier_id_of<T>()].get());
    return row != nullptr ? &row->pool() : nullptr;
  }
  [[nodiscard]] facade::PoolTier<G1>& g1() const noexcept {
    return static_cast<facade::PoolTier<G1>&>(*rows_[TierId::kG1]);
  }

  KvBlockManagerConfig config_;
  facade::TierSpecs specs_{};
  std::shared_ptr<FrequencyTracker> tracker_;
  std::shared_ptr<BlockRegistry> registry_;
  std::shared_ptr<facade::Costs> costs_;  // shared with the engines' wrappers and G4
  TierArray<facade::TierMemory> memory_;  // first: destroyed last
  TierArray<facade::TierEngines> engines_;
  facade::Rows rows_;
  std::unique_ptr<facade::Onboarding> onboarding_;
  std::optional<RecoverySummary> disk_recovery_;  // what a persistent G3 recovered at build

 private:
  void build_rows();
  void recover_disk();
  template <class Block>
  void check_own(const std::vector<Block>& blocks, const char* call) const;

  detail::Mutex shutdown_mu_;
  bool stopped_ KVBM_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace kvbm
