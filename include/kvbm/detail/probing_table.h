// kvbm/detail/probing_table.h: the open-addressing table kvbm's maps from a
// 64-bit key share (the pool's HashIndex, kvbm/detail/hash_index.h; the
// router's BlockSlotMap, src/router/block_slot_map.h).
//
// Linear probing over a power-of-two number of slots, backward-shift deletion
// (no tombstones), keys mixed by a Fibonacci multiply before picking the home
// slot: a lookup is one multiply, a shift and almost always one cache line.
// A Slot is any struct with a `std::uint64_t key` and an integer `used`
// (0: empty), default-constructible to an empty slot; its other fields are the
// entry's value. The table never grows on its own: a fixed-size user sizes it
// once, a growing one calls grow() before an insert would fill it.
//
// Not thread-safe: the user's lock guards it.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace kvbm::detail {

/// Asks for the cache line at `p`, which is about to be written (a hint).
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__GNUC__)
  __builtin_prefetch(p, 1);
#else
  (void)p;
#endif
}

/// An open-addressing table of Slots keyed by 64-bit values; see the file comment.
template <class Slot, class Alloc = std::allocator<Slot>>
class ProbingTable {
 public:
  /// A table of `slots` slots (a power of two, at least 2).
  explicit ProbingTable(std::size_t slots) { reset(slots); }

  /// Returns the slot of `key`, or nullptr.
  [[nodiscard]] const Slot* find(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.used == 0) return nullptr;
      if (s.key == key) return &s;
    }
  }
  [[nodiscard]] Slot* find(std::uint64_t key) noexcept {
    return const_cast<Slot*>(std::as_const(*this).find(key));
  }

  /// Returns the slot of `key` and false, or a new slot for it (its other
  /// fields default) and true. Precondition: size() < slot_count() - 1 or the
  /// key is present. Invalidates no pointer.
  std::pair<Slot*, bool> find_or_insert(std::uint64_t key) noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.used == 0) {
        s = Slot{};
        s.key = key;
        s.used = 1;
        ++size_;
        return {&s, true};
      }
      if (s.key == key) return {&s, false};
    }
  }

  /// Removes `key`; returns whether it was present. Invalidates pointers to slots.
  bool erase(std::uint64_t key) noexcept {
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].used == 0) return false;
      if (slots_[i].key == key) break;
    }
    // Backward shift: pull later members of the probe run into the hole when
    // the hole lies between their home slot and where they sit.
    std::size_t hole = i;
    for (std::size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
      const Slot& s = slots_[j];
      if (s.used == 0) break;
      const std::size_t h = home(s.key);
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = s;
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  /// Calls fn(Slot&) on every used slot. fn must not insert or erase.
  template <class Fn>
  void for_each(Fn&& fn) {
    for (Slot& s : slots_) {
      if (s.used != 0) fn(s);
    }
  }

  /// Asks for the cache line where `key` is looked up, ahead of a find,
  /// insert or erase. Touches only the table's address and size.
  void prefetch(std::uint64_t key) const noexcept { prefetch_for_write(&slots_[home(key)]); }

  /// Doubles the slots and re-inserts every entry. Invalidates pointers to slots.
  void grow() {
    std::vector<Slot, Alloc> old = std::move(slots_);
    const std::size_t entries = size_;
    reset(old.size() * 2);
    for (const Slot& s : old) {
      if (s.used == 0) continue;
      for (std::size_t i = home(s.key);; i = (i + 1) & mask_) {
        if (slots_[i].used == 0) {
          slots_[i] = s;
          break;
        }
      }
    }
    size_ = entries;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  /// Bytes of the table.
  [[nodiscard]] std::size_t bytes() const noexcept { return slots_.size() * sizeof(Slot); }

 private:
  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  void reset(std::size_t slots) {
    slots_.assign(slots, Slot{});
    mask_ = slots - 1;
    shift_ = static_cast<unsigned>(64 - std::countr_zero(slots));
    size_ = 0;
  }

  std::vector<Slot, Alloc> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace kvbm::detail
