// src/python/hybrid_kv_block_manager.h: what the files of the Python
// HybridKvBlockManager share (hybrid_kv_block_manager.cpp binds the manager,
// hybrid_kv_block_bytes.cpp its write() and read()).
//
// The names live in kvbm::python::hybrid_facade, a named namespace: the
// extension is built in unity batches, and hybrid_block_manager.cpp has helpers
// of the same names in its anonymous one.

#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <nanobind/nanobind.h>
#include <utility>

#include "kvbm/hybrid/hybrid_kv_block_manager.h"
#include "python/bindings.h"

namespace kvbm::python::hybrid_facade {

using Request = HybridRequest<G1>;
using Hit = PrefixHit<G1>;

/// The Python HybridKvBlockManager: the manager, shared with every call in flight, so
/// that close() on another thread never frees it under a call.
class HybridManager {
 public:
  /// Returns the manager for one call; throws UsageError after close().
  [[nodiscard]] std::shared_ptr<HybridKvBlockManager> get() const {
    std::lock_guard lock(mu_);
    KVBM_CHECK(kv_ != nullptr, "HybridKvBlockManager: the manager was closed; build a new one");
    return kv_;
  }
  void open(std::unique_ptr<HybridKvBlockManager> kv) {
    std::lock_guard lock(mu_);
    kv_ = std::move(kv);
  }
  /// Drains and shuts the manager down (GIL released); later calls raise. Idempotent.
  void close() {
    std::shared_ptr<HybridKvBlockManager> kv;
    {
      std::lock_guard lock(mu_);
      kv = std::move(kv_);
    }
    if (!kv) return;
    nb::gil_scoped_release release;
    kv->drain();
    kv->shutdown();
  }

  EventTap events;  // empty without events=

 private:
  mutable std::mutex mu_;
  std::shared_ptr<HybridKvBlockManager> kv_;  // guarded by mu_; null once closed
};

/// Throws UsageError naming `call` unless `g` is one of the manager's groups.
void check_group(const HybridKvBlockManager& kv, std::size_t g, const char* call);
/// Throws UsageError unless `hit` has the manager's groups and every block of group g is
/// one of group g's G1 pool (not another manager's, not another group's).
void check_hit(HybridKvBlockManager& kv, const Hit& hit, const char* call);
/// Throws UsageError unless `r` has the manager's groups and every block it holds is one
/// of its group's G1 pool.
void check_request(HybridKvBlockManager& kv, const Request& r, const char* call);

/// write() and read() of a group's block bytes (hybrid_kv_block_bytes.cpp).
void bind_bytes(nb::class_<HybridManager>& cls);

}  // namespace kvbm::python::hybrid_facade
