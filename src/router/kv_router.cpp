// src/router/kv_router.cpp: the cost-model router over a KvIndexer (kvbm/router/kv_router.h).

#include "kvbm/router/kv_router.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "router/approx_table.h"
#include "router/router_metrics.h"

namespace kvbm::router {

const char* to_string(RoutePolicy p) noexcept {
  switch (p) {
    case RoutePolicy::kKv:
      return "kv";
    case RoutePolicy::kRoundRobin:
      return "round_robin";
    case RoutePolicy::kRandom:
      return "random";
  }
  return "unknown";
}

RoutePolicy parse_route_policy(std::string_view s) {
  for (auto p : {RoutePolicy::kKv, RoutePolicy::kRoundRobin, RoutePolicy::kRandom}) {
    if (s == to_string(p)) return p;
  }
  KVBM_CHECK(false, "unknown route policy \"", s, "\": use one of kv, round_robin, random");
  return RoutePolicy::kKv;
}

namespace {

void check_options(const KvRouterOptions& o) {
  KVBM_CHECK(o.policy == RoutePolicy::kKv || o.policy == RoutePolicy::kRoundRobin ||
                 o.policy == RoutePolicy::kRandom,
             "KvRouterOptions.policy is not a RoutePolicy");
  KVBM_CHECK(o.block_size > 0, "KvRouterOptions.block_size is 0; give the tokens per block");
  auto weight = [](double w, const char* name) {
    KVBM_CHECK(std::isfinite(w) && w >= 0, "KvRouterOptions.", name, " is ", w,
               ": weights are finite and not negative (units of one token's prefill)");
  };
  weight(o.compute_cost, "compute_cost");
  weight(o.load_weight, "load_weight");
  for (double w : o.tier_cost) weight(w, "tier_cost[]");
  KVBM_CHECK(o.approximate_ttl.count() > 0,
             "KvRouterOptions.approximate_ttl must be positive: how long a routed block is "
             "assumed held by an instance without events");
  KVBM_CHECK(o.approximate_max_blocks > 0,
             "KvRouterOptions.approximate_max_blocks must be at least 1");
}

/// What kKv estimates for one instance.
struct Estimate {
  double cost = 0;
  std::uint64_t to_compute = 0;
  bool ignored_stale = false;  // stale entries counted as no prefix
  bool used_stale = false;     // stale entries counted (use_stale)
};

}  // namespace

struct KvRouter::Impl {
  Impl(const KvIndexer& i, KvRouterOptions o)
      : index(i),
        options(std::move(o)),
        clock(options.clock ? options.clock : Clock::steady()),
        rng(options.seed),
        approx(options.approximate_ttl, options.approximate_max_blocks) {
    check_options(options);
    if (index.hybrid()) {
      const std::uint32_t hb = hash_block_size(index.groups());
      KVBM_CHECK(options.block_size == hb, "KvRouterOptions.block_size is ", options.block_size,
                 ": a hybrid index counts its overlaps in blocks of hash_block_size(groups) = ", hb,
                 " tokens; set block_size to ", hb);
    }
    if (options.metrics_registry) {
      metrics = std::make_unique<impl::RouterMetrics>(options.metrics_registry,
                                                      to_string(options.policy));
    }
  }

  const KvIndexer& index;
  const KvRouterOptions options;
  const std::shared_ptr<Clock> clock;
  std::unique_ptr<impl::RouterMetrics> metrics;  // its own atomics; touched after mu is released

  mutable detail::Mutex mu;
  std::mt19937_64 rng KVBM_GUARDED_BY(mu);
  std::vector<bool> approximate KVBM_GUARDED_BY(mu);  // per InstanceId: routed without events
  impl::ApproxTable approx KVBM_GUARDED_BY(mu);
  std::vector<std::uint64_t> load KVBM_GUARDED_BY(mu);
  std::vector<std::uint64_t> per_instance KVBM_GUARDED_BY(mu);
  std::optional<InstanceId> last_round_robin KVBM_GUARDED_BY(mu);
  KvRouterStats counts KVBM_GUARDED_BY(mu);  // decisions and the two stale counters

  [[nodiscard]] std::uint64_t load_of(InstanceId id) const KVBM_REQUIRES(mu) {
    return id < load.size() ? load[id] : 0;
  }

  /// The cost model of the file comment; reads `o` without copying it (this
  /// runs once per instance per request).
  [[nodiscard]] Estimate estimate(const InstanceOverlap& o, std::uint64_t tokens) const
      KVBM_REQUIRES(mu) {
    Estimate e;
    e.ignored_stale = o.stale && !options.use_stale;
    e.used_stale = o.stale && options.use_stale && o.prefix_blocks > 0;
    const std::uint64_t bs = options.block_size;
    const std::uint64_t prefix = e.ignored_stale ? 0 : o.prefix_blocks;
    // Tokens held: the prefix's blocks, never more than the request has.
    std::uint64_t left = std::min<std::uint64_t>(tokens, prefix * bs);
    e.to_compute = tokens - left;
    double copy = 0;
    if (!e.ignored_stale) {
      for (const TierId t : kTierIds) {
        const std::uint64_t n = std::min<std::uint64_t>(left, o.per_tier[t] * bs);
        copy += options.tier_cost[t] * static_cast<double>(n);
        left -= n;
      }
    }
    e.cost = (options.compute_cost * static_cast<double>(e.to_compute)) + copy +
             (options.load_weight * static_cast<double>(load_of(o.instance)));
    return e;
  }

  /// A uniform draw in [0, n) that repeats across standard libraries.
  std::size_t draw(std::size_t n) KVBM_REQUIRES(mu) { return static_cast<std::size_t>(rng() % n); }

  [[nodiscard]] bool is_approximate(InstanceId id) const KVBM_REQUIRES(mu) {
    return id < approximate.size() && approximate[id];
  }

  /// An approximate instance's prefix is what the router sent it, held in G1.
  void apply_approximate(std::vector<InstanceOverlap>& in, std::span<const std::uint64_t> hashes,
                         Clock::time_point now) const KVBM_REQUIRES(mu) {
    for (auto& o : in) {
      if (!is_approximate(o.instance)) continue;
      o.prefix_blocks = approx.prefix(o.instance, hashes, now);
      o.per_tier = {};
      o.per_tier[TierId::kG1] = o.prefix_blocks;
      o.stale = false;
    }
  }

  /// Chooses among `scores` (the index's answer for the request) and records
  /// the decision; see KvRouter::route.
  RouteDecision decide(OverlapScores scores, std::span<const std::uint64_t> hashes,
                       std::uint64_t tokens);

