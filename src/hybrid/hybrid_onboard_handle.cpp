// One hybrid onboarding (kvbm/hybrid/hybrid_onboard_handle.h).

#include "kvbm/hybrid/hybrid_onboard_handle.h"

#include <span>
#include <utility>

#include "kvbm/error.h"

namespace kvbm {

HybridOnboardHandle::HybridOnboardHandle(std::vector<GroupRule> rules, std::size_t tokens,
                                         std::vector<BlockRange> ranges,
                                         std::vector<OnboardHandle> handles)
    : rules_(std::move(rules)),
      planned_(tokens),
      ranges_(std::move(ranges)),
      handles_(std::move(handles)) {
  KVBM_CHECK(rules_.size() == ranges_.size() && ranges_.size() == handles_.size(),
             "HybridOnboardHandle: ", rules_.size(), " rules, ", ranges_.size(), " ranges and ",
             handles_.size(), " handles; give one of each per group");
}

BlockRange HybridOnboardHandle::planned_range(std::size_t g) const {
  KVBM_CHECK(g < ranges_.size(), "HybridOnboardHandle::planned_range: group ", g, " of ",
             ranges_.size());
  return ranges_[g];
}

void HybridOnboardHandle::wait() {
  if (waited_) return;
  counts_.assign(handles_.size(), OnboardCounts{});
  for (std::size_t g = 0; g < handles_.size(); ++g) {
    if (!handles_[g].valid()) continue;
    handles_[g].wait();
    counts_[g] = handles_[g].counts();
  }
  waited_ = true;
}

OnboardCounts HybridOnboardHandle::counts(std::size_t g) {
  KVBM_CHECK(g < ranges_.size(), "HybridOnboardHandle::counts: group ", g, " of ", ranges_.size());
  wait();
  return counts_[g];
}

PrefixHit<G1> HybridOnboardHandle::take_hit() {
  wait();
  const std::size_t groups = ranges_.size();
  PrefixHit<G1> hit;
  hit.ranges.assign(groups, BlockRange{});
  hit.blocks.resize(groups);
  if (taken_) return hit;
  taken_ = true;
  std::vector<std::vector<ImmutableBlock<G1>>> arrived(groups);
  bool whole = true;
  for (std::size_t g = 0; g < groups; ++g) {
    if (handles_[g].valid()) arrived[g] = handles_[g].take_blocks();
    whole = whole && arrived[g].size() == ranges_[g].size();
  }
  hit.tokens = planned_;
  std::vector<BlockRange> ranges = ranges_;
  if (!whole) {  // the longest cut what arrived serves in every group
    const HybridHit h = longest_common_hit(
        std::span<const GroupRule>(rules_), planned_, [&](std::size_t g, std::size_t i) {
          return i >= ranges_[g].first && i < ranges_[g].first + arrived[g].size();
        });
    hit.tokens = h.tokens;
    ranges = h.blocks;
  }
  for (std::size_t g = 0; g < groups; ++g) {
    hit.ranges[g] = ranges[g];
    for (std::size_t i = ranges[g].first; i < ranges[g].last; ++i) {
      hit.blocks[g].push_back(std::move(arrived[g][i - ranges_[g].first]));
    }
  }
  return hit;  // the blocks the cut no longer reads go with `arrived`
}

void HybridOnboardHandle::cancel() {
  for (auto& h : handles_) {
    if (h.valid()) (void)h.cancel();
  }
  taken_ = true;
}

}  // namespace kvbm
