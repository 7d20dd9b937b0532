// src/python/manager.cpp: KvBlockManager in Python.
//
// The Python object wraps a Manager (python/bindings.h). Building it, every
// copy, onboarding, probe (a G4 round trip), drain and shutdown release the
// GIL. The methods follow the C++ facade (kvbm/kv_block_manager.h); hashes
// are sequence hash values (uint64 arrays or lists), chained by default (one
// sequence from position 0), flat with chained=False (bindings.h).

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "kvbm/kv_block_manager.h"
#include "python/array.h"
#include "python/bindings.h"
#include "python/integers.h"

namespace kvbm::python {

namespace {

using namespace nb::literals;

/// Moves the C++ blocks out of their Python objects (left empty), after checking
/// every one is a live block of `pool` (on a failure nothing is moved).
template <TierMarker T>
std::vector<MutableBlock<T>> take_all(const BlockManager<T>& pool,
                                      const std::vector<MutableBlock<T>*>& blocks) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto* b = blocks[i];
    KVBM_CHECK(b != nullptr && b->valid(), "register: block ", i,
               " was released or already registered");
    KVBM_CHECK(pool.owns(*b), "register: block ", i, " (id ", b->block_id(),
               ") belongs to another KvBlockManager; register blocks with the manager that "
               "allocated them");
  }
  std::vector<MutableBlock<T>> out;
  out.reserve(blocks.size());
  for (auto* b : blocks) out.push_back(std::move(*b));
  return out;
}

/// The hashes of the last `n` positions of a chained sequence (all of them
/// when the sequence has `n`); a flat list must have one hash per block.
std::vector<SequenceHash> suffix_of(std::vector<SequenceHash> hashes, std::size_t n, bool chained) {
  if (!chained || hashes.size() <= n) return hashes;
  hashes.erase(hashes.begin(), hashes.end() - static_cast<std::ptrdiff_t>(n));
  return hashes;
}

/// Stages every block under its hash; on a failure puts every block back and throws.
template <TierMarker T>
std::vector<CompleteBlock<T>> stage_all(std::vector<MutableBlock<T>>&& blocks,
                                        const std::vector<SequenceHash>& hashes,
                                        std::uint32_t block_size,
                                        const std::vector<MutableBlock<T>*>& owners) {
  KVBM_CHECK(blocks.size() == hashes.size(), "register: ", blocks.size(), " blocks but ",
             hashes.size(), " hashes; give one hash per block");
  std::vector<CompleteBlock<T>> out;
  out.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto staged = std::move(blocks[i]).stage(hashes[i], block_size);
    if (!staged.ok()) {
      std::string reason = staged.error().reason;
      *owners[i] = std::move(staged.error().block);
      for (std::size_t j = i + 1; j < blocks.size(); ++j) *owners[j] = std::move(blocks[j]);
      for (std::size_t j = 0; j < out.size(); ++j) {  // a staged block cannot go back: it is freed
        CompleteBlock<T> dropped = std::move(out[j]);
      }
      KVBM_CHECK(false, "register: block ", i, " could not be staged: ", reason);
    }
    out.push_back(std::move(staged).value());
  }
  return out;
}

template <TierMarker T>
nb::object allocate(KvBlockManager& kv, std::size_t count) {
  BlockManager<T>& pool = require_pool<T>(kv, "allocate");
  std::optional<std::vector<MutableBlock<T>>> blocks;
  {
    nb::gil_scoped_release release;  // an on-eviction boundary waits for its copy here
    blocks = pool.allocate_blocks(count);
  }
  if (!blocks) return nb::none();
  return nb::cast(std::move(*blocks));
}

template <TierMarker T>
std::vector<ImmutableBlock<T>> match(KvBlockManager& kv, nb::handle h, bool chained) {
  const auto hashes = hashes_of(h, chained, "match: hashes");
  BlockManager<T>& pool = require_pool<T>(kv, "match");
  nb::gil_scoped_release release;
  return pool.match_blocks(hashes);
}

/// The constructor: builds every tier, optionally with KV events.
void bind_init(nb::class_<Manager>& cls) {
  cls.def(
      "__init__",
      [](Manager* self, KvBlockManagerConfig config,
         const std::variant<bool, std::string>& events) {
        auto* made = new (self) Manager();
        try {
          if (const auto* on = std::get_if<bool>(&events); on != nullptr && *on) {
            attach_events(*made, config, "");
          } else if (const auto* endpoint = std::get_if<std::string>(&events)) {
            attach_events(*made, config, *endpoint);
          }
          nb::gil_scoped_release release;  // a persistent G3 is recovered here
          made->open(KvBlockManager::build(std::move(config)));
        } catch (...) {
          made->~Manager();
          throw;
        }
      },
      "config"_a, "events"_a = false,
      "Builds every tier (throws kvbm.UsageError naming a bad option). events=True keeps KV "
      "events for take_events(); a ZeroMQ endpoint string publishes them there as well.");
}

