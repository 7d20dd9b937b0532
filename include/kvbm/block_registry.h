// kvbm/block_registry.h: the registry shared by the tiers of one engine.
//
// Each tier's BlockManager keeps its own table of registered blocks (sequence
// hash -> block), deduplicated by its DuplicatePolicy, under the tier's lock.
// A BlockRegistry ties the tiers together: managers built with the same
// registry share its TinyLFU frequency tracker (fed by every registration and
// match) and answer presence queries across tiers ("which tiers hold this
// hash?"), which offload policies use to skip blocks already in a destination.
//
// Lifetime: shared. Managers hold a shared_ptr to their registry; the registry
// holds only weak references to the tiers.
// Thread-safety: every member may be called from any thread.

#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <typeindex>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/tier.h"

namespace kvbm {

template <TierMarker T>
class BlockManager;

/// Frequency tracking and cross-tier presence for the managers sharing it.
class BlockRegistry {
 public:
  /// Builds a BlockRegistry.
  class Builder {
   public:
    /// Feeds registrations and matches into `tracker` (TinyLFU).
    Builder& frequency_tracker(std::shared_ptr<FrequencyTracker> tracker) {
      tracker_ = std::move(tracker);
      return *this;
    }
    /// Returns the registry.
    [[nodiscard]] std::shared_ptr<BlockRegistry> build() {
      return std::shared_ptr<BlockRegistry>(new BlockRegistry(std::move(tracker_)));
    }

   private:
    std::shared_ptr<FrequencyTracker> tracker_;
  };

  /// Returns a builder.
  static Builder builder() { return {}; }

  /// Returns the frequency tracker, or null when frequency is not tracked.
  [[nodiscard]] const std::shared_ptr<FrequencyTracker>& frequency_tracker() const noexcept {
    return tracker_;
  }

  /// Returns true when a manager of tier T built with this registry holds a
  /// registered block with `hash`.
  template <TierMarker T>
  [[nodiscard]] bool is_present(const SequenceHash& hash) const {
    const auto p = presence<T>(std::span<const SequenceHash>(&hash, 1));
    return p[0];
  }

  /// For each hash, whether tier T holds it.
  template <TierMarker T>
  [[nodiscard]] std::vector<bool> presence(std::span<const SequenceHash> hashes) const {
    std::vector<bool> result(hashes.size(), false);
    std::vector<bool> one;
    for (const auto& store : stores_of(typeid(T))) {
      store->presence(hashes, one);
      for (std::size_t i = 0; i < hashes.size(); ++i) result[i] = result[i] || one[i];
    }
    return result;
  }

  /// Returns the names of the pools that hold `hash`, in attach order.
  [[nodiscard]] std::vector<std::string> pools_holding(const SequenceHash& hash) const {
    std::vector<std::string> names;
    std::vector<bool> one;
    for (const auto& store : stores_of(std::nullopt)) {
      store->presence(std::span<const SequenceHash>(&hash, 1), one);
      if (one[0]) names.push_back(store->name());
    }
    return names;
  }

 private:
  template <TierMarker>
  friend class BlockManager;  // its builder attaches each pool's store

  // Attaches a tier's store (BlockManager's builder, as the pool is built).
  void attach(std::type_index tier, const std::shared_ptr<detail::BlockStore>& store) {
    detail::LockGuard lock(mu_);
    std::erase_if(tiers_, [](const Entry& e) { return e.store.expired(); });
    tiers_.push_back(Entry{tier, store});
  }

  struct Entry {
    std::type_index tier;
    std::weak_ptr<detail::BlockStore> store;
  };

  explicit BlockRegistry(std::shared_ptr<FrequencyTracker> tracker)
      : tracker_(std::move(tracker)) {}

  std::vector<std::shared_ptr<detail::BlockStore>> stores_of(
      std::optional<std::type_index> tier) const {
    std::vector<std::shared_ptr<detail::BlockStore>> out;
    detail::LockGuard lock(mu_);
    for (const auto& e : tiers_) {
      if (tier && e.tier != *tier) continue;
      if (auto s = e.store.lock()) out.push_back(std::move(s));
    }
    return out;
  }

  std::shared_ptr<FrequencyTracker> tracker_;
  mutable detail::Mutex mu_;
  std::vector<Entry> tiers_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm
