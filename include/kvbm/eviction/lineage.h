// kvbm/eviction/lineage.h: leaf-first eviction that never strands a suffix.
//
// A cached block is only reachable through its prefix: a match walks a
// sequence from its first block, so evicting a parent while a child is still
// cached leaves the child unreachable. LineageBackend evicts a block only when
// no child of it is registered in the tier, whether that child is inactive or
// in use.
//
// The store calls on_registered(hash) for every block that enters the tier's
// registry and on_unregistered(hash) when it leaves (the calls are balanced
// per registered entry). From them the backend keeps, per parent hash value,
// the number of registered children. An inactive block is then either
//
//   evictable: it has no registered child; it sits in an LRU list, or
//   parked:    it has at least one; it is in no list and is never a victim.
//
// Order. Inserted blocks that are evictable go to the back of the list (most
// recent), and pop_victim() takes the front. A parked block becomes evictable
// when its last child leaves the tier; it then goes to the *front*, so it is
// the next victim. Its child has just been evicted as the least recent leaf,
// and a parent is released no later than its child (a request releases its
// prefix with it, and a match that reuses the child reuses the parent too),
// so the parent is older than every other leaf. Draining a chain A <- B <- C
// released before a leaf X therefore evicts C, B, A and then X: the chain is
// unwound before anything else goes. A block that gains a registered child
// while evictable is parked again.
//
// Cost: O(1) expected per operation. Per block: two 32-bit links, the hash
// value and a state byte; plus an open-addressing table keyed by hash value
// (sized for twice the capacity, grown only if the store registers far more
// distinct parents than it has blocks). Nothing is allocated per operation
// unless the table grows.
//
// Thread-safety: none; the block store calls every member under its tier lock.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/eviction/lru.h"

namespace kvbm {

namespace detail {

/// Open-addressing (linear probing, backward-shift deletion) map from a
/// sequence hash value to what lineage needs about it: the inactive block that
/// holds it, and how many registered blocks name it as their parent. An entry
/// with neither is empty, so nothing else marks free slots.
class LineageTable {
 public:
  /// One hash value's record.
  struct Entry {
    std::uint64_t key;
    BlockId inactive;        ///< the inactive block holding this value, or kNil
    std::uint32_t children;  ///< registered blocks whose parent is this value
  };

  static constexpr BlockId kNil = IntrusiveLists::kNil;

  /// Builds a table with room for about `expected` entries at half load.
  explicit LineageTable(std::size_t expected) { reset_slots(std::bit_ceil(expected * 2)); }

  /// Returns the entry for `key`, or nullptr.
  [[nodiscard]] Entry* find(std::uint64_t key) noexcept {
    const std::size_t i = index_of(key);
    return i == kNotFound ? nullptr : &slots_[i];
  }
  [[nodiscard]] const Entry* find(std::uint64_t key) const noexcept {
    const std::size_t i = index_of(key);
    return i == kNotFound ? nullptr : &slots_[i];
  }

  /// Returns the entry for `key`, making an empty one if there is none. The
  /// caller must fill a new entry (set inactive or children) before any other
  /// call. May grow the table, which invalidates earlier pointers.
  [[nodiscard]] Entry& find_or_insert(std::uint64_t key) {
    if (Entry* e = find(key)) {
      return *e;
    }
    if ((size_ + 1) * 4 > slots_.size() * 3) {
      grow();
    }
    std::size_t i = home(key);
    while (!is_empty(slots_[i])) {
      i = (i + 1) & mask_;
    }
    slots_[i].key = key;
    ++size_;
    return slots_[i];
  }

  /// Frees `e` if it has become empty (no inactive block, no children).
  void erase_if_empty(Entry* e) noexcept {
    if (!is_empty(*e)) {
      return;
    }
    // Backward-shift deletion: pull later entries of the probe run into the
    // hole unless that would move one before its home slot.
    auto hole = static_cast<std::size_t>(e - slots_.data());
    for (std::size_t j = (hole + 1) & mask_; !is_empty(slots_[j]); j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Entry{0, kNil, 0};
    --size_;
  }

  /// Returns the number of entries.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::size_t kNotFound = ~std::size_t{0};

  static bool is_empty(const Entry& e) noexcept { return e.inactive == kNil && e.children == 0; }

  [[nodiscard]] std::size_t index_of(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (is_empty(e)) {
        return kNotFound;
      }
      if (e.key == key) {
        return i;
      }
    }
  }

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  void reset_slots(std::size_t n) {
    n = n < 16 ? 16 : n;
    slots_.assign(n, Entry{0, kNil, 0});
    mask_ = n - 1;
    shift_ = static_cast<unsigned>(64 - std::countr_zero(n));
    size_ = 0;
  }

