// src/python/router.cpp: the cluster index, the router and the ZeroMQ feed
// (kvbm/router/) in Python: kvbm.KvIndexer, kvbm.KvRouter, kvbm.KvEventFeed,
// and the values they answer with (kvbm.InstanceOverlap, kvbm.RouteDecision).
//
// A KvRouter and a KvEventFeed keep their KvIndexer alive (nanobind
// keep_alive), so the index outlives both whatever Python drops first. Hashes
// cross as lists or integer arrays (integers.h); per-tier counts and costs as
// dicts keyed "G1" .. "G4"; states and stats as dicts by the C++ field names.
// Every call that takes the index's or the router's lock, or waits on the
// feed, releases the GIL (the feed's thread never calls into Python).

#include <chrono>
#include <cstdint>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvbm/router/kv_event_feed.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "python/bindings.h"
#include "python/integers.h"

namespace kvbm::python {
namespace {

using namespace nb::literals;
using router::InstanceId;

nb::dict tier_dict(const router::TierBlockCounts& c) {
  nb::dict d;
  for (const TierId t : kTierIds) d[std::string(to_string(t)).c_str()] = c[t];
  return d;
}

std::chrono::milliseconds millis(double seconds, const char* what) {
  KVBM_CHECK(seconds >= 0, what, ": ", seconds, " s is negative");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

const char* apply_name(router::ApplyStatus s) {
  switch (s) {
    case router::ApplyStatus::kApplied:
      return "applied";
    case router::ApplyStatus::kDuplicate:
      return "duplicate";
    case router::ApplyStatus::kGap:
      return "gap";
    case router::ApplyStatus::kRestart:
      return "restart";
  }
  return "unknown";
}

router::KvRouterOptions router_options(const std::string& policy, std::uint32_t block_size,
                                       double compute_cost, const nb::dict& tier_cost,
                                       double load_weight, const std::string& load_unit,
                                       bool use_stale, std::uint64_t seed) {
  router::KvRouterOptions o;
  o.policy = router::parse_route_policy(policy);
  o.block_size = block_size;
  o.compute_cost = compute_cost;
  for (const auto& [key, value] : tier_cost) {
    const std::string name = nb::cast<std::string>(key);
    bool known = false;
    for (const TierId t : kTierIds) {
      if (name == to_string(t)) {
        o.tier_cost[t] = nb::cast<double>(value);
        known = true;
      }
    }
    KVBM_CHECK(known, "KvRouter: tier_cost key '", name, "' is not one of G1, G2, G3, G4");
  }
  o.load_weight = load_weight;
  KVBM_CHECK(load_unit == "tokens" || load_unit == "requests", "KvRouter: load_unit '", load_unit,
             "' is not 'tokens' or 'requests'");
  o.load_unit = load_unit == "tokens" ? router::LoadUnit::kTokens : router::LoadUnit::kRequests;
  o.use_stale = use_stale;
  o.seed = seed;
  return o;
}

void bind_values(nb::module_& m) {
  nb::class_<router::InstanceOverlap>(m, "InstanceOverlap",
                                      "The prefix of one request that one instance holds.")
      .def_ro("instance", &router::InstanceOverlap::instance)
      .def_ro("prefix_blocks", &router::InstanceOverlap::prefix_blocks)
      .def_prop_ro(
          "per_tier", [](const router::InstanceOverlap& o) { return tier_dict(o.per_tier); },
          "Those blocks by the fastest tier holding them: {'G1': n, ..., 'G4': n}.")
      .def_ro("stale", &router::InstanceOverlap::stale)
      .def("__repr__", [](const router::InstanceOverlap& o) {
        return "InstanceOverlap(instance=" + std::to_string(o.instance) +
               ", prefix_blocks=" + std::to_string(o.prefix_blocks) + (o.stale ? ", stale)" : ")");
      });
  nb::class_<router::RouteDecision>(m, "RouteDecision",
                                    "One routing decision; give it back to KvRouter.finish().")
      .def_ro("instance", &router::RouteDecision::instance)
      .def_ro("overlap", &router::RouteDecision::overlap)
      .def_ro("cost", &router::RouteDecision::cost)
      .def_ro("tokens_to_compute", &router::RouteDecision::tokens_to_compute)
      .def_ro("load", &router::RouteDecision::load)
      .def_ro("used_stale", &router::RouteDecision::used_stale)
      .def("__repr__", [](const router::RouteDecision& d) {
        return "RouteDecision(instance=" + std::to_string(d.instance) +
               ", prefix_blocks=" + std::to_string(d.overlap.prefix_blocks) +
               ", cost=" + std::to_string(d.cost) + ")";
      });
}

nb::dict state_dict(const router::InstanceState& s) {
  nb::dict d;
  d["name"] = s.name;
  d["next_sequence"] = s.next_sequence;
  d["stale"] = router::to_string(s.stale);
  d["held_batches"] = s.held_batches;
  d["blocks"] = tier_dict(s.blocks);
  return d;
}

nb::dict indexer_stats_dict(const router::KvIndexerStats& s) {
  nb::dict d;
  d["batches_applied"] = s.batches_applied;
  d["events_applied"] = s.events_applied;
  d["blocks_stored"] = s.blocks_stored;
  d["blocks_removed"] = s.blocks_removed;
  d["clears"] = s.clears;
  d["duplicate_batches"] = s.duplicate_batches;
  d["gaps"] = s.gaps;
  d["restarts"] = s.restarts;
  d["resyncs"] = s.resyncs;
  d["unknown_medium_events"] = s.unknown_medium_events;
  d["removed_unknown_blocks"] = s.removed_unknown_blocks;
  d["unkeyed_events"] = s.unkeyed_events;
  d["group_mismatch_events"] = s.group_mismatch_events;
  d["distinct_blocks"] = s.distinct_blocks;
  d["index_bytes"] = s.index_bytes;
  return d;
}

// A hybrid model's index: its queries and key helpers (docs/hybrid.md).
void bind_indexer_groups(nb::class_<router::KvIndexer>& c) {
  using router::KvIndexer;
  c.def(
       "group_overlaps",
       [](const KvIndexer& k, const nb::list& group_keys, std::optional<std::size_t> limit) {
         std::vector<std::vector<std::uint64_t>> keys;
         for (nb::handle g : group_keys) {
           keys.push_back(integers_of<std::uint64_t>(g, "KvIndexer.group_overlaps: keys"));
         }
         nb::gil_scoped_release release;
         return k.group_overlaps(keys, limit.value_or(SIZE_MAX)).instances;
       },
       "group_keys"_a, "max_tokens"_a = nb::none(),
       "Hybrid index: per live instance, the longest cut (at most max_tokens) every group "
       "can serve, in blocks of the groups' hash block; group_keys[g] are group g's block "
       "keys as its events name them.")
      .def_prop_ro("hybrid", &KvIndexer::hybrid, "True when the groups make the index hybrid.")
      .def_static(
          "kvbm_group_keys",
          [](nb::handle hashes, const std::vector<KvCacheGroupSpec>& groups) {
            const auto h = integers_of<std::uint64_t>(hashes, "KvIndexer.kvbm_group_keys: hashes");
            return router::kvbm_group_keys(h, groups);
          },
          "hashes"_a, "groups"_a,
          "The keys kvbm's HybridBlockManager gives each group's blocks, from a request's "
          "chained hashes at the groups' hash block: one list per group.")
      .def_static(
          "group_token_keys",
          [](nb::handle tokens, const std::vector<KvCacheGroupSpec>& groups,
             std::optional<std::int64_t> lora_id) {
            const auto t =
                integers_of<std::uint32_t>(tokens, "KvIndexer.group_token_keys: token_ids");
            return router::group_token_keys(t, groups, lora_id);
          },
          "token_ids"_a, "groups"_a, "lora_id"_a = nb::none(),
          "key='tokens': each group's block keys at its own block size.");
}

void bind_indexer(nb::module_& m) {
  using router::KvIndexer;
  auto c =
      nb::class_<KvIndexer>(m, "KvIndexer",
                            "Which instance holds which block in which tier, from KV events "
                            "(docs/router.md).")
          .def(
              "__init__",
              [](KvIndexer* self, double silence_timeout, std::size_t max_held_batches,
                 const std::string& key, std::optional<std::vector<KvCacheGroupSpec>> groups) {
                router::KvIndexerOptions o;
                o.silence_timeout = millis(silence_timeout, "KvIndexer: silence_timeout");
                o.max_held_batches = max_held_batches;
                o.key = router::parse_block_key(key);
                if (groups) o.groups = std::move(*groups);
                new (self) KvIndexer(std::move(o));
              },
              "silence_timeout"_a = 0.0, "max_held_batches"_a = 1024, "key"_a = "hashes",
              "groups"_a = nb::none(),
              "silence_timeout: seconds of silence after which an instance is stale (0: never). "
              "key='tokens' keys blocks by kvbm's hash of the tokens the events carry, so that "
              "KvRouter.route_tokens() routes by token ids whatever the engines hash with. "
              "groups: a hybrid model's KvCacheGroupSpecs; an overlap then counts only where every "
              "group can serve the cut (docs/hybrid.md, 'Events and the router').")
          .def("add_instance", &KvIndexer::add_instance, "name"_a,
               nb::call_guard<nb::gil_scoped_release>(), "Adds an instance; returns its id.")
          .def("remove_instance", &KvIndexer::remove_instance, "instance"_a,
               nb::call_guard<nb::gil_scoped_release>())
          .def(
              "find_instance",
              [](const KvIndexer& k, const std::string& name) { return k.find_instance(name); },
              "name"_a, "Returns the id of the live instance named `name`, or None.")
          .def(
              "apply",
              [](KvIndexer& k, InstanceId id, std::uint64_t seq, std::vector<events::KvEvent> evs) {
                events::KvEventBatch b;
                b.events = std::move(evs);
                router::ApplyResult r;
                {
                  nb::gil_scoped_release release;
                  r = k.apply(id, seq, b);
                }
                return nb::make_tuple(apply_name(r.status), r.expected, r.applied_batches);
              },
              "instance"_a, "sequence"_a, "events"_a,
              "Applies batch `sequence` of an instance (a list of BlockStored, BlockRemoved, "
              "AllBlocksCleared, as take_events() returns them); returns (status, expected, "
              "applied_batches), status one of 'applied', 'duplicate', 'gap', 'restart'.")
          .def("resync", &KvIndexer::resync, "instance"_a, "resume_at"_a = nb::none(),
               nb::call_guard<nb::gil_scoped_release>())
          .def("restart", &KvIndexer::restart, "instance"_a,
               nb::call_guard<nb::gil_scoped_release>())
          .def("mark_stale", &KvIndexer::mark_stale, "instance"_a,
               nb::call_guard<nb::gil_scoped_release>())
          .def(
              "overlaps",
              [](const KvIndexer& k, nb::handle hashes) {
                const auto h = integers_of<std::uint64_t>(hashes, "KvIndexer.overlaps: hashes");
                nb::gil_scoped_release release;
                return k.overlaps(h).instances;
              },
              "hashes"_a,
              "Per live instance, the prefix of `hashes` it holds (InstanceOverlap); for a hybrid "
              "index, `hashes` are at the groups' hash block and kvbm's group keys are derived.")
          .def("holds", &KvIndexer::holds, "instance"_a, "hash"_a, "tier"_a,
               nb::call_guard<nb::gil_scoped_release>())
          .def(
              "state", [](const KvIndexer& k, InstanceId id) { return state_dict(k.state(id)); },
              "instance"_a,
              "The instance's state: name, next_sequence, stale, held_batches, blocks.")
          .def("instances", &KvIndexer::instances, nb::call_guard<nb::gil_scoped_release>())
          .def("stats", [](const KvIndexer& k) { return indexer_stats_dict(k.stats()); });
  bind_indexer_groups(c);
}

void bind_kv_router(nb::module_& m) {
  using router::KvRouter;
  nb::class_<KvRouter>(m, "KvRouter",
                       "Sends each request to the instance where it costs least "
                       "(docs/router.md); keeps its KvIndexer alive.")
      .def(
          "__init__",
          [](KvRouter* self, const router::KvIndexer& index, const std::string& policy,
             std::uint32_t block_size, double compute_cost, const nb::dict& tier_cost,
             double load_weight, const std::string& load_unit, bool use_stale, std::uint64_t seed) {
            new (self) KvRouter(index, router_options(policy, block_size, compute_cost, tier_cost,
                                                      load_weight, load_unit, use_stale, seed));
          },
          "index"_a, "policy"_a = "kv", "block_size"_a = 16, "compute_cost"_a = 1.0,
          "tier_cost"_a = nb::dict(), "load_weight"_a = 0.05, "load_unit"_a = "tokens",
          "use_stale"_a = false, "seed"_a = 1, nb::keep_alive<1, 2>(),
          "policy: 'kv', 'round_robin' or 'random'; tier_cost: {'G2': 0.05, ...}, the tiers "
          "named are changed; load_unit: 'tokens' or 'requests'.")
      .def(
          "route",
          [](KvRouter& r, nb::handle hashes, std::uint64_t tokens) {
            const auto h = integers_of<std::uint64_t>(hashes, "KvRouter.route: hashes");
            nb::gil_scoped_release release;
            return r.route(h, tokens);
          },
          "hashes"_a, "tokens"_a,
          "Chooses an instance for a request of `tokens` prompt tokens whose blocks hash to "
          "`hashes`, and adds it to that instance's load. Raises UsageError with no live "
          "instance.")
      .def(
          "route_tokens",
          [](KvRouter& r, nb::handle token_ids, std::optional<std::int64_t> lora_id) {
            const auto t =
                integers_of<std::uint32_t>(token_ids, "KvRouter.route_tokens: token_ids");
            nb::gil_scoped_release release;
            return r.route_tokens(t, lora_id);
          },
          "token_ids"_a, "lora_id"_a = nb::none(),
          "Chooses an instance for a prompt given by its token ids (the index must be built "
          "with key='tokens').")
      .def("finish", &KvRouter::finish, "decision"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Takes a routed request off its instance's load.")
      .def(
          "costs",
          [](const KvRouter& r, nb::handle hashes, std::uint64_t tokens) {
            const auto h = integers_of<std::uint64_t>(hashes, "KvRouter.costs: hashes");
            nb::gil_scoped_release release;
            return r.costs(h, tokens);
          },
          "hashes"_a, "tokens"_a, "The cost 'kv' gives each live instance, in instances() order.")
      .def("stats", [](const KvRouter& r) {
        const router::KvRouterStats s = r.stats();
        nb::dict d;
        d["decisions"] = s.decisions;
        d["stale_decisions"] = s.stale_decisions;
        d["decisions_while_stale"] = s.decisions_while_stale;
        d["per_instance"] = s.per_instance;
        d["load"] = s.load;
        return d;
      });
}

void bind_feed(nb::module_& m) {
  using router::KvEventFeed;
  nb::class_<KvEventFeed>(m, "KvEventFeed",
                          "Feeds a KvIndexer from the instances' ZeroMQ event publishers "
                          "(kvbm's or vLLM's); keeps the index alive.")
      .def(
          "__init__",
          [](KvEventFeed* self, router::KvIndexer& index, double retry_interval,
             double replay_timeout) {
            router::KvEventFeedOptions o;
            o.retry_interval = millis(retry_interval, "KvEventFeed: retry_interval");
            o.subscriber.replay_timeout = millis(replay_timeout, "KvEventFeed: replay_timeout");
            nb::gil_scoped_release release;
            new (self) KvEventFeed(index, std::move(o));
          },
          "index"_a, "retry_interval"_a = 0.1, "replay_timeout"_a = 1.0, nb::keep_alive<1, 2>())
      .def(
          "add_instance",
          [](KvEventFeed& f, const std::string& name, const std::string& endpoint,
             const std::optional<std::string>& replay_endpoint, const std::string& topic) {
            events::EventSource s{name, endpoint, topic, replay_endpoint.value_or("")};
            nb::gil_scoped_release release;
            return f.add_instance(name, std::move(s));
          },
          "name"_a, "endpoint"_a, "replay_endpoint"_a = nb::none(), "topic"_a = "",
          "Adds instance `name` to the index and subscribes to its PUB `endpoint` (and its "
          "replay socket); returns its id.")
      .def("remove_instance", &KvEventFeed::remove_instance, "instance"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def(
          "wait_applied",
          [](KvEventFeed& f, InstanceId id, std::uint64_t sequence, double timeout) {
            const auto t = millis(timeout, "KvEventFeed.wait_applied: timeout");
            nb::gil_scoped_release release;
            return f.wait_applied(id, sequence, t);
          },
          "instance"_a, "sequence"_a, "timeout"_a = 10.0,
          "Waits until the index has applied batch `sequence` of the instance (and every one "
          "before); False after `timeout` seconds.")
      .def("stats", [](const KvEventFeed& f) {
        const router::KvEventFeedStats s = f.stats();
        nb::dict d;
        d["batches_received"] = s.batches_received;
        d["replays_requested"] = s.replays_requested;
        d["replays_incomplete"] = s.replays_incomplete;
        d["decode_errors"] = s.decode_errors;
        d["restarts"] = s.restarts;
        return d;
      });
}

}  // namespace

void bind_router(nb::module_& m) {
  bind_values(m);
  bind_indexer(m);
  bind_kv_router(m);
  bind_feed(m);
}

}  // namespace kvbm::python
