#include "replay/hybrid_tiers.h"

#include <utility>

#include "kvbm/error.h"

namespace kvbm::replay {

std::vector<TierArray<std::size_t>> tier_capacities(const HybridModel& model,
                                                    const std::vector<std::size_t>& g1_blocks,
                                                    const HybridReplayConfig& config) {
  KVBM_CHECK(config.g3_bytes == 0 || config.g2_bytes > 0,
             "G3 (--disk-*) sits behind G2: give G2 (--host-blocks or --host-bytes) too");
  std::vector<TierArray<std::size_t>> out(model.groups.size());
  for (std::size_t g = 0; g < out.size(); ++g) out[g][TierId::kG1] = g1_blocks.at(g);
  const std::pair<TierId, std::uint64_t> lower[] = {{TierId::kG2, config.g2_bytes},
                                                    {TierId::kG3, config.g3_bytes}};
  for (const auto& [tier, bytes] : lower) {
    if (bytes == 0) continue;
    const std::vector<std::size_t> split = split_g1(model, bytes);
    for (std::size_t g = 0; g < out.size(); ++g) out[g][tier] = split[g];
  }
  return out;
}

std::unique_ptr<HybridKvBlockManager> tiered_manager(
    const HybridModel& model, const std::vector<TierArray<std::size_t>>& blocks,
    const HybridReplayConfig& config) {
  HybridKvBlockManagerConfig c;
  KvBlockManagerConfig& b = c.base;
  b.move_bytes = false;
  // Sizes in bytes only say which tiers are present: group_blocks gives every size.
  const bool g2 = blocks.at(0)[TierId::kG2] > 0;
  const bool g3 = blocks.at(0)[TierId::kG3] > 0;
  b.device = TierConfig{.bytes = 1, .eviction = config.eviction};
  if (g2) b.host = TierConfig{.bytes = 1, .eviction = config.eviction};
  if (g3) b.disk = TierConfig{.bytes = 1, .eviction = config.eviction};
  b.disk_namespace = "kvbm-replay/" + model.name;
  b.device_to_host = g2 ? config.g1_g2 : OffloadMode::kNone;
  b.host_to_disk = g3 ? config.g2_g3 : OffloadMode::kNone;
  // As the dense replay: a request's write-through copies go down as one batch.
  b.pipeline.batch_config.max_batch_size = 4096;
  b.duplicate_policy = DuplicatePolicy::kReject;
  c.groups = model.groups;
  c.snapshot_policy = config.snapshot;
  c.group_blocks = blocks;
  return HybridKvBlockManager::build(std::move(c));
}

void collect_tiers(const HybridKvBlockManager& m, HybridRun& run) {
  const std::vector<KvBlockManagerStats> stats = m.stats();
  for (std::size_t g = 0; g < run.groups.size() && g < stats.size(); ++g) {
    GroupFigures& f = run.groups[g];
    for (const TierStats& t : stats[g].tiers) {
      if (!t.pooled()) continue;
      f.tier_capacity_blocks[t.tier] = t.blocks.total;
      f.held_blocks_end[t.tier] = t.blocks.total - t.blocks.reset;
    }
    if (const BoundaryStats* d = stats[g].boundary(TierId::kG1, TierId::kG2)) {
      f.offloaded_g1_g2 = d->counts.transferred;
    }
    if (const BoundaryStats* d = stats[g].boundary(TierId::kG2, TierId::kG3)) {
      f.offloaded_g2_g3 = d->counts.transferred;
    }
  }
}

}  // namespace kvbm::replay
