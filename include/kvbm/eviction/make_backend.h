// kvbm/eviction/make_backend.h: builds the eviction backend a policy names.
//
// The pool builder calls make_eviction_backend() once per tier. The frequency
// tracker is shared by the whole registry (every tier sees the same hashes);
// only the multi-level policy needs it, and asking for that policy without one
// is a configuration error.
//
// Thread-safety: a plain function; the backend it returns is not thread-safe.

#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "kvbm/error.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/eviction/lineage.h"
#include "kvbm/eviction/lru.h"
#include "kvbm/eviction/multi_level_lru.h"
#include "kvbm/frequency_tracker.h"

namespace kvbm {

/// Returns a new, empty backend of `policy` for block ids [0, capacity).
/// Throws UsageError when capacity is 0, or when the policy is multi-level LRU
/// and `tracker` is null. The tracker is ignored by the other policies.
[[nodiscard]] inline std::unique_ptr<EvictionBackend> make_eviction_backend(
    EvictionPolicy policy, std::size_t capacity, std::shared_ptr<const FrequencyTracker> tracker) {
  switch (policy) {
    case EvictionPolicy::kLru:
      return std::make_unique<LruBackend>(capacity);
    case EvictionPolicy::kMultiLevelLru:
      KVBM_CHECK(tracker != nullptr,
                 "make_eviction_backend: the multi_level_lru policy levels blocks by frequency; "
                 "give the registry a frequency tracker (FrequencyTracker) or choose the lru "
                 "policy");
      return std::make_unique<MultiLevelLruBackend>(capacity, std::move(tracker));
    case EvictionPolicy::kLineage:
      return std::make_unique<LineageBackend>(capacity);
  }
  KVBM_CHECK(false, "make_eviction_backend: unknown eviction policy ", static_cast<int>(policy));
  return nullptr;
}

}  // namespace kvbm