  void grow() {
    std::vector<Entry> old = std::move(slots_);
    reset_slots(old.size() * 2);
    for (const Entry& e : old) {
      if (!is_empty(e)) {
        std::size_t i = home(e.key);
        while (!is_empty(slots_[i])) {
          i = (i + 1) & mask_;
        }
        slots_[i] = e;
        ++size_;
      }
    }
  }

  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace detail

/// Evicts least recent leaves first; never a block with a registered child.
class LineageBackend final : public EvictionBackend {
 public:
  /// Builds an empty backend for block ids [0, capacity). Throws UsageError
  /// when capacity is 0 or too large for a BlockId.
  explicit LineageBackend(std::size_t capacity)
      : list_(capacity, 1),
        value_(capacity, 0),
        state_(capacity, State::kAbsent),
        table_(capacity) {}

  [[nodiscard]] EvictionPolicy policy() const noexcept override { return EvictionPolicy::kLineage; }

  /// Adds an inactive block: evictable at the back when no registered block
  /// names it as parent, parked otherwise. Throws UsageError when id is out of
  /// range or already in the pool.
  void insert(BlockId id, const SequenceHash& hash) override {
    KVBM_CHECK(id < list_.capacity(), "LineageBackend::insert: block id ", id,
               " is out of range for a pool of ", list_.capacity(), " blocks");
    KVBM_CHECK(state_[id] == State::kAbsent, "LineageBackend::insert: block ", id,
               " is already in the inactive pool; remove it first");
    detail::LineageTable::Entry& e = table_.find_or_insert(hash.value());
    value_[id] = hash.value();
    ++size_;
    if (e.inactive != kNil) {
      // Another inactive block already holds this value (the store registers
      // only one of them); that one carries the lineage, this copy protects
      // no child and may go like any leaf.
      make_evictable_back(id);
      return;
    }
    e.inactive = id;
    if (e.children > 0) {
      state_[id] = State::kParked;
    } else {
      make_evictable_back(id);
    }
  }

  /// Takes the block out of the pool (evictable or parked); does nothing when
  /// it is not there.
  void remove(BlockId id) noexcept override {
    if (id >= list_.capacity() || state_[id] == State::kAbsent) {
      return;
    }
    take_out(id);
  }

  /// Removes and returns the least recent childless block, or nullopt when
  /// every inactive block still has a registered child.
  std::optional<BlockId> pop_victim() noexcept override {
    if (list_.empty(0)) {
      return std::nullopt;
    }
    const BlockId id = list_.front(0);
    take_out(id);
    return id;
  }

  [[nodiscard]] std::size_t size() const noexcept override { return size_; }

  /// Returns the number of inactive blocks with no registered child.
  [[nodiscard]] std::size_t evictable() const noexcept override { return evictable_; }

  /// Counts a registered child of hash.parent(); parks the parent if it is
  /// inactive and was evictable.
  void on_registered(const SequenceHash& hash) override {
    if (!hash.has_parent()) {
      return;
    }
    detail::LineageTable::Entry& e = table_.find_or_insert(hash.parent());
    if (++e.children == 1 && e.inactive != kNil && state_[e.inactive] == State::kEvictable) {
      list_.unlink(e.inactive);
      --evictable_;
      state_[e.inactive] = State::kParked;
    }
  }

  /// Uncounts a registered child of hash.parent(); a parked parent left with
  /// no child becomes the next victim (front of the list).
  void on_unregistered(const SequenceHash& hash) noexcept override {
    if (!hash.has_parent()) {
      return;
    }
    detail::LineageTable::Entry* e = table_.find(hash.parent());
    if (e == nullptr || e->children == 0) {
      return;  // unbalanced call; nothing to undo
    }
    if (--e->children > 0) {
      return;
    }
    if (e->inactive == kNil) {
      table_.erase_if_empty(e);
    } else if (state_[e->inactive] == State::kParked) {
      list_.push_front(0, e->inactive);
      state_[e->inactive] = State::kEvictable;
      ++evictable_;
    }
  }

  /// Returns the number of registered children counted for a hash value.
  [[nodiscard]] std::uint32_t children_of(std::uint64_t value) const noexcept {
    const detail::LineageTable::Entry* e = table_.find(value);
    return e == nullptr ? 0 : e->children;
  }

  /// Returns true when the block is in the pool (evictable or parked).
  [[nodiscard]] bool contains(BlockId id) const noexcept {
    return id < list_.capacity() && state_[id] != State::kAbsent;
  }

 private:
  enum class State : std::uint8_t { kAbsent, kEvictable, kParked };
  static constexpr BlockId kNil = detail::IntrusiveLists::kNil;

  void make_evictable_back(BlockId id) noexcept {
    list_.push_back(0, id);
    state_[id] = State::kEvictable;
    ++evictable_;
  }

  void take_out(BlockId id) noexcept {
    if (state_[id] == State::kEvictable) {
      list_.unlink(id);
      --evictable_;
    }
    state_[id] = State::kAbsent;
    --size_;
    detail::LineageTable::Entry* e = table_.find(value_[id]);
    if (e != nullptr && e->inactive == id) {
      e->inactive = kNil;
      table_.erase_if_empty(e);
    }
  }

  detail::IntrusiveLists list_;       // the evictable blocks, least recent first
  std::vector<std::uint64_t> value_;  // hash value of each inactive block
  std::vector<State> state_;
  detail::LineageTable table_;
  std::size_t size_ = 0;
  std::size_t evictable_ = 0;
};

}  // namespace kvbm
