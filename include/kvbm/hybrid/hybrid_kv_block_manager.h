// kvbm/hybrid/hybrid_kv_block_manager.h: a hybrid model's KV cache over every tier.
//
// HybridKvBlockManager is the facade (kvbm/kv_block_manager.h) for a model
// whose layers fall into KV cache groups (kvbm/groups/): one KvBlockManager per
// group, each with the group's block geometry and its share of every tier
// (kvbm/hybrid/hybrid_kv_block_manager_config.h: G3 in a directory of its own,
// G3 and G4 namespaces per group, blocks keyed by group keys), and one
// HybridBlockManager<G1> running the groups' rules over those managers' G1
// pools, which it does not own:
//
//     auto m = HybridKvBlockManager::build(config);       // throws UsageError
//     HybridOnboardHandle h = m->onboard(hashes, prompt_tokens - 1);
//     HybridRequest<G1> r = m->core().start_request(h.take_hit());
//     ... m->core().allocate / commit / release_out_of_reach / finish, as with
//         HybridBlockManager<G1> (kvbm/groups/hybrid_block_manager.h) ...
//
// `hashes` are the sequence's chained hashes at hash_block_size() tokens per
// block. onboard() asks every group's tiers where each block is
// (KvBlockManager::locate(): G1, G2, G3, and G4 in one round trip for the rest),
// computes the longest cut every group can serve from any tier
// (longest_common_hit), then onboards per group only the blocks that cut reads
// (a window's tail, one snapshot, a chunk's head); HybridOnboardHandle shrinks
// the cut if a group's onboarding comes up short. probe() is the lookup alone.
// commit() registers through each group's G1 pool, whose hook offloads the
// blocks down that group's tiers (write-through), so G2, G3 and G4 hold every
// group's blocks under its own keys.
//
// stats() is each group's KvBlockManagerStats (per tier); audit() recounts every
// pool of every group. Shutdown (shutdown() or the destructor) shuts each
// group's manager down; requests and hits the caller holds stay valid.
//
// Thread-safety: as KvBlockManager and HybridBlockManager: every member from any
// thread; one request by one thread at a time.

#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvbm/groups/hit_rules.h"
#include "kvbm/groups/hybrid_block_manager.h"
#include "kvbm/hybrid/hybrid_kv_block_manager_config.h"
#include "kvbm/hybrid/hybrid_onboard_handle.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/kv_block_manager_stats.h"

namespace kvbm {

/// What a lookup across the tiers found: the cut and, per group, the blocks it
/// reads and the tiers they are in.
struct HybridProbe {
  std::size_t tokens = 0;                     ///< the cut every group can serve
  std::vector<BlockRange> ranges;             ///< per group, the blocks the cut reads
  std::vector<TierArray<std::size_t>> found;  ///< per group, those blocks by tier
};

/// A hybrid model's manager over every tier; see the file comment.
class HybridKvBlockManager {
 public:
  /// Builds every group's KvBlockManager and the G1 rules over them. Throws
  /// UsageError naming the first invalid option (as group_configs() and
  /// KvBlockManager::build(), the latter prefixed with the group).
  [[nodiscard]] static std::unique_ptr<HybridKvBlockManager> build(
      HybridKvBlockManagerConfig config);
  ~HybridKvBlockManager();
  HybridKvBlockManager(const HybridKvBlockManager&) = delete;
  HybridKvBlockManager& operator=(const HybridKvBlockManager&) = delete;

  /// Returns the number of groups.
  [[nodiscard]] std::size_t group_count() const noexcept { return specs_.size(); }
  /// Returns group g's spec.
  [[nodiscard]] const KvCacheGroupSpec& spec(std::size_t g) const { return specs_.at(g); }
  /// Returns group g's KvBlockManager (its tiers, layouts, metrics registry).
  [[nodiscard]] KvBlockManager& group(std::size_t g) { return *groups_.at(g); }
  [[nodiscard]] const KvBlockManager& group(std::size_t g) const { return *groups_.at(g); }
  /// Returns the G1 rules over the groups' G1 pools: the request lifecycle.
  [[nodiscard]] HybridBlockManager<G1>& core() noexcept { return *core_; }
  [[nodiscard]] const HybridBlockManager<G1>& core() const noexcept { return *core_; }
  /// Returns the tokens per block the sequence's hashes are taken at.
  [[nodiscard]] std::uint32_t hash_block_size() const noexcept { return core_->hash_block_size(); }

  /// The longest cut at or below `max_tokens` every group can serve from any of
  /// its tiers, without taking or copying anything (a snapshot).
  [[nodiscard]] HybridProbe probe(
      std::span<const SequenceHash> hashes,
      std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) const;
  /// Finds the cut as probe() does and onboards, per group, only the blocks it
  /// reads into that group's G1; returns at once (see HybridOnboardHandle).
  [[nodiscard]] HybridOnboardHandle onboard(
      std::span<const SequenceHash> hashes,
      std::size_t max_tokens = std::numeric_limits<std::size_t>::max());

  /// Waits until every group's offload pipelines and onboardings are idle.
  void drain();
  /// Shuts every group's manager down (KvBlockManager::shutdown). Idempotent.
  void shutdown();
  /// Returns "" when every pool of every group balances, else what is wrong, per group.
  [[nodiscard]] std::string audit() const;
  /// Returns each group's stats, per tier (KvBlockManager::stats()).
  [[nodiscard]] std::vector<KvBlockManagerStats> stats() const;

 private:
  HybridKvBlockManager() = default;
  // Per group, the tier of each of its first blocks up to `max_tokens`' cut.
  std::vector<std::vector<std::optional<TierId>>> locate(std::span<const SequenceHash> hashes,
                                                         std::size_t max_tokens) const;

  std::vector<KvCacheGroupSpec> specs_;
  std::vector<GroupRule> rules_;
  std::vector<std::unique_ptr<KvBlockManager>> groups_;  // before core_: outlives it
  std::optional<HybridBlockManager<G1>> core_;
};

}  // namespace kvbm
