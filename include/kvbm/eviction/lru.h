// kvbm/eviction/lru.h: least-recently-released eviction.
//
// LruBackend keeps the inactive pool in one intrusive doubly-linked list,
// threaded through an array indexed by BlockId: a block is appended at the
// most-recently-used end when it becomes inactive, and the victim is taken from
// the least-recently-used end. Every operation is O(1) and allocates nothing;
// the whole backend costs 8 bytes per block (two 32-bit links), allocated once.
//
// detail::IntrusiveLists is the shared building block: several lists over one
// link array, with one sentinel node per list. The multi-level and lineage
// backends use it too.
//
// Thread-safety: none; the block store calls every member under its tier lock.

#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kvbm/detail/huge_page_allocator.h"
#include "kvbm/error.h"
#include "kvbm/eviction/backend.h"

namespace kvbm {

namespace detail {

/// A fixed number of intrusive doubly-linked lists over the block ids
/// [0, capacity). A block is in at most one list at a time.
class IntrusiveLists {
 public:
  /// Marks a link of a block that is in no list.
  static constexpr BlockId kNil = std::numeric_limits<BlockId>::max();

  /// Builds `lists` empty lists for blocks [0, capacity). Throws UsageError
  /// when capacity is 0 or does not fit in a BlockId beside the sentinels.
  IntrusiveLists(std::size_t capacity, std::size_t lists) : capacity_(capacity) {
    KVBM_CHECK(capacity > 0, "eviction backend: capacity must be the pool's block count, not 0");
    KVBM_CHECK(lists > 0 && capacity + lists < kNil, "eviction backend: capacity ", capacity,
               " does not fit in a 32-bit BlockId");
    links_.resize(capacity + lists, Link{kNil, kNil});
    for (std::size_t l = 0; l < lists; ++l) {
      const auto s = sentinel(l);
      links_[s] = Link{s, s};
    }
  }

  /// Returns the number of block ids the lists can hold.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// Returns true when `id` is in one of the lists. Precondition: id < capacity.
  [[nodiscard]] bool contains(BlockId id) const noexcept { return links_[id].prev != kNil; }

  /// Returns true when list `l` holds no block.
  [[nodiscard]] bool empty(std::size_t l) const noexcept {
    const auto s = sentinel(l);
    return links_[s].next == s;
  }

  /// Returns the first (least recent) block of list `l`. Precondition: !empty(l).
  [[nodiscard]] BlockId front(std::size_t l) const noexcept { return links_[sentinel(l)].next; }

  /// Appends `id` at the back (most recent end) of list `l`.
  /// Precondition: id < capacity and !contains(id).
  void push_back(std::size_t l, BlockId id) noexcept {
    const auto s = sentinel(l);
    link_between(links_[s].prev, id, s);
  }

  /// Puts `id` at the front (next to go) of list `l`.
  /// Precondition: id < capacity and !contains(id).
  void push_front(std::size_t l, BlockId id) noexcept {
    const auto s = sentinel(l);
    link_between(s, id, links_[s].next);
  }

  /// Starts loading the links of `id` (the line unlink(id) and contains(id)
  /// read first); a hint that changes nothing. Precondition: id < capacity.
  void prefetch(BlockId id) const noexcept {
#if defined(__GNUC__)
    __builtin_prefetch(&links_[id], 1);
#else
    (void)id;
#endif
  }

  /// Takes `id` out of whichever list holds it. Precondition: contains(id).
  void unlink(BlockId id) noexcept {
    Link& node = links_[id];
    links_[node.prev].next = node.next;
    links_[node.next].prev = node.prev;
    node = Link{kNil, kNil};
  }

  /// Visits the blocks of list `l` from front to back; for tests and dumps.
  template <class F>
  void for_each(std::size_t l, F&& f) const {
    const auto s = sentinel(l);
    for (BlockId id = links_[s].next; id != s; id = links_[id].next) {
      f(id);
    }
  }

 private:
  struct Link {
    BlockId prev;
    BlockId next;
  };

  [[nodiscard]] BlockId sentinel(std::size_t l) const noexcept {
    return static_cast<BlockId>(capacity_ + l);
  }

  void link_between(BlockId before, BlockId id, BlockId after) noexcept {
    links_[id] = Link{before, after};
    links_[before].next = id;
    links_[after].prev = id;
  }

  std::size_t capacity_;
  std::vector<Link, HugePageAllocator<Link>>
      links_;  // [0, capacity): blocks; then one sentinel per list
};

}  // namespace detail

/// Evicts the block that became inactive longest ago.
class LruBackend final : public EvictionBackend {
 public:
  /// Builds an empty backend for block ids [0, capacity). Throws UsageError
  /// when capacity is 0 or too large for a BlockId.
  explicit LruBackend(std::size_t capacity) : list_(capacity, 1) {}

  [[nodiscard]] EvictionPolicy policy() const noexcept override { return EvictionPolicy::kLru; }

  /// Appends the block at the most-recently-used end. Throws UsageError when
  /// id is out of range or already in the pool.
  void insert(BlockId id, const SequenceHash& /*hash*/) override {
    KVBM_CHECK(id < list_.capacity(), "LruBackend::insert: block id ", id,
               " is out of range for a pool of ", list_.capacity(), " blocks");
    KVBM_CHECK(!list_.contains(id), "LruBackend::insert: block ", id,
               " is already in the inactive pool; remove it first");
    list_.push_back(0, id);
    ++size_;
  }

  /// Takes the block out of the pool; does nothing when it is not there.
  void remove(BlockId id) noexcept override {
    if (id >= list_.capacity() || !list_.contains(id)) {
      return;
    }
    list_.unlink(id);
    --size_;
  }

  /// Starts loading the blocks' links, which remove(id) reads first.
  void prefetch_remove(std::span<const BlockId> ids) const noexcept override {
    for (const BlockId id : ids) {
      if (id < list_.capacity()) list_.prefetch(id);
    }
  }

  /// Removes and returns the least recently inserted block.
  std::optional<BlockId> pop_victim() noexcept override {
    if (list_.empty(0)) {
      return std::nullopt;
    }
    const BlockId id = list_.front(0);
    list_.unlink(id);
    --size_;
    return id;
  }

  /// Returns the least recently inserted block, which pop_victim() takes next.
  [[nodiscard]] std::optional<BlockId> peek_victim() const noexcept override {
    if (list_.empty(0)) return std::nullopt;
    return list_.front(0);
  }

  [[nodiscard]] std::size_t size() const noexcept override { return size_; }

  /// Returns true when the block is in the pool.
  [[nodiscard]] bool contains(BlockId id) const noexcept {
    return id < list_.capacity() && list_.contains(id);
  }

  /// Returns the number of block ids the backend accepts.
  [[nodiscard]] std::size_t capacity() const noexcept { return list_.capacity(); }

 private:
  detail::IntrusiveLists list_;
  std::size_t size_ = 0;
};

}  // namespace kvbm