/// The manager's geometry and tiers, read-only.
void bind_properties(nb::class_<Manager>& cls) {
  cls.def_prop_ro(
         "block_size", [](const Manager& m) { return m.lease()->block_size(); }, "tokens per block")
      .def_prop_ro("block_bytes", [](const Manager& m) { return m.lease()->block_bytes(); })
      .def_prop_ro(
          "device_emulated", [](const Manager& m) { return m.lease()->device_emulated(); },
          "True when G1 is host memory standing in for a GPU")
      .def_prop_ro("has_host", [](const Manager& m) { return m.lease()->host() != nullptr; })
      .def_prop_ro("has_disk", [](const Manager& m) { return m.lease()->disk() != nullptr; })
      .def_prop_ro("has_remote", [](const Manager& m) { return m.lease()->has_tier(TierId::kG4); })
      .def_prop_ro(
          "config", [](const Manager& m) { return m.lease()->config(); }, "a copy of the config");
}

/// Blocks: allocating, registering and offloading them.
void bind_block_methods(nb::class_<Manager>& cls) {
  cls.def(
         "allocate",
         [](Manager& m, std::size_t count, TierId tier) {
           const auto lease = m.lease();
           KvBlockManager& kv = *lease;
           if (tier == TierId::kG1) return allocate<G1>(kv, count);
           KVBM_CHECK(tier == TierId::kG2, "allocate: blocks are allocated in G1 or G2, not ",
                      to_string(tier));
           return allocate<G2>(kv, count);
         },
         "count"_a, "tier"_a = TierId::kG1,
         "Returns `count` fresh MutableBlocks of G1 or G2, or None when the pool cannot give them "
         "all (nothing is taken then).")
      .def(
          "register",
          [](Manager& m, const std::vector<MutableBlock<G1>*>& blocks, nb::handle h, bool chained) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            auto complete = stage_all<G1>(
                take_all<G1>(kv.device(), blocks),
                suffix_of(hashes_of(h, chained, "register: hashes"), blocks.size(), chained),
                kv.block_size(), blocks);
            nb::gil_scoped_release release;
            return kv.register_blocks(std::move(complete));
          },
          "blocks"_a, "hashes"_a, "chained"_a = true,
          "Stages each G1 block under its hash and registers them (offloaded to G2 in "
          "write-through mode); returns the ImmutableBlocks. The MutableBlocks are left empty. "
          "With chained=True, `hashes` may be the whole sequence: the blocks are its last "
          "len(blocks) positions (e.g. what a request computed after its cached prefix).")
      .def(
          "register",
          [](Manager& m, const std::vector<MutableBlock<G2>*>& blocks, nb::handle h, bool chained) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            BlockManager<G2>& pool = require_pool<G2>(kv, "register");
            auto complete = stage_all<G2>(
                take_all<G2>(pool, blocks),
                suffix_of(hashes_of(h, chained, "register: hashes"), blocks.size(), chained),
                kv.block_size(), blocks);
            nb::gil_scoped_release release;
            return pool.register_blocks(std::move(complete));
          },
          "blocks"_a, "hashes"_a, "chained"_a = true,
          "Registers G2 blocks (written through to G3 and G4 as the config says); `hashes` as "
          "for G1 blocks.")
      .def(
          "offload",
          [](Manager& m, const std::vector<ImmutableBlock<G1>>& blocks) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            nb::gil_scoped_release release;
            return kv.offload(blocks);
          },
          "blocks"_a,
          "Enqueues registered G1 blocks for offload to G2 (and on down); returns the handle.");
}

