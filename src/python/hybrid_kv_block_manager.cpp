// src/python/hybrid_kv_block_manager.cpp: HybridKvBlockManager in Python.
//
// kvbm/hybrid/hybrid_kv_block_manager.h for a hybrid model: one KvBlockManager
// per KV cache group over G1-G4, the groups' rules over their G1 pools. The
// request lifecycle is HybridBlockManagerG1's, with the same PrefixHitG1 and
// HybridRequestG1 (hybrid_block_manager.cpp), as methods of this manager:
//
//     m = kvbm.HybridKvBlockManager(base_config, groups, group_blocks=..., events=...)
//     _, hashes = kvbm.hash_tokens(tokens, m.hash_block_size)   # chained values
//     h = m.onboard(hashes, len(tokens) - 1)    # per group only what the cut reads
//     r = m.start_request(h.take_hit())         # h.counts(g): per group, from which tier
//     m.allocate(r, end); m.write(r, g, first, rows); m.commit(r, hashes, end)
//     m.finish(r, hashes); m.drain()            # every group's blocks in G2/G3/G4
//     assert m.audit() == ""
//
// Bytes cross per group as in buffers.cpp (hybrid_kv_block_bytes.cpp): write()
// copies rows into the blocks a request is computing, read() copies a hit's or
// a request's blocks of one group out. Every hit and request handed in is
// checked against this manager's pools (a hit's blocks, a request's blocks,
// HybridRequest::held_in). Calls that may wait (building with a
// persistent G3, onboarding, probing G4, allocating past an on-eviction
// boundary, drain, close) release the GIL. After close() every call raises
// kvbm.UsageError; hits, requests and onboardings outliving it stay safe.

#include "kvbm/hybrid/hybrid_kv_block_manager.h"

#include <cstddef>
#include <cstdint>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "python/bindings.h"
#include "python/groups.h"
#include "python/hybrid_kv_block_manager.h"

