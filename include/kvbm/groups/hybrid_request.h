// kvbm/groups/hybrid_request.h: the blocks one request of a hybrid model holds, per group.
//
// A HybridRequest<T> is what HybridBlockManager<T> hands a request: for each
// group, the run of block indices [first, end) the request holds, each as a
// MutableBlock (being written, or a recurrent-state block the snapshot policy
// does not keep) or an ImmutableBlock (registered: from a prefix hit, or
// committed). Blocks below `first` were never needed (the part of a prefix hit
// a window or chunk does not read) or were released once out of reach; the
// manager only ever drops blocks from the front and appends at the end.
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
  /// Returns the block indices group `g` holds.
  [[nodiscard]] BlockRange held_range(std::size_t g) const {
    const auto& s = group(g, "held_range");
    return {s.first, s.first + s.slots.size()};
  }
  /// Returns how many blocks group `g` holds.
  [[nodiscard]] std::size_t held_blocks(std::size_t g) const {
    return group(g, "held_blocks").slots.size();
  }
  /// Returns how many of them are registered (ImmutableBlock).
  [[nodiscard]] std::size_t registered_blocks(std::size_t g) const {
    std::size_t n = 0;
    for (const auto& s : group(g, "registered_blocks").slots) n += s.index() == 1 ? 1 : 0;
    return n;
  }
  /// Returns the id, in group `g`'s pool, of its block `index` (for the engine's
  /// block table). Throws UsageError when the request does not hold that block.
  [[nodiscard]] BlockId block_id(std::size_t g, std::size_t index) const {
    const auto& s = group(g, "block_id");
    KVBM_CHECK(index >= s.first && index < s.first + s.slots.size(),
               "HybridRequest::block_id: ", "group ", g, " holds blocks [", s.first, ", ",
               s.first + s.slots.size(), "), not ", index);
    return std::visit([](const auto& b) { return b.block_id(); }, s.slots[index - s.first]);
  }

 private:
  friend class HybridBlockManager<T>;
  using Slot = std::variant<MutableBlock<T>, ImmutableBlock<T>>;
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