/// Onboarding and asking what onboarding would find.
void bind_onboard_methods(nb::class_<Manager>& cls) {
  cls.def(
         "onboard",
         [](Manager& m, nb::handle h, bool chained, std::optional<std::string> mode,
            std::optional<double> deadline_s) {
           const auto lease = m.lease();
           KvBlockManager& kv = *lease;
           const auto hashes = hashes_of(h, chained, "onboard: hashes");
           if (!mode && !deadline_s) {
             nb::gil_scoped_release release;
             return kv.onboard(hashes);
           }
           const OnboardOptions o = onboard_options(mode.value_or("auto"), deadline_s);
           nb::gil_scoped_release release;
           return kv.onboard(hashes, o);
         },
         "hashes"_a, "chained"_a = true, "mode"_a = nb::none(), "deadline"_a = nb::none(),
         "Starts bringing the longest prefix held in any tier into G1; returns an OnboardHandle. "
         "With mode ('auto', 'load_all', 'recompute_all') or deadline (seconds; mode then "
         "defaults to 'auto'), only the plan's cut is loaded and handle.plan says what it was.")
      .def(
          "plan_onboard",
          [](const Manager& m, nb::handle h, bool chained, const std::string& mode,
             std::optional<double> deadline_s) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            const auto hashes = hashes_of(h, chained, "plan_onboard: hashes");
            const OnboardOptions o = onboard_options(mode, deadline_s);
            nb::gil_scoped_release release;  // G4: one round trip
            return kv.plan_onboard(hashes, o);
          },
          "hashes"_a, "chained"_a = true, "mode"_a = "auto", "deadline"_a = nb::none(),
          "The OnboardPlan onboard(hashes, mode=, deadline=) would follow now; takes and "
          "copies nothing.")
      .def(
          "transfer_costs",
          [](const Manager& m) {
            const auto lease = m.lease();
            const KvBlockManager& kv = *lease;
            TransferCosts c;
            {
              nb::gil_scoped_release release;
              c = kv.transfer_costs();
            }
            return transfer_costs_dict(c);
          },
          "What each copy path costs as measured, and the prefill estimate, as a dict.")
      .def(
          "report_prefill",
          [](Manager& m, std::size_t tokens, double seconds) {
            const auto lease = m.lease();
            KVBM_CHECK(seconds >= 0, "report_prefill: ", seconds, " s is negative");
            lease->report_prefill(tokens, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::duration<double>(seconds)));
          },
          "tokens"_a, "seconds"_a,
          "The engine computed `tokens` tokens of prefill in `seconds`: feeds the recompute "
          "estimate onboarding plans weigh loads against.")
      .def(
          "probe",
          [](const Manager& m, nb::handle h, bool chained) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            const auto hashes = hashes_of(h, chained, "probe: hashes");
            nb::gil_scoped_release release;  // G4: one round trip
            return kv.probe(hashes);
          },
          "hashes"_a, "chained"_a = true, "What onboard(hashes) would find now, taking nothing.");
}

/// What the local tiers hold: presence, prefix matches, recency.
void bind_lookup_methods(nb::class_<Manager>& cls) {
  cls.def(
         "present",
         [](const Manager& m, nb::handle h, bool chained) {
           const auto lease = m.lease();
           KvBlockManager& kv = *lease;
           const auto hashes = hashes_of(h, chained, "present: hashes");
           std::vector<std::uint8_t> out(hashes.size(), 0);
           {
             nb::gil_scoped_release release;
             const auto& reg = *kv.device().registry();
             const auto g1 = reg.presence<G1>(hashes);
             const auto g2 =
                 kv.host() != nullptr ? reg.presence<G2>(hashes) : std::vector<bool>(hashes.size());
             const auto g3 =
                 kv.disk() != nullptr ? reg.presence<G3>(hashes) : std::vector<bool>(hashes.size());
             for (std::size_t i = 0; i < hashes.size(); ++i) {
               out[i] = g1[i] ? 1 : g2[i] ? 2 : g3[i] ? 3 : 0;
             }
           }
           return to_numpy(std::move(out));
         },
         "hashes"_a, "chained"_a = true,
         "For each hash, the fastest local tier holding it (1 G1, 2 G2, 3 G3) or 0; no G4 round "
         "trip, nothing taken.")
      .def(
          "match",
          [](Manager& m, nb::handle h, TierId tier, bool chained) -> nb::object {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            switch (tier) {
              case TierId::kG1:
                return nb::cast(match<G1>(kv, h, chained));
              case TierId::kG2:
                return nb::cast(match<G2>(kv, h, chained));
              case TierId::kG3:
                return nb::cast(match<G3>(kv, h, chained));
              default:
                KVBM_CHECK(false, "match: G4 has no pool; use probe() or onboard()");
            }
            return nb::none();
          },
          "hashes"_a, "tier"_a = TierId::kG1, "chained"_a = true,
          "Strong handles on the leading blocks of `hashes` that the tier holds (prefix match).")
      .def(
          "touch",
          [](Manager& m, nb::handle h, bool chained) {
            const auto lease = m.lease();
            KvBlockManager& kv = *lease;
            const auto hashes = hashes_of(h, chained, "touch: hashes");
            nb::gil_scoped_release release;
            (void)kv.device().refresh(hashes);
            if (auto* p = kv.host()) (void)p->refresh(hashes);
            if (auto* p = kv.disk()) (void)p->refresh(hashes);
          },
          "hashes"_a, "chained"_a = true,
          "Marks the blocks most recently used in every local tier that holds them.");
}

