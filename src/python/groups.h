// src/python/groups.h: the KV cache groups of hybrid models in Python (kvbm/groups/).
//
// bind_groups() adds the group specs (KvCacheGroupSpec, AttentionKind,
// SnapshotPolicy), vLLM's KVCacheConfig shapes as plain values with their
// conversion (the submodule vllm_spec; python/kvbm/groups.py reads a real
// vLLM KVCacheConfig into them), and the G1 HybridBlockManager with its
// requests and prefix hits (bind_hybrid_block_manager, hybrid_block_manager.cpp).
// docs/hybrid.md describes the C++ side; the Python names are the C++ ones.

#pragma once

#include <nanobind/nanobind.h>

namespace kvbm::python {

/// Group specs, snapshot policy, vLLM shapes and from_vllm; then the manager.
void bind_groups(nanobind::module_& m);
/// HybridBlockManagerG1, HybridRequestG1, PrefixHitG1 (hybrid_block_manager.cpp).
void bind_hybrid_block_manager(nanobind::module_& m);

}  // namespace kvbm::python
