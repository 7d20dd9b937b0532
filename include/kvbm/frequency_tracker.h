// kvbm/frequency_tracker.h: a TinyLFU frequency sketch over 64-bit keys.
//
// FrequencyTracker answers "about how often has this sequence hash been seen
// lately?" in constant memory. It is a count-min sketch of 4-bit saturating
// counters (0..15), 16 packed into each 64-bit word. Every key owns four
// counters (depth 4); its estimate is the smallest of them, so a key is never
// under-counted except by aging, and is over-counted only when all four of its
// counters are shared with other keys.
//
// Layout. The table is an array of 64-byte lines of eight words. A key is
// mixed with a 64-bit finaliser; the high 32 bits pick the line and the low 20
// bits pick the four counters inside it: row i (0..3) owns words 2i and 2i+1,
// one bit picks the word and four bits pick the nibble. The bits that choose
// the line and the bits that choose a counter never overlap, so every counter
// of the table is reachable (a sketch whose index bits overlap its
// counter-selection bits leaves most counters unused), and a touch or an
// estimate reads exactly one cache line.
//
// Aging. Every touch counts as one sample. When the sample count reaches
// sample_size() (10 x capacity by default), the thread that crosses it halves
// every counter and halves the sample count, so old popularity decays and the
// sketch follows a changing workload. halvings() counts how often that
// happened.
//
// Sizing. `capacity` is the number of distinct hot keys the sketch should tell
// apart (for a pool: about its block count). The table holds the next power of
// two of `capacity` words, at least one line: 8 bytes and 16 counters per key.
//
// Thread-safety: touch(), estimate(), halvings() and clear() may be called from
// any number of threads at once. touch() and estimate() take no lock; counters
// are updated with relaxed compare-and-swap, so concurrent touches are never
// lost to a torn update (only saturation and aging drop counts). Estimates are
// advisory: they read relaxed values and may lag concurrent touches. clear()
// racing with touches leaves a valid but unspecified state.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvbm {

/// Preset capacities for FrequencyTracker, by number of distinct hot keys.
enum class TrackerCapacity : std::size_t {
  kSmall = std::size_t{1} << 14,   ///< 16 Ki keys, 128 KiB of counters
  kMedium = std::size_t{1} << 18,  ///< 256 Ki keys, 2 MiB of counters
  kLarge = std::size_t{1} << 21,   ///< 2 Mi keys, 16 MiB of counters
};

/// TinyLFU count-min sketch with 4-bit counters and periodic halving.
class FrequencyTracker {
 public:
  /// The largest value a counter, and so an estimate, can reach.
  static constexpr std::uint32_t kMaxCount = 15;
  /// The default sample size is this many touches per unit of capacity.
  static constexpr std::size_t kSampleFactor = 10;

  /// Builds a sketch for about `capacity` distinct hot keys that ages every
  /// 10 x capacity touches. Throws UsageError when capacity is 0.
  explicit FrequencyTracker(std::size_t capacity);

  /// Builds a sketch for one of the preset capacities.
  explicit FrequencyTracker(TrackerCapacity capacity)
      : FrequencyTracker(static_cast<std::size_t>(capacity)) {}

  /// Builds a sketch for about `capacity` keys that ages every `sample_size`
  /// touches. Throws UsageError when either is 0.
  FrequencyTracker(std::size_t capacity, std::size_t sample_size);

  FrequencyTracker(const FrequencyTracker&) = delete;
  FrequencyTracker& operator=(const FrequencyTracker&) = delete;
  ~FrequencyTracker();

  /// Records one occurrence of `key`; may halve the whole table when this
  /// touch completes a sample. Lock-free apart from that halving.
  void touch(std::uint64_t key) noexcept {
    const std::uint64_t h = mix(key);
    Line& line = lines_[line_of(h)];
    for (unsigned row = 0; row < kDepth; ++row) {
      const Slot s = slot_of(h, row);
      increment(line.words[s.word], s.shift);
    }
    const std::uint64_t seen = samples_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (seen >= sample_size_) [[unlikely]] {
      maybe_halve();
    }
  }

  /// Returns the estimated recent count of `key`, in [0, kMaxCount].
  [[nodiscard]] std::uint32_t estimate(std::uint64_t key) const noexcept {
    const std::uint64_t h = mix(key);
    const Line& line = lines_[line_of(h)];
    std::uint32_t least = kMaxCount;
    for (unsigned row = 0; row < kDepth; ++row) {
      const Slot s = slot_of(h, row);
      const auto count = static_cast<std::uint32_t>(
          (line.words[s.word].load(std::memory_order_relaxed) >> s.shift) & kNibble);
      least = count < least ? count : least;
    }
    return least;
  }

  /// Returns how many times the table has been halved since construction.
  [[nodiscard]] std::uint64_t halvings() const noexcept {
    return halvings_.load(std::memory_order_relaxed);
  }

  /// Returns the number of touches after which every counter is halved.
  [[nodiscard]] std::size_t sample_size() const noexcept { return sample_size_; }

  /// Returns the capacity the sketch was built for.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// Returns the number of 4-bit counters in the table.
  [[nodiscard]] std::size_t counters() const noexcept { return line_count_ * kWordsPerLine * 16; }

  /// Returns the number of counters that are not zero; a diagnostic that
  /// walks the whole table.
  [[nodiscard]] std::size_t nonzero_counters() const noexcept;

  /// Resets every counter and the sample count to zero. halvings() is kept.
  void clear() noexcept;

 private:
  static constexpr unsigned kDepth = 4;
  static constexpr std::size_t kWordsPerLine = 8;
  static constexpr std::uint64_t kNibble = 0xF;

  struct alignas(64) Line {
    std::atomic<std::uint64_t> words[kWordsPerLine];
  };
  struct Slot {
    unsigned word;   // word within the line
    unsigned shift;  // bit offset of the nibble within the word
  };

  // A strong 64-bit finaliser (MurmurHash3 fmix64 constants): every output bit
  // depends on every input bit, so sequential or structured keys spread out.
  static constexpr std::uint64_t mix(std::uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }

  // Line from the high 32 bits; counters (below) from the low 20 bits.
  [[nodiscard]] std::size_t line_of(std::uint64_t h) const noexcept {
    return static_cast<std::size_t>(h >> 32) & line_mask_;
  }

  // Row r uses bits [5r, 5r + 5): one bit for the word of its pair, four for
  // the nibble.
  static constexpr Slot slot_of(std::uint64_t h, unsigned row) noexcept {
    const auto bits = static_cast<unsigned>(h >> (5 * row));
    return Slot{2 * row + (bits & 1U), 4 * ((bits >> 1) & 0xFU)};
  }

  // Adds one to the nibble at `shift` unless it is saturated.
  static void increment(std::atomic<std::uint64_t>& word, unsigned shift) noexcept {
    std::uint64_t old = word.load(std::memory_order_relaxed);
    while (((old >> shift) & kNibble) != kNibble) {
      if (word.compare_exchange_weak(old, old + (std::uint64_t{1} << shift),
                                     std::memory_order_relaxed, std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Halves the table unless another thread is already doing it.
  void maybe_halve() noexcept;

  std::size_t capacity_;
  std::size_t sample_size_;
  std::size_t line_count_;
  std::size_t line_mask_;
  std::unique_ptr<Line[]> lines_;
  std::atomic<bool> halving_{false};
  std::atomic<std::uint64_t> halvings_{0};
  // Touched by every touch(): kept on its own cache line so it does not
  // invalidate the read-mostly fields above.
  alignas(64) std::atomic<std::uint64_t> samples_{0};
};

}  // namespace kvbm