/// Draining, shutting down and closing (also as a context manager).
void bind_lifecycle_methods(nb::class_<Manager>& cls) {
  cls.def(
         "drain", [](Manager& m) { m.lease()->drain(); }, nb::call_guard<nb::gil_scoped_release>(),
         "Waits until every offload and onboarding started so far has ended (G4 included).")
      .def(
          "shutdown", [](Manager& m) { m.lease()->shutdown(); },
          nb::call_guard<nb::gil_scoped_release>(),
          "Stops the pipelines and leaves every pool balanced; idempotent.")
      .def(
          "close", [](Manager& m) { m.close(); },
          "Waits for the calls in flight on other threads and for every write started (drain()), "
          "shuts the manager down and lets it go; later calls raise kvbm.UsageError. Handles, "
          "views and onboardings outliving it "
          "stay safe to use and to drop. Idempotent.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](Manager& m, nb::args) { m.close(); },
          "Closes the manager (close()) at the end of a with block.");
}

/// Audit, counters, G3 recovery and metrics.
void bind_stats_methods(nb::class_<Manager>& cls) {
  cls.def(
         "audit", [](const Manager& m) { return m.lease()->audit(); },
         nb::call_guard<nb::gil_scoped_release>(),
         "'' when every pool balances, else what is wrong.")
      .def(
          "stats",
          [](const Manager& m) {
            KvBlockManagerStats s;
            {
              nb::gil_scoped_release release;
              s = m.lease()->stats();
            }
            return stats_dict(s);
          },
          "Per tier, boundary, onboarding and G4: the library's own counters, as a dict.")
      .def(
          "disk_recovery",
          [](const Manager& m) { return recovery_dict(m.lease()->disk_recovery()); },
          "What build() recovered from a persistent G3 (dict), or None.")
      .def(
          "metrics_text",
          [](const Manager& m) {
            const auto lease = m.lease();  // held while Collect() runs without the GIL
            const auto& registry = lease->metrics_registry();
            std::vector<prometheus::MetricFamily> families;
            {
              nb::gil_scoped_release release;
              families = registry->Collect();
            }
            return prometheus::TextSerializer().Serialize(families);
          },
          "Every series of the manager in Prometheus text exposition format.");
}

}  // namespace

Manager::Lease Manager::lease() const {
  std::lock_guard lock(mu_);
  KVBM_CHECK(!closed_ && kv_ != nullptr, "KvBlockManager: the manager was closed; build a new one");
  ++in_flight_;
  return Lease(this, kv_);
}

Manager::Lease::~Lease() {
  std::lock_guard lock(owner_->mu_);
  if (--owner_->in_flight_ == 0) owner_->idle_.notify_all();
}

void Manager::open(std::shared_ptr<KvBlockManager> kv) {
  std::lock_guard lock(mu_);
  kv_ = std::move(kv);
}

void Manager::close() {
  nb::gil_scoped_release release;  // the calls in flight may need the GIL to end
  std::shared_ptr<KvBlockManager> kv;
  {
    std::unique_lock lock(mu_);
    closed_ = true;
    idle_.wait(lock, [this] { return in_flight_ == 0; });
    kv = std::move(kv_);
  }
  if (kv) {
    kv->drain();  // what the caller stored reaches every tier, as a file's close flushes it
    kv->shutdown();
  }
  kv.reset();  // freed here unless an array still views its memory
}

std::vector<SequenceHash> hashes_of(nb::handle obj, bool chained, const char* what) {
  return make_hashes(integers_of<std::uint64_t>(obj, what), chained);
}

std::vector<SequenceHash> make_hashes(std::span<const std::uint64_t> values, bool chained) {
  std::vector<SequenceHash> out;
  out.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!chained || i == 0) {
      out.emplace_back(values[i], std::nullopt, 0);
    } else {
      out.emplace_back(values[i], values[i - 1], static_cast<std::uint32_t>(i));
    }
  }
  return out;
}

void bind_manager(nb::module_& mod) {
  auto cls =
      nb::class_<Manager>(mod, "KvBlockManager",
                          "The facade over G1-G4 (kvbm/kv_block_manager.h); see docs/python.md.");
  bind_init(cls);
  bind_properties(cls);
  bind_block_methods(cls);
  bind_onboard_methods(cls);
  bind_lookup_methods(cls);
  bind_lifecycle_methods(cls);
  bind_stats_methods(cls);
  bind_buffers(cls);
  bind_event_methods(cls);
}

}  // namespace kvbm::python
