// src/router/hybrid_overlap.cpp: one instance's overlap for a hybrid model
// (router/hybrid_overlap.h).

#include "router/hybrid_overlap.h"

#include <algorithm>
#include <vector>

namespace kvbm::router::impl {

void hybrid_overlap(std::span<const GroupRule> rules, std::uint32_t hash_block,
                    std::size_t max_tokens, const HeldTier& held, InstanceOverlap& out) {
  const HybridHit hit = longest_common_hit(
      rules, max_tokens, [&held](std::size_t g, std::size_t j) { return held(g, j).has_value(); });
  const std::size_t positions = hit.tokens / hash_block;
  std::vector<TierId> tier(positions, TierId::kG1);
  for (std::size_t g = 0; g < rules.size(); ++g) {
    const std::size_t per_block = rules[g].tokens_per_block / hash_block;
    for (std::size_t j = hit.blocks[g].first; j < hit.blocks[g].last; ++j) {
      const TierId t = held(g, j).value_or(TierId::kG1);  // held: the cut says so
      const std::size_t end = std::min(positions, (j + 1) * per_block);
      for (std::size_t p = j * per_block; p < end; ++p) tier[p] = std::max(tier[p], t);
    }
  }
  out.per_tier = {};
  for (const TierId t : tier) ++out.per_tier[t];
  out.prefix_blocks = positions;
}

}  // namespace kvbm::router::impl