namespace kvbm::python {

namespace hybrid_facade {

using namespace nb::literals;

void check_group(const HybridKvBlockManager& kv, std::size_t g, const char* call) {
  KVBM_CHECK(g < kv.group_count(), "HybridKvBlockManager.", call, ": group ", g, " of ",
             kv.group_count(), "; groups are 0..", kv.group_count() - 1);
}

/// Every block of `hit` is one of group g's G1 pool, for every group.
void check_hit(HybridKvBlockManager& kv, const Hit& hit, const char* call) {
  KVBM_CHECK(hit.blocks.size() == kv.group_count(), "HybridKvBlockManager.", call, ": the hit has ",
             hit.blocks.size(), " groups, the manager ", kv.group_count(),
             "; pass a hit of this manager (onboard().take_hit())");
  for (std::size_t g = 0; g < hit.blocks.size(); ++g) {
    for (const auto& b : hit.blocks[g]) {
      KVBM_CHECK(b.valid(), "HybridKvBlockManager.", call, ": group ", g,
                 " of the hit holds a released block; the hit was used already");
      KVBM_CHECK(kv.core().pool(g).owns(b), "HybridKvBlockManager.", call, ": block ", b.block_id(),
                 " of group ", g,
                 " belongs to another manager's pool (or another group's); pass a hit this "
                 "manager's onboard() returned");
    }
  }
}

/// `r` has this manager's groups, and every block it holds is one of the group's G1 pool.
void check_request(HybridKvBlockManager& kv, const Request& r, const char* call) {
  KVBM_CHECK(r.group_count() == kv.group_count(), "HybridKvBlockManager.", call,
             ": the request has ", r.group_count(), " groups, the manager ", kv.group_count(),
             r.group_count() == 0 ? " (the request was finished)" : "",
             "; pass a request this manager's start_request() returned");
  for (std::size_t g = 0; g < r.group_count(); ++g) {
    KVBM_CHECK(r.held_in(g, kv.core().pool(g)), "HybridKvBlockManager.", call,
               ": the request holds blocks of group ", g,
               " from another manager's pool; pass a request this manager's start_request() "
               "returned");
  }
}

/// One row per group: a dict {TierId: blocks} or a list indexed by tier (G1, G2, G3).
std::vector<TierArray<std::size_t>> group_blocks_of(nb::handle rows, std::size_t groups) {
  std::vector<TierArray<std::size_t>> out;
  if (rows.is_none()) return out;
  for (nb::handle row : rows) {
    TierArray<std::size_t> a{};
    if (nb::isinstance<nb::dict>(row)) {
      for (auto [k, v] : nb::borrow<nb::dict>(row))
        a[nb::cast<TierId>(k)] = nb::cast<std::size_t>(v);
    } else {
      const auto v = nb::cast<std::vector<std::size_t>>(row);
      KVBM_CHECK(v.size() <= kTierCount, "HybridKvBlockManager: group_blocks row ", out.size(),
                 " has ", v.size(), " entries; give blocks of G1, G2, G3 (or a dict by TierId)");
      for (std::size_t i = 0; i < v.size(); ++i) a[kTierIds[i]] = v[i];
    }
    KVBM_CHECK(a[TierId::kG4] == 0, "HybridKvBlockManager: group_blocks row ", out.size(),
               " sizes G4, which has no pool; give blocks of G1, G2 and G3 only");
    out.push_back(a);
  }
  KVBM_CHECK(out.size() == groups, "HybridKvBlockManager: group_blocks has ", out.size(),
             " rows for ", groups, " groups; give one per group, or None");
  return out;
}

void bind_probe_and_handle(nb::module_& m) {
  nb::class_<HybridProbe>(m, "HybridProbe",
                          "What HybridKvBlockManager.probe() found: the cut and, per group, the "
                          "blocks it reads and the tiers they are in (nothing taken).")
      .def_ro("tokens", &HybridProbe::tokens, "the cut every group can serve")
      .def_prop_ro("ranges", [](const HybridProbe& p) { return ranges_of(p.ranges); })
      .def_prop_ro(
          "found",
          [](const HybridProbe& p) {
            std::vector<OnboardCounts> out;
            for (const auto& f : p.found) out.push_back(OnboardCounts{.found = f});
            return out;
          },
          "per group, the blocks the cut reads by tier (OnboardCounts: device, host, disk, "
          "remote)");
  using H = HybridOnboardHandle;
  nb::class_<H>(m, "HybridOnboardHandle",
                "One hybrid onboarding (HybridKvBlockManager.onboard): every group's part of the "
                "cut; dropping it releases every block not taken.")
      .def_prop_ro("group_count", &H::group_count)
      .def_prop_ro("planned_tokens", &H::planned_tokens, "the cut the lookup found")
      .def(
          "planned_range", [](const H& h, std::size_t g) { return pair_of(h.planned_range(g)); },
          "group"_a, "The block indices [first, last) of group g the cut reads.")
      .def("wait", &H::wait, nb::call_guard<nb::gil_scoped_release>(),
           "Waits for every group's onboarding.")
      .def("counts", &H::counts, "group"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Waits, then returns group g's OnboardCounts (per tier the blocks came from).")
      .def("take_hit", &H::take_hit, nb::call_guard<nb::gil_scoped_release>(),
           "Waits, then returns the PrefixHitG1 for start_request() (the cut shrunk to what "
           "arrived in every group); once, later calls return an empty hit.")
      .def("cancel", &H::cancel, nb::call_guard<nb::gil_scoped_release>(),
           "Cancels every group's onboarding; the hit is empty afterwards.");
}

void bind_init(nb::class_<HybridManager>& cls) {
  cls.def(
      "__init__",
      [](HybridManager* self, const KvBlockManagerConfig& base,
         const std::vector<KvCacheGroupSpec>& groups, std::optional<SnapshotPolicy> policy,
         nb::handle group_blocks, const std::variant<bool, std::string>& events) {
        auto* made = new (self) HybridManager();
        try {
          HybridKvBlockManagerConfig c;
          c.base = base;
          c.groups = groups;
          c.snapshot_policy = policy.value_or(SnapshotPolicy::every_block());
          c.group_blocks = group_blocks_of(group_blocks, groups.size());
          if (const auto* on = std::get_if<bool>(&events); on != nullptr && *on) {
            made->events = make_event_tap("");
          } else if (const auto* endpoint = std::get_if<std::string>(&events)) {
            made->events = make_event_tap(*endpoint);
          }
          c.events = made->events.publisher;
          nb::gil_scoped_release release;  // a persistent G3 per group is recovered here
          made->open(HybridKvBlockManager::build(std::move(c)));
        } catch (...) {
          made->~HybridManager();
          throw;
        }
      },
      "config"_a, "groups"_a, "snapshot_policy"_a = nb::none(), "group_blocks"_a = nb::none(),
      "events"_a = false,
      "Builds every group's KvBlockManager from the base config (its tiers split among the "
      "groups, or group_blocks: one row per group, a dict {TierId: blocks} or [G1, G2, G3]); "
      "G3 in <disk_directory>/group-<id>-<kind>. events=True keeps every group's KV events "
      "(naming the group) for take_events(); a ZeroMQ endpoint publishes them there too. "
      "Raises kvbm.UsageError naming a bad option.");
}

void bind_properties(nb::class_<HybridManager>& cls) {
  cls.def_prop_ro("group_count", [](const HybridManager& m) { return m.get()->group_count(); })
      .def_prop_ro("groups",
                   [](const HybridManager& m) {
                     const auto kv = m.get();
                     std::vector<KvCacheGroupSpec> out;
                     for (std::size_t g = 0; g < kv->group_count(); ++g) out.push_back(kv->spec(g));
                     return out;
                   })
      .def_prop_ro(
          "hash_block_size", [](const HybridManager& m) { return m.get()->hash_block_size(); },
          "tokens per hashed block (gcd of the groups' block sizes)")
      .def_prop_ro(
          "alignment_tokens",
          [](const HybridManager& m) { return m.get()->core().alignment_tokens(); },
          "every cut's multiple (lcm)")
      .def(
          "block_bytes",
          [](const HybridManager& m, std::size_t g) {
            const auto kv = m.get();
            check_group(*kv, g, "block_bytes");
            return kv->group(g).block_bytes();
          },
          "group"_a, "Bytes of one block of group g (a row of write() and read()).")
      .def(
          "group_hashes",
          [](const HybridManager& m, std::size_t g, nb::handle hashes, std::size_t first,
             std::optional<std::size_t> last) {
            const auto kv = m.get();
            check_group(*kv, g, "group_hashes");
            const auto seq = hashes_of(hashes, true, "group_hashes: hashes");
            std::vector<std::uint64_t> out;
            for (const auto& k : kv->core().group_hashes(g, seq, first, last.value_or(SIZE_MAX))) {
              out.push_back(k.value());
            }
            return out;
          },
          "group"_a, "hashes"_a, "first"_a = 0, "last"_a = nb::none(),
          "Group g's keys of its blocks [first, last) of the sequence (what every tier of "
          "the group holds them under).");
}

void bind_lookups(nb::class_<HybridManager>& cls) {
  cls.def(
         "probe",
         [](const HybridManager& m, nb::handle hashes, std::optional<std::size_t> max_tokens) {
           const auto kv = m.get();
           const auto seq = hashes_of(hashes, true, "probe: hashes");
           nb::gil_scoped_release release;  // G4: one round trip per group
           return kv->probe(seq, max_tokens.value_or(SIZE_MAX));
         },
         "hashes"_a, "max_tokens"_a = nb::none(),
         "The longest cut at or below max_tokens every group can serve from any tier, taking "
         "nothing (a HybridProbe).")
      .def(
          "onboard",
          [](HybridManager& m, nb::handle hashes, std::optional<std::size_t> max_tokens) {
            const auto kv = m.get();
            const auto seq = hashes_of(hashes, true, "onboard: hashes");
            nb::gil_scoped_release release;
            return kv->onboard(seq, max_tokens.value_or(SIZE_MAX));
          },
          "hashes"_a, "max_tokens"_a = nb::none(),
          "Finds the cut as probe() does and onboards, per group, only the blocks it reads (a "
          "window's tail, one snapshot, a chunk's head) into that group's G1; returns a "
          "HybridOnboardHandle at once. Pass len(prompt) - 1 to leave a token to compute.");
}

void bind_requests(nb::class_<HybridManager>& cls) {
  cls.def(
         "start_request",
         [](HybridManager& m, Hit& hit) {
           const auto kv = m.get();
           check_hit(*kv, hit, "start_request");
           return kv->core().start_request(std::move(hit));
         },
         "hit"_a, "Starts a request from a hit of this manager (its blocks move into the request).")
      .def(
          "start_request", [](HybridManager& m) { return m.get()->core().start_request(); },
          "Starts a request with no prefix hit.")
      .def(
          "allocate",
          [](HybridManager& m, Request& r, std::size_t total_tokens) {
            const auto kv = m.get();
            check_request(*kv, r, "allocate");
            nb::gil_scoped_release release;  // an on-eviction boundary waits for its copy
            return kv->core().allocate(r, total_tokens);
          },
          "request"_a, "total_tokens"_a,
          "Room for total_tokens in every group or in none; False when a group's G1 is short.")
      .def(
          "commit",
          [](HybridManager& m, Request& r, nb::handle hashes, std::size_t computed) {
            const auto kv = m.get();
            check_request(*kv, r, "commit");
            const auto seq = hashes_of(hashes, true, "commit: hashes");
            nb::gil_scoped_release release;
            kv->core().commit(r, seq, computed);
          },
          "request"_a, "hashes"_a, "computed_tokens"_a,
          "Records computed_tokens and registers the blocks that became full; each group's "
          "G1 offloads them down its own tiers.")
      .def(
          "release_out_of_reach",
          [](HybridManager& m, Request& r, std::size_t computed) {
            const auto kv = m.get();
            check_request(*kv, r, "release_out_of_reach");
            kv->core().release_out_of_reach(r, computed);
          },
          "request"_a, "computed_tokens"_a,
          "Releases, per group, the blocks the request no longer reads.")
      .def(
          "finish",
          [](HybridManager& m, Request& r, nb::handle hashes) {
            const auto kv = m.get();
            check_request(*kv, r, "finish");
            if (hashes.is_none()) {
              kv->core().finish(r);
              return;
            }
            const auto seq = hashes_of(hashes, true, "finish: hashes");
            nb::gil_scoped_release release;
            kv->core().finish(r, seq);
          },
          "request"_a, "hashes"_a = nb::none(),
          "Ends the request (with hashes: registers the request_end() snapshot) and releases "
          "every block, the last first.");
}

/// Pool counts of group g's tier as a dict (PoolCounts' fields).
nb::dict pool_counts_dict(const PoolCounts& c) {
  nb::dict d;
  d["total"] = c.total;
  d["reset"] = c.reset;
  d["inactive"] = c.inactive;
  d["evictable"] = c.evictable;
  d["in_use"] = c.in_use;
  d["mutable_out"] = c.mutable_out;
  d["immutable_out"] = c.immutable_out;
  d["balanced"] = c.balanced();
  return d;
}

void bind_accounting(nb::class_<HybridManager>& cls) {
  cls.def(
         "audit",
         [](const HybridManager& m, std::optional<std::size_t> g) {
           const auto kv = m.get();
           nb::gil_scoped_release release;
           if (!g) return kv->audit();
           check_group(*kv, *g, "audit");
           std::string out = kv->core().pool(*g).audit();
           const std::string tiers = kv->group(*g).audit();
           if (!tiers.empty()) out += (out.empty() ? "" : "; ") + tiers;
           return out;
         },
         "group"_a = nb::none(),
         "'' when every pool of every group (or of group `group`) is consistent and balanced "
         "(reset + inactive + in use == total), else what is wrong.")
      .def(
          "pool_counts",
          [](const HybridManager& m, std::size_t g, TierId tier) {
            const auto kv = m.get();
            check_group(*kv, g, "pool_counts");
            for (const auto& t : kv->group(g).stats().tiers) {
              if (t.tier == tier && t.pooled()) return pool_counts_dict(t.blocks);
            }
            KVBM_CHECK(false, "HybridKvBlockManager.pool_counts: group ", g, " has no ",
                       to_string(tier), " pool (G4 has none; configure G2/G3 in the base config)");
            return nb::dict();
          },
          "group"_a, "tier"_a = TierId::kG1,
          "Group g's pool in `tier`: total, reset, inactive, evictable, in_use, ... and "
          "balanced (reset + inactive + in_use == total).")
      .def(
          "stats",
          [](const HybridManager& m) {
            std::vector<KvBlockManagerStats> s;
            {
              nb::gil_scoped_release release;
              s = m.get()->stats();
            }
            nb::list out;
            for (const auto& g : s) out.append(stats_dict(g));
            return out;
          },
          "Per group, KvBlockManager.stats()'s dict: per tier, boundary, copy path, onboarding.")
      .def(
          "disk_recovery",
          [](const HybridManager& m, std::size_t g) {
            const auto kv = m.get();
            check_group(*kv, g, "disk_recovery");
            return recovery_dict(kv->group(g).disk_recovery());
          },
          "group"_a, "What build() recovered from group g's persistent G3 (dict), or None.")
      .def(
          "take_events",
          [](const HybridManager& m) {
            (void)m.get();  // raises after close()
            KVBM_CHECK(m.events.publisher != nullptr,
                       "take_events: the manager was built without events; pass events=True");
            nb::gil_scoped_release release;
            return take_events(m.events);
          },
          "Every KV event of every group since the last call, in order; each names its group "
          "(group_idx, kv_cache_spec_kind).");
}

void bind_lifecycle(nb::class_<HybridManager>& cls) {
  cls.def(
         "drain", [](const HybridManager& m) { m.get()->drain(); },
         nb::call_guard<nb::gil_scoped_release>(),
         "Waits until every group's offloads and onboardings started so far have ended.")
      .def(
          "close", [](HybridManager& m) { m.close(); },
          "Drains, shuts every group's manager down and lets it go; later calls raise "
          "kvbm.UsageError. Hits, requests and onboardings outliving it stay safe. Idempotent.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](HybridManager& m, nb::args) { m.close(); },
          "Closes the manager at the end of a with block.");
}

}  // namespace hybrid_facade

void bind_hybrid_kv_block_manager(nb::module_& m) {
  using namespace hybrid_facade;
  bind_probe_and_handle(m);
  nb::class_<HybridManager> cls(
      m, "HybridKvBlockManager",
      "A hybrid model's KV cache over G1-G4: one KvBlockManager per KV cache group "
      "(kvbm/hybrid/hybrid_kv_block_manager.h); see docs/python.md.");
  bind_init(cls);
  bind_properties(cls);
  bind_lookups(cls);
  bind_requests(cls);
  bind_bytes(cls);
  bind_accounting(cls);
  bind_lifecycle(cls);
}

}  // namespace kvbm::python
