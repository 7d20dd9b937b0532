// kvbm/router/kv_router.h: sends each request to the instance where it costs least.
//
// A KvRouter places requests on the instances of a KvIndexer. With
// RoutePolicy::kKv it estimates, for every live instance, the work the
// request would cost there, in units of one token's prefill:
//
//   cost = compute_cost * (tokens not held in any tier)
//        + sum over held blocks of tier_cost[tier] * the block's tokens
//        + load_weight * load
//
// where load is the instance's work in flight: the tokens still to compute
// of the requests routed to it and not finished (LoadUnit::kTokens), or
// their number (LoadUnit::kRequests). A G1 hit costs nothing (tier_cost
// G1 = 0); a G2, G3 or G4 hit costs a copy. Held tokens never exceed
// `tokens`. The least cost wins; ties (equal within a relative 1e-9) go to
// the instance with less load, then to one drawn by a generator seeded with
// options.seed, so that a run repeats exactly. kRoundRobin and kRandom
// (seeded too) ignore the index: the baselines; their decisions report no
// overlap, cost 0 and every token to compute.
//
// route_tokens() routes by a request's token ids when the index is keyed by
// tokens (KvIndexerOptions::key), whatever the engines hash their blocks with.
//
// A hybrid index (KvIndexer::hybrid(): the model's KV cache groups) answers
// with the longest prefix every group can serve on each instance, in blocks
// of hash_block_size(groups) tokens, which options.block_size must then equal
// (the constructor says so otherwise). route() takes the request's chained
// hashes at that size; route_tokens() keys each group's blocks at its own
// block size (group_token_keys()).
//
// Without events: an instance set_approximate() publishes no KV events (or
// the router does not read them). Each request routed there is recorded as
// held in its G1 for options.approximate_ttl (measured on options.clock), in a
// table of at most approximate_max_blocks entries, and route() counts an
// approximate instance's prefix from that table instead of the index.
//
// Load: route() adds the chosen request to its instance's load; finish()
// takes it off. Stale entries (InstanceOverlap::stale) count as no prefix
// unless use_stale, and a decision that used them is counted
// (kvbm_router_stale_decisions_total), as is every decision made while any
// instance was stale. The series carry pool="router" and policy=to_string
// (policy): routers of different policies may share a registry, a second of
// the same policy throws UsageError. docs/router.md explains the defaults.
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/overlap.h"

namespace prometheus {
class Registry;
}

namespace kvbm::router {

/// How a KvRouter chooses.
enum class RoutePolicy : std::uint8_t { kKv, kRoundRobin, kRandom };

/// Returns "kv", "round_robin" or "random".
[[nodiscard]] const char* to_string(RoutePolicy p) noexcept;
/// Parses "kv", "round_robin" or "random"; throws UsageError otherwise.
[[nodiscard]] RoutePolicy parse_route_policy(std::string_view s);

/// What load counts.
enum class LoadUnit : std::uint8_t { kTokens, kRequests };

/// Configuration of a KvRouter; the weights are in units of one token's prefill.
struct KvRouterOptions {
  RoutePolicy policy = RoutePolicy::kKv;
  std::uint32_t block_size = 16;  ///< tokens per block (> 0)
  double compute_cost = 1.0;      ///< per token recomputed
  /// Per token brought from a tier, indexed by TierId (kvbm/tier_array.h).
  TierArray<double> tier_cost{{0.0, 0.05, 0.2, 0.3}};
  double load_weight = 0.05;  ///< per unit of load (docs/router.md: chosen by a sweep)
  LoadUnit load_unit = LoadUnit::kTokens;
  bool use_stale = false;  ///< route by stale entries (counted) instead of ignoring them
  std::uint64_t seed = 1;  ///< ties and kRandom
  /// Instances without KV events (set_approximate): how long a block the
  /// router sent one is assumed held, and how many such entries it keeps
  /// (the least recently routed go first).
  std::chrono::milliseconds approximate_ttl{120'000};
  std::size_t approximate_max_blocks = 1 << 20;
  /// Measures approximate_ttl (kvbm/clock.h; Clock::steady() when null).
  std::shared_ptr<Clock> clock;
  /// Where the router's series go (none when null).
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

/// One routing decision.
struct RouteDecision {
  InstanceId instance = 0;
  /// What the estimate used of the chosen instance (kKv; zeros for the
  /// baselines, and for stale entries ignored, with overlap.stale still set).
  InstanceOverlap overlap;
  double cost = 0;                      ///< its estimated cost (kKv), else 0
  std::uint64_t tokens_to_compute = 0;  ///< tokens of the request it holds in no tier
  std::uint64_t load = 0;               ///< what route() added to the instance's load
  bool used_stale = false;              ///< the choice relied on stale entries
};

/// Counters of a KvRouter.
struct KvRouterStats {
  std::uint64_t decisions = 0;
  std::uint64_t stale_decisions = 0;        ///< decisions that used stale entries
  std::uint64_t decisions_while_stale = 0;  ///< decisions made while any instance was stale
  std::vector<std::uint64_t> per_instance;  ///< decisions per InstanceId (one per id of the index)
  std::vector<std::uint64_t> load;  ///< load in flight per InstanceId (one per id of the index)
};

/// Chooses an instance per request; see the file comment.
class KvRouter {
 public:
  /// Precondition: `index` outlives the router. Throws UsageError for a bad option.
  explicit KvRouter(const KvIndexer& index, KvRouterOptions options = {});
  ~KvRouter();
  KvRouter(const KvRouter&) = delete;
  KvRouter& operator=(const KvRouter&) = delete;

  /// Chooses an instance for a request of `tokens` prompt tokens whose
  /// blocks hash to `hashes`, and adds it to that instance's load.
  /// Throws UsageError when the index has no live instance.
  RouteDecision route(std::span<const std::uint64_t> hashes, std::uint64_t tokens);
  /// Chooses an instance for a request given by its prompt's token ids: its
  /// blocks are token_keys(tokens, options.block_size, lora_id). Throws
  /// UsageError unless the index is keyed by tokens (BlockKey::kTokens).
  RouteDecision route_tokens(std::span<const std::uint32_t> tokens,
                             std::optional<std::int64_t> lora_id = {});
  /// Takes a routed request off its instance's load.
  void finish(const RouteDecision& decision);
  /// Routes to instance `id` without its KV events (`on`): the router takes
  /// what it sent there as held in G1 for approximate_ttl; see the file
  /// comment. Off again, what was recorded is forgotten.
  void set_approximate(InstanceId id, bool on = true);
  /// Returns the cost kKv gives each live instance (in instances() order), for tests.
  [[nodiscard]] std::vector<double> costs(std::span<const std::uint64_t> hashes,
                                          std::uint64_t tokens) const;
  [[nodiscard]] KvRouterStats stats() const;
  [[nodiscard]] const KvRouterOptions& options() const noexcept;

  struct Impl;  // defined in src/router/kv_router.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::router