  void grow(InstanceId id) KVBM_REQUIRES(mu) {
    if (id >= load.size()) {
      load.resize(std::size_t{id} + 1, 0);
      per_instance.resize(std::size_t{id} + 1, 0);
    }
  }
};

KvRouter::KvRouter(const KvIndexer& index, KvRouterOptions options)
    : impl_(std::make_unique<Impl>(index, std::move(options))) {}

KvRouter::~KvRouter() = default;

RouteDecision KvRouter::route_tokens(std::span<const std::uint32_t> tokens,
                                     std::optional<std::int64_t> lora_id) {
  KVBM_CHECK(impl_->index.key() == BlockKey::kTokens,
             "KvRouter::route_tokens: the index keys blocks by the engines' hashes; build it with "
             "KvIndexerOptions::key = BlockKey::kTokens, or route(hashes, tokens)");
  auto& m = *impl_;
  const std::vector<std::uint64_t> keys = token_keys(tokens, m.options.block_size, lora_id);
  if (!m.index.hybrid()) return route(keys, tokens.size());
  // A hybrid index: each group's blocks keyed by its own block size.
  OverlapScores scores =
      m.options.policy == RoutePolicy::kKv
          ? m.index.group_overlaps(group_token_keys(tokens, m.index.groups(), lora_id))
          : m.index.overlaps({});
  return m.decide(std::move(scores), keys, tokens.size());
}

RouteDecision KvRouter::route(std::span<const std::uint64_t> hashes, std::uint64_t tokens) {
  auto& m = *impl_;
  // The index has its own lock; ask it first (kv needs the hashes, the
  // baselines only the live instances and whether any is stale).
  OverlapScores scores = m.index.overlaps(
      m.options.policy == RoutePolicy::kKv ? hashes : std::span<const std::uint64_t>{});
  return m.decide(std::move(scores), hashes, tokens);
}

RouteDecision KvRouter::Impl::decide(OverlapScores scores, std::span<const std::uint64_t> hashes,
                                     std::uint64_t tokens) {
  auto& m = *this;
  const RoutePolicy policy = m.options.policy;
  KVBM_CHECK(!scores.instances.empty(), "KvRouter::route: the index has no live instance");
  const Clock::time_point now = m.clock->now();
  RouteDecision d;
  bool any_stale = false;
  {
    detail::LockGuard lock(m.mu);
    auto& in = scores.instances;
    if (policy == RoutePolicy::kKv) m.apply_approximate(in, hashes, now);
    any_stale = std::any_of(in.begin(), in.end(), [](const InstanceOverlap& o) { return o.stale; });
    std::size_t chosen = 0;  // index into `in`
    if (policy == RoutePolicy::kKv) {
      std::vector<double> cost(in.size());
      double best = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        cost[i] = m.estimate(in[i], tokens).cost;
        if (i == 0 || cost[i] < best) best = cost[i];
      }
      const double tolerance = 1e-9 * std::max(1.0, std::abs(best));
      std::vector<std::size_t> ties;
      std::uint64_t least_load = UINT64_MAX;
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (cost[i] > best + tolerance) continue;
        const std::uint64_t l = m.load_of(in[i].instance);
        if (l < least_load) {
          least_load = l;
          ties.clear();
        }
        if (l == least_load) ties.push_back(i);
      }
      chosen = ties.size() == 1 ? ties[0] : ties[m.draw(ties.size())];
      const Estimate e = m.estimate(in[chosen], tokens);
      d.overlap = in[chosen];
      if (e.ignored_stale) {  // what the estimate used: no prefix
        d.overlap.prefix_blocks = 0;
        d.overlap.per_tier = {};
      }
      d.cost = e.cost;
      d.tokens_to_compute = e.to_compute;
      d.used_stale = e.used_stale;
    } else {
      if (policy == RoutePolicy::kRoundRobin) {
        chosen = 0;  // the first live id after the last one chosen, wrapping
        if (m.last_round_robin) {
          for (std::size_t i = 0; i < in.size(); ++i) {
            if (in[i].instance > *m.last_round_robin) {
              chosen = i;
              break;
            }
          }
        }
        m.last_round_robin = in[chosen].instance;
      } else {
        chosen = m.draw(in.size());
      }
      d.overlap = InstanceOverlap{};
      d.overlap.instance = in[chosen].instance;
      d.overlap.stale = in[chosen].stale;
      d.tokens_to_compute = tokens;  // the baselines do not look at the index
    }
    d.instance = in[chosen].instance;
    if (m.is_approximate(d.instance)) m.approx.record(d.instance, hashes, now);
    d.load = m.options.load_unit == LoadUnit::kTokens ? d.tokens_to_compute : 1;
    m.grow(d.instance);
    m.load[d.instance] += d.load;
    ++m.per_instance[d.instance];
    ++m.counts.decisions;
    if (d.used_stale) ++m.counts.stale_decisions;
    if (any_stale) ++m.counts.decisions_while_stale;
  }
  if (m.metrics) m.metrics->decision(d.used_stale, any_stale);
  return d;
}

void KvRouter::finish(const RouteDecision& decision) {
  auto& m = *impl_;
  detail::LockGuard lock(m.mu);
  if (decision.instance >= m.load.size()) return;
  std::uint64_t& l = m.load[decision.instance];
  l -= std::min(l, decision.load);
}

void KvRouter::set_approximate(InstanceId id, bool on) {
  auto& m = *impl_;
  detail::LockGuard lock(m.mu);
  if (id >= m.approximate.size()) m.approximate.resize(std::size_t{id} + 1, false);
  if (m.approximate[id] && !on) m.approx.forget(id);
  m.approximate[id] = on;
}

std::vector<double> KvRouter::costs(std::span<const std::uint64_t> hashes,
                                    std::uint64_t tokens) const {
  auto& m = *impl_;
  OverlapScores scores = m.index.overlaps(hashes);
  const Clock::time_point now = m.clock->now();
  std::vector<double> out;
  out.reserve(scores.instances.size());
  detail::LockGuard lock(m.mu);
  m.apply_approximate(scores.instances, hashes, now);
  for (const auto& o : scores.instances) out.push_back(m.estimate(o, tokens).cost);
  return out;
}

KvRouterStats KvRouter::stats() const {
  auto& m = *impl_;
  const std::vector<InstanceId> live = m.index.instances();
  detail::LockGuard lock(m.mu);
  KvRouterStats s = m.counts;
  s.per_instance = m.per_instance;
  s.load = m.load;
  // One entry per instance of the index, routed to or not.
  const std::size_t n = std::max(s.load.size(), live.empty() ? 0 : std::size_t{live.back()} + 1);
  s.per_instance.resize(n, 0);
  s.load.resize(n, 0);
  return s;
}

const KvRouterOptions& KvRouter::options() const noexcept { return impl_->options; }

}  // namespace kvbm::router
