// src/python/bindings.h: what the files of the Python extension (kvbm._kvbm) share.
//
// The extension is a thin layer over the public API (docs/python.md): each
// bind_*() adds one area to the module. Conventions kept by every file:
//
//   * hashes, token ids and rows cross as lists of ints or 1-D integer arrays
//     of any dtype and stride, each value checked to fit (integers.h);
//     make_hashes() turns hash values into SequenceHash values, either chained
//     (one sequence from position 0: block i has position i and block i-1 as
//     its parent, as hash_tokens() produced them) or flat (every value a block
//     of its own at position 0: opaque keys, as the engine integrations use);
//   * buffers cross as arrays used in place (host_bytes.h): their address
//     reaches C++ unchanged, nothing is converted or copied on the way in, and
//     what cannot be used in place is refused;
//   * every handle a call takes is checked to be one of this manager's;
//   * every call that may wait (a copy, an onboarding, a drain, a disk or
//     network round trip) releases the GIL; Python objects are read before
//     the release and written after it.
//
// Lifetime: every call holds a Manager::Lease for its whole duration; close()
// refuses new calls, waits for the leases in flight, then shuts the manager
// down. The KvBlockManager is shared with every array viewing its memory, so
// the memory outlives the last view. Block and onboarding handles are the
// library's own (they stay safe after the manager is gone).

#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kvbm/events/kv_events.h"
#include "kvbm/kv_block_manager.h"

namespace kvbm::python {

namespace nb = nanobind;

class EventCollector;

/// The manager behind the Python KvBlockManager.
class Manager {
 public:
  /// A call's hold on the manager, from its first argument read to its result:
  /// the KvBlockManager stays alive and close() waits until the lease is gone.
  class Lease {
   public:
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    KvBlockManager& operator*() const { return *kv_; }
    KvBlockManager* operator->() const { return kv_.get(); }
    /// The manager itself, for what must keep its memory alive (an array view).
    [[nodiscard]] const std::shared_ptr<KvBlockManager>& shared() const { return kv_; }

   private:
    friend class Manager;
    Lease(const Manager* owner, std::shared_ptr<KvBlockManager> kv)
        : owner_(owner), kv_(std::move(kv)) {}

    const Manager* owner_;
    std::shared_ptr<KvBlockManager> kv_;
  };

  /// Takes the manager in hand for one call; throws UsageError after close().
  [[nodiscard]] Lease lease() const;
  /// Starts managing `kv` (once, from __init__).
  void open(std::shared_ptr<KvBlockManager> kv);
  /// Refuses new calls, waits (GIL released) for those in flight, drains and
  /// shuts the manager down and lets it go; idempotent.
  void close();

  /// KV events (null when the manager was built without them): the publisher
  /// is fed by listeners on every pool; the collector keeps what it publishes
  /// for take_events() (absent when events go to a ZeroMQ socket only).
  std::shared_ptr<events::KvEventPublisher> publisher;
  std::shared_ptr<EventCollector> collector;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable idle_;
  std::shared_ptr<KvBlockManager> kv_;  // guarded by mu_; null once closed
  mutable std::size_t in_flight_ = 0;   // guarded by mu_: leases alive
  bool closed_ = false;                 // guarded by mu_
};

/// The pool of tier T (G1, G2 or G3); throws UsageError naming `what` when the manager
/// has no such tier.
template <PooledTier T>
BlockManager<T>& require_pool(KvBlockManager& kv, const char* what) {
  BlockManager<T>* p = kv.template pool<T>();
  KVBM_CHECK(p != nullptr, what,
             ": the manager has no such tier (configure it in KvBlockManagerConfig)");
  return *p;
}

/// Returns the SequenceHash values of `values`, chained or flat (file comment).
[[nodiscard]] std::vector<SequenceHash> make_hashes(std::span<const std::uint64_t> values,
                                                    bool chained);

void bind_errors(nb::module_& m);
void bind_hashing(nb::module_& m);
void bind_config(nb::module_& m);
void bind_blocks(nb::module_& m);
void bind_manager(nb::module_& m);
/// Returns the sequence hashes of `obj` (a list or array of hash values; integers.h),
/// chained or flat; `what` names the call in errors.
[[nodiscard]] std::vector<SequenceHash> hashes_of(nb::handle obj, bool chained, const char* what);

void bind_buffers(nb::class_<Manager>& cls);
void bind_events(nb::module_& m);
/// KvIndexer, KvRouter, KvEventFeed and their values (router.cpp).
void bind_router(nb::module_& m);
void bind_disk_pool_reader(nb::module_& m);
/// HybridKvBlockManager, HybridOnboardHandle and HybridProbe (hybrid_kv_block_manager.cpp);
/// after bind_groups(), whose PrefixHitG1 and HybridRequestG1 it hands out and takes.
void bind_hybrid_kv_block_manager(nb::module_& m);
/// KvBlockManager.stats() as a dict: every field of every struct of
/// kv_block_manager_stats.h, by the field's C++ name (stats.cpp).
[[nodiscard]] nb::dict stats_dict(const KvBlockManagerStats& s);
/// KvBlockManager.disk_recovery() as a dict (scanned, recovered, discarded, reset_reason,
/// bytes_read, elapsed_s), or None (stats.cpp).
[[nodiscard]] nb::object recovery_dict(const std::optional<RecoverySummary>& r);
void bind_event_methods(nb::class_<Manager>& cls);
/// OnboardPlan (onboard_plan.cpp).
void bind_onboard_plan(nb::module_& m);
/// KvBlockManager.transfer_costs() as a dict (onboard_plan.cpp).
[[nodiscard]] nb::dict transfer_costs_dict(const TransferCosts& c);
/// The options of onboard / plan_onboard: mode by name, deadline in seconds.
[[nodiscard]] OnboardOptions onboard_options(const std::string& mode,
                                             std::optional<double> deadline_s);
/// A KvEventPublisher whose batches `collector` keeps for take_events() and, given a
/// ZeroMQ PUB endpoint, also publishes there (events.cpp).
struct EventTap {
  std::shared_ptr<events::KvEventPublisher> publisher;
  std::shared_ptr<EventCollector> collector;
};
/// Returns a new tap; `endpoint` empty keeps the events for take_events() only.
[[nodiscard]] EventTap make_event_tap(const std::string& endpoint);
/// Flushes the tap's publisher and returns every event it kept since the last call
/// (call with the GIL released).
[[nodiscard]] std::vector<events::KvEvent> take_events(const EventTap& tap);
/// Attaches an event publisher to `config` (listeners on G1, G2, G3) and
/// stores it in `manager`: `endpoint` empty keeps events for take_events(),
/// else they are published on that ZeroMQ PUB endpoint as well.
void attach_events(Manager& manager, KvBlockManagerConfig& config, const std::string& endpoint);

}  // namespace kvbm::python
