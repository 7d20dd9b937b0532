// A hybrid model's KV cache over every tier (kvbm/hybrid/hybrid_kv_block_manager.h).

#include "kvbm/hybrid/hybrid_kv_block_manager.h"

#include <algorithm>
#include <utility>

#include "kvbm/error.h"
#include "kvbm/groups/group_key.h"

namespace kvbm {

std::unique_ptr<HybridKvBlockManager> HybridKvBlockManager::build(
    HybridKvBlockManagerConfig config) {
  std::vector<KvBlockManagerConfig> configs = group_configs(config);
  std::unique_ptr<HybridKvBlockManager> m(new HybridKvBlockManager());
  for (std::size_t g = 0; g < configs.size(); ++g) {
    try {
      m->groups_.push_back(KvBlockManager::build(std::move(configs[g])));
    } catch (const UsageError& e) {
      detail::throw_usage_error(__FILE__, __LINE__,
                                detail::concat("HybridKvBlockManager group ", g, " (",
                                               config.groups[g].display_name(), "): ", e.what()));
    }
  }
  auto core = HybridBlockManager<G1>::builder();
  core.snapshot_policy(config.snapshot_policy);
  for (std::size_t g = 0; g < configs.size(); ++g) {
    core.group(config.groups[g], m->groups_[g]->device());
    m->rules_.push_back(GroupRule::of(config.groups[g]));
  }
  m->core_.emplace(core.build());
  m->specs_ = std::move(config.groups);
  return m;
}

HybridKvBlockManager::~HybridKvBlockManager() { shutdown(); }

std::vector<std::vector<std::optional<TierId>>> HybridKvBlockManager::locate(
    std::span<const SequenceHash> hashes, std::size_t max_tokens) const {
  const std::size_t align = core_->alignment_tokens();
  const std::size_t cut = std::min(max_tokens, hashes.size() * hash_block_size()) / align * align;
  std::vector<std::vector<std::optional<TierId>>> where(specs_.size());
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    const auto keys = core_->group_hashes(g, hashes, 0, cut / specs_[g].tokens_per_block);
    where[g] = groups_[g]->locate(keys);
  }
  return where;
}

HybridProbe HybridKvBlockManager::probe(std::span<const SequenceHash> hashes,
                                        std::size_t max_tokens) const {
  const auto where = locate(hashes, max_tokens);
  const std::size_t limit = std::min(max_tokens, hashes.size() * hash_block_size());
  const HybridHit hit = longest_common_hit(std::span<const GroupRule>(rules_), limit,
                                           [&where](std::size_t g, std::size_t i) {
                                             return i < where[g].size() && where[g][i].has_value();
                                           });
  HybridProbe out;
  out.tokens = hit.tokens;
  out.ranges = hit.blocks;
  out.found.assign(specs_.size(), TierArray<std::size_t>{});
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    for (std::size_t i = hit.blocks[g].first; i < hit.blocks[g].last; ++i) {
      ++out.found[g][*where[g][i]];
    }
  }
  return out;
}

HybridOnboardHandle HybridKvBlockManager::onboard(std::span<const SequenceHash> hashes,
                                                  std::size_t max_tokens) {
  const HybridProbe p = probe(hashes, max_tokens);
  std::vector<OnboardHandle> handles(specs_.size());
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    if (p.ranges[g].empty()) continue;
    const auto keys = core_->group_hashes(g, hashes, p.ranges[g].first, p.ranges[g].last);
    handles[g] = groups_[g]->onboard(keys);
  }
  return HybridOnboardHandle(rules_, p.tokens, p.ranges, std::move(handles));
}

void HybridKvBlockManager::drain() {
  for (auto& g : groups_) g->drain();
}

void HybridKvBlockManager::shutdown() {
  for (auto& g : groups_) g->shutdown();
}

std::string HybridKvBlockManager::audit() const {
  std::string out = core_ ? core_->audit() : std::string();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string a = groups_[g]->audit();
    if (a.empty()) continue;
    out += detail::concat(out.empty() ? "" : "; ", "group ", g, " (", specs_[g].display_name(),
                          ") tiers: ", a);
  }
  return out;
}

std::vector<KvBlockManagerStats> HybridKvBlockManager::stats() const {
  std::vector<KvBlockManagerStats> out;
  out.reserve(groups_.size());
  for (const auto& g : groups_) out.push_back(g->stats());
  return out;
}

}  // namespace kvbm
