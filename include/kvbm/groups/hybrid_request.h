// kvbm/groups/hybrid_request.h: the blocks one request of a hybrid model holds, per group.
//
// A HybridRequest<T> is what HybridBlockManager<T> hands a request: for each
// group, the run of block indices [first, end) the request holds, each as a
// MutableBlock (being written, or a recurrent-state block the snapshot policy
// does not keep) or an ImmutableBlock (registered: from a prefix hit, or
// committed), or a hole (no block: a recurrent-state index a step passed over
// under SnapshotPolicy::step_end()). Blocks below `first` were never needed (the part of a prefix
// hit a window or chunk does not read) or were released once out of reach; the manager only ever
// drops blocks from the front and appends at the end.
//
// The manager's calls change it (allocate, commit, release_out_of_reach,
// finish); it only answers questions. Dropping it releases every block it
// holds (registered ones to their pool's inactive pool); it may outlive the
// manager.
//
// Thread-safety: one thread at a time per request; different requests may be
// used on different threads at once.

#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <variant>
#include <vector>

#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/error.h"
#include "kvbm/groups/hit_rules.h"

namespace kvbm {

template <TierMarker T>
class HybridBlockManager;

/// The blocks one request holds in each group; see the file comment.
template <TierMarker T>
class HybridRequest {
 public:
  HybridRequest(HybridRequest&&) noexcept = default;
  HybridRequest& operator=(HybridRequest&&) noexcept = default;
  HybridRequest(const HybridRequest&) = delete;
  HybridRequest& operator=(const HybridRequest&) = delete;
  ~HybridRequest() = default;

  /// Returns the number of groups (0 for a moved-from or finished request).
  [[nodiscard]] std::size_t group_count() const noexcept { return groups_.size(); }
  /// Returns the tokens committed so far (a prefix hit counts as committed).
  [[nodiscard]] std::size_t computed_tokens() const noexcept { return computed_; }
  /// Returns the block indices group `g` holds (under SnapshotPolicy::step_end(),
  /// a recurrent-state group's range may have holes: indices it holds no block for).
  [[nodiscard]] BlockRange held_range(std::size_t g) const {
    const auto& s = group(g, "held_range");
    return {s.first, s.first + s.slots.size()};
  }
  /// Returns how many blocks group `g` holds.
  [[nodiscard]] std::size_t held_blocks(std::size_t g) const {
    std::size_t n = 0;
    for (const auto& s : group(g, "held_blocks").slots) n += s.index() == kHole ? 0 : 1;
    return n;
  }
  /// Returns how many of them are registered (ImmutableBlock).
  [[nodiscard]] std::size_t registered_blocks(std::size_t g) const {
    std::size_t n = 0;
    for (const auto& s : group(g, "registered_blocks").slots) n += s.index() == 1 ? 1 : 0;
    return n;
  }
  /// Returns true when group `g` holds a block at `index` (false for a hole or an
  /// index outside held_range(g)).
  [[nodiscard]] bool holds_block(std::size_t g, std::size_t index) const {
    const auto& s = group(g, "holds_block");
    return index >= s.first && index < s.first + s.slots.size() &&
           s.slots[index - s.first].index() != kHole;
  }
  /// Returns true when every block group `g` holds belongs to `pool` (its owns():
  /// the same pool core), so that a caller can refuse a request of another manager
  /// before a call would mix two managers' blocks. A request holding no block of the
  /// group belongs to any pool.
  template <class Pool>
  [[nodiscard]] bool held_in(std::size_t g, const Pool& pool) const {
    for (const Slot& slot : group(g, "held_in").slots) {
      if (slot.index() == 0 && !pool.owns(std::get<0>(slot))) return false;
      if (slot.index() == 1 && !pool.owns(std::get<1>(slot))) return false;
    }
    return true;
  }
  /// Returns the id, in group `g`'s pool, of its block `index` (for the engine's
  /// block table). Throws UsageError when the request does not hold that block.
  [[nodiscard]] BlockId block_id(std::size_t g, std::size_t index) const {
    const auto& s = group(g, "block_id");
    KVBM_CHECK(index >= s.first && index < s.first + s.slots.size(),
               "HybridRequest::block_id: ", "group ", g, " holds blocks [", s.first, ", ",
               s.first + s.slots.size(), "), not ", index);
    const Slot& slot = s.slots[index - s.first];
    KVBM_CHECK(slot.index() != kHole, "HybridRequest::block_id: group ", g, " holds no block ",
               index, " (a step passed over it: SnapshotPolicy::step_end())");
    return slot.index() == 0 ? std::get<0>(slot).block_id() : std::get<1>(slot).block_id();
  }

 private:
  friend class HybridBlockManager<T>;
  // A block being written, a registered one, or a hole (no block: a step_end() step
  // passed over that index).
  using Slot = std::variant<MutableBlock<T>, ImmutableBlock<T>, std::monostate>;
  static constexpr std::size_t kHole = 2;
  struct Group {
    std::size_t first = 0;      // index of slots.front()
    std::deque<Slot> slots;     // blocks [first, first + slots.size())
    std::size_t committed = 0;  // blocks below were offered for registration
  };

  explicit HybridRequest(std::size_t groups) : groups_(groups) {}

  const Group& group(std::size_t g, const char* call) const {
    KVBM_CHECK(g < groups_.size(), "HybridRequest::", call, ": group ", g, " of ", groups_.size(),
               groups_.empty() ? " (the request was finished or moved from)" : "");
    return groups_[g];
  }

  std::vector<Group> groups_;
  std::size_t computed_ = 0;
};

}  // namespace kvbm
