// kvbm/eviction/multi_level_lru.h: LRU within frequency levels.
//
// MultiLevelLruBackend keeps four intrusive LRU lists, one per frequency level,
// and evicts from the lowest non-empty level, least recent first. A block's
// level is fixed when it is inserted, from the shared FrequencyTracker's
// estimate of its sequence hash at that moment:
//
//   level 0: estimate <  thresholds[0]                  (seen about once)
//   level 1: thresholds[0] <= estimate < thresholds[1]
//   level 2: thresholds[1] <= estimate < thresholds[2]
//   level 3: thresholds[2] <= estimate                  (hot)
//
// With the default thresholds {2, 4, 8}: 0-1 hits, 2-3, 4-7, and 8-15 (the
// sketch saturates at 15). So a prefix reused by many requests outlives a
// one-off block even when the one-off block was released more recently. The
// backend only reads the tracker; the block store touches it (on registration
// and on every match), and the tracker's aging lets once-hot blocks sink.
//
// Cost: O(1) per operation, nothing allocated after construction, 9 bytes per
// block (two 32-bit links and the level).
//
// Thread-safety: none of its own; the block store calls every member under
// its tier lock. The tracker is thread-safe and may be touched concurrently.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/eviction/lru.h"
#include "kvbm/frequency_tracker.h"

namespace kvbm {

/// Evicts the least recent block of the least frequent non-empty level.
class MultiLevelLruBackend final : public EvictionBackend {
 public:
  /// Number of frequency levels.
  static constexpr std::size_t kLevels = 4;
  /// Estimates at which a block enters levels 1, 2 and 3.
  using Thresholds = std::array<std::uint32_t, kLevels - 1>;
  /// The default thresholds: levels for 0-1, 2-3, 4-7 and 8+ recent hits.
  static constexpr Thresholds kDefaultThresholds{2, 4, 8};

  /// Builds an empty backend for block ids [0, capacity) that levels blocks
  /// by `tracker`. Throws UsageError when the tracker is null, capacity is 0,
  /// or the thresholds are not strictly increasing within [1, 15].
  MultiLevelLruBackend(std::size_t capacity, std::shared_ptr<const FrequencyTracker> tracker,
                       Thresholds thresholds = kDefaultThresholds)
      : lists_(capacity, kLevels),
        level_(capacity, 0),
        tracker_(std::move(tracker)),
        thresholds_(thresholds) {
    KVBM_CHECK(tracker_ != nullptr,
               "MultiLevelLruBackend: a FrequencyTracker is required; give the registry "
               "(or the pool builder) a frequency tracker, or use the lru policy");
    for (std::size_t i = 0; i < thresholds_.size(); ++i) {
      KVBM_CHECK(thresholds_[i] >= 1 && thresholds_[i] <= FrequencyTracker::kMaxCount,
                 "MultiLevelLruBackend: threshold ", thresholds_[i], " must be in [1, ",
                 FrequencyTracker::kMaxCount, "]");
      KVBM_CHECK(i == 0 || thresholds_[i - 1] < thresholds_[i],
                 "MultiLevelLruBackend: thresholds must be strictly increasing");
    }
  }

  [[nodiscard]] EvictionPolicy policy() const noexcept override {
    return EvictionPolicy::kMultiLevelLru;
  }

  /// Appends the block at the most recent end of the level its hash has now.
  /// Throws UsageError when id is out of range or already in the pool.
  void insert(BlockId id, const SequenceHash& hash) override {
    KVBM_CHECK(id < lists_.capacity(), "MultiLevelLruBackend::insert: block id ", id,
               " is out of range for a pool of ", lists_.capacity(), " blocks");
    KVBM_CHECK(!lists_.contains(id), "MultiLevelLruBackend::insert: block ", id,
               " is already in the inactive pool; remove it first");
    const std::size_t level = level_for(hash);
    lists_.push_back(level, id);
    level_[id] = static_cast<std::uint8_t>(level);
    ++level_size_[level];
    ++size_;
  }

  /// Takes the block out of the pool; does nothing when it is not there.
  void remove(BlockId id) noexcept override {
    if (id >= lists_.capacity() || !lists_.contains(id)) {
      return;
    }
    lists_.unlink(id);
    --level_size_[level_[id]];
    --size_;
  }

  /// Starts loading the blocks' links, which remove(id) reads first.
  void prefetch_remove(std::span<const BlockId> ids) const noexcept override {
    for (const BlockId id : ids) {
      if (id < lists_.capacity()) lists_.prefetch(id);
    }
  }

  /// Removes and returns the least recent block of the lowest non-empty level.
  std::optional<BlockId> pop_victim() noexcept override {
    for (std::size_t level = 0; level < kLevels; ++level) {
      if (!lists_.empty(level)) {
        const BlockId id = lists_.front(level);
        lists_.unlink(id);
        --level_size_[level];
        --size_;
        return id;
      }
    }
    return std::nullopt;
  }

  /// Returns the block pop_victim() takes next.
  [[nodiscard]] std::optional<BlockId> peek_victim() const noexcept override {
    for (std::size_t level = 0; level < kLevels; ++level) {
      if (!lists_.empty(level)) return lists_.front(level);
    }
    return std::nullopt;
  }

  [[nodiscard]] std::size_t size() const noexcept override { return size_; }

  /// Returns the level a block with this hash would be inserted at now.
  [[nodiscard]] std::size_t level_for(const SequenceHash& hash) const noexcept {
    const std::uint32_t estimate = tracker_->estimate(hash.value());
    std::size_t level = 0;
    while (level < thresholds_.size() && estimate >= thresholds_[level]) {
      ++level;
    }
    return level;
  }

  /// Returns the number of blocks in `level`. Precondition: level < kLevels.
  [[nodiscard]] std::size_t level_size(std::size_t level) const noexcept {
    return level_size_[level];
  }

  /// Returns the level of a block in the pool. Precondition: contains(id).
  [[nodiscard]] std::size_t level_of(BlockId id) const noexcept { return level_[id]; }

  /// Returns true when the block is in the pool.
  [[nodiscard]] bool contains(BlockId id) const noexcept {
    return id < lists_.capacity() && lists_.contains(id);
  }

  /// Returns the thresholds in use.
  [[nodiscard]] const Thresholds& thresholds() const noexcept { return thresholds_; }

 private:
  detail::IntrusiveLists lists_;
  std::vector<std::uint8_t> level_;  // level of each block while it is in the pool
  std::shared_ptr<const FrequencyTracker> tracker_;
  Thresholds thresholds_;
  std::array<std::size_t, kLevels> level_size_{};
  std::size_t size_ = 0;
};

}  // namespace kvbm
