// src/python/groups.h: the KV cache groups of hybrid models in Python (kvbm/groups/).
//
// bind_groups() adds the group specs (KvCacheGroupSpec, AttentionKind,
// SnapshotPolicy), vLLM's KVCacheConfig shapes as plain values with their
// conversion (the submodule vllm_spec; python/kvbm/groups.py reads a real
// vLLM KVCacheConfig into them), and the G1 HybridBlockManager with its
// requests and prefix hits (bind_hybrid_block_manager, hybrid_block_manager.cpp).
// docs/hybrid.md describes the C++ side; the Python names are the C++ ones.

#pragma once

#include <cstddef>
#include <nanobind/nanobind.h>
#include <utility>
#include <vector>

#include "kvbm/groups/hit_rules.h"

namespace kvbm::python {

/// A block range as Python sees it: (first, last).
inline std::pair<std::size_t, std::size_t> pair_of(const BlockRange& r) {
  return {r.first, r.last};
}

/// Every group's range as (first, last) pairs.
inline std::vector<std::pair<std::size_t, std::size_t>> ranges_of(
    const std::vector<BlockRange>& ranges) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  out.reserve(ranges.size());
  for (const BlockRange& r : ranges) out.push_back(pair_of(r));
  return out;
}

/// Group specs, snapshot policy, vLLM shapes and from_vllm; then the manager.
void bind_groups(nanobind::module_& m);
/// HybridBlockManagerG1, HybridRequestG1, PrefixHitG1 (hybrid_block_manager.cpp).
void bind_hybrid_block_manager(nanobind::module_& m);

}  // namespace kvbm::python
