// The cold parts of FrequencyTracker: construction, halving and clearing.

#include "kvbm/frequency_tracker.h"

#include <bit>

#include "kvbm/error.h"

namespace kvbm {

namespace {

// Line indices come from 32 hash bits, so the table holds at most 2^32 lines.
constexpr std::size_t kMaxCapacity = std::size_t{1} << 35;

// Halves all sixteen nibbles of a word at once: shift right, then drop the
// bit each nibble received from its upper neighbour.
constexpr std::uint64_t halve_word(std::uint64_t w) noexcept {
  return (w >> 1) & 0x7777777777777777ULL;
}

}  // namespace

FrequencyTracker::FrequencyTracker(std::size_t capacity)
    : FrequencyTracker(capacity, capacity * kSampleFactor) {}

FrequencyTracker::FrequencyTracker(std::size_t capacity, std::size_t sample_size)
    : capacity_(capacity), sample_size_(sample_size) {
  KVBM_CHECK(capacity > 0,
             "FrequencyTracker: capacity must be the expected number of distinct hot keys "
             "(for a pool, about its block count), not 0");
  KVBM_CHECK(capacity <= kMaxCapacity, "FrequencyTracker: capacity ", capacity,
             " is larger than the supported maximum ", kMaxCapacity);
  KVBM_CHECK(sample_size > 0,
             "FrequencyTracker: sample_size must be positive (default: 10 x capacity)");
  const std::size_t words = std::bit_ceil(capacity);
  line_count_ = words < kWordsPerLine ? 1 : words / kWordsPerLine;
  line_mask_ = line_count_ - 1;
  lines_ = std::make_unique<Line[]>(line_count_);  // value-initialised: all zero
}

FrequencyTracker::~FrequencyTracker() = default;

std::size_t FrequencyTracker::nonzero_counters() const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < line_count_; ++i) {
    for (const auto& word : lines_[i].words) {
      const std::uint64_t w = word.load(std::memory_order_relaxed);
      for (unsigned shift = 0; shift < 64; shift += 4) {
        n += ((w >> shift) & kNibble) != 0 ? 1 : 0;
      }
    }
  }
  return n;
}

void FrequencyTracker::clear() noexcept {
  for (std::size_t i = 0; i < line_count_; ++i) {
    for (auto& word : lines_[i].words) {
      word.store(0, std::memory_order_relaxed);
    }
  }
  samples_.store(0, std::memory_order_relaxed);
}

void FrequencyTracker::maybe_halve() noexcept {
  // Exactly one thread halves at a time; the others keep touching. Once it
  // is done, the halved sample count is below the threshold again (or, if
  // many touches raced past, the next touch starts another halving).
  if (halving_.exchange(true, std::memory_order_acquire)) {
    return;
  }
  if (samples_.load(std::memory_order_relaxed) >= sample_size_) {
    for (std::size_t i = 0; i < line_count_; ++i) {
      for (auto& word : lines_[i].words) {
        std::uint64_t old = word.load(std::memory_order_relaxed);
        while (!word.compare_exchange_weak(old, halve_word(old), std::memory_order_relaxed,
                                           std::memory_order_relaxed)) {
        }
      }
    }
    std::uint64_t seen = samples_.load(std::memory_order_relaxed);
    while (!samples_.compare_exchange_weak(seen, seen / 2, std::memory_order_relaxed,
                                           std::memory_order_relaxed)) {
    }
    halvings_.fetch_add(1, std::memory_order_relaxed);
  }
  halving_.store(false, std::memory_order_release);
}

}  // namespace kvbm
