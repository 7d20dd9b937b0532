// kvbm/hybrid/hybrid_onboard_handle.h: one hybrid onboarding, every group's part.
//
// HybridKvBlockManager::onboard() finds the longest cut every group can serve
// from any tier, then starts, per group, the onboarding of only the blocks the
// cut reads there (a full group's prefix, a window's tail, a chunk's head, one
// snapshot) through that group's KvBlockManager::onboard(). This handle holds
// those onboardings. take_hit() waits for all of them and returns the hit as a
// PrefixHit<G1> for HybridBlockManager<G1>::start_request(): if a group's
// onboarding came up short (a block evicted since the lookup, a failed copy,
// no room in G1), the cut shrinks to the longest one the blocks that arrived
// serve in every group (the hit rules again, over what arrived), and the blocks
// it no longer reads are let go: a partial group is never served.
//
// counts(g) is what group g's onboarding found, per tier (OnboardCounts), so a
// caller sees where each group's blocks came from and how many were moved.
//
// Move-only; dropping it releases every block not taken. One thread at a time.

#pragma once

#include <cstddef>
#include <vector>

#include "kvbm/groups/hit_rules.h"
#include "kvbm/groups/hybrid_block_manager.h"
#include "kvbm/kv_block_manager.h"

namespace kvbm {

/// The handle of one hybrid onboarding; see the file comment.
class HybridOnboardHandle {
 public:
  HybridOnboardHandle() = default;
  /// `handles[g]` onboards group g's blocks `ranges[g]` for a cut at `tokens`
  /// (an invalid handle for an empty range).
  HybridOnboardHandle(std::vector<GroupRule> rules, std::size_t tokens,
                      std::vector<BlockRange> ranges, std::vector<OnboardHandle> handles);
  HybridOnboardHandle(HybridOnboardHandle&&) noexcept = default;
  HybridOnboardHandle& operator=(HybridOnboardHandle&&) noexcept = default;
  HybridOnboardHandle(const HybridOnboardHandle&) = delete;
  HybridOnboardHandle& operator=(const HybridOnboardHandle&) = delete;
  ~HybridOnboardHandle() = default;

  /// Returns the number of groups.
  [[nodiscard]] std::size_t group_count() const noexcept { return ranges_.size(); }
  /// Returns the cut the lookup found (before any shrink).
  [[nodiscard]] std::size_t planned_tokens() const noexcept { return planned_; }
  /// Returns group g's blocks the lookup's cut reads.
  [[nodiscard]] BlockRange planned_range(std::size_t g) const;
  /// Waits for every group's onboarding.
  void wait();
  /// Waits, then returns what group g's onboarding found, per tier.
  [[nodiscard]] OnboardCounts counts(std::size_t g);
  /// Waits, then returns the hit (see the file comment); once: later calls return
  /// an empty hit.
  [[nodiscard]] PrefixHit<G1> take_hit();
  /// Cancels every group's onboarding; the hit is empty afterwards.
  void cancel();

 private:
  std::vector<GroupRule> rules_;
  std::size_t planned_ = 0;
  std::vector<BlockRange> ranges_;
  std::vector<OnboardHandle> handles_;
  std::vector<OnboardCounts> counts_;  // filled by wait()
  bool waited_ = false;
  bool taken_ = false;
};

}  // namespace kvbm
