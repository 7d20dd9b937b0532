#include "kvbm/router/kv_router.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "kvbm/error.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/router/kv_indexer.h"
#include "router/router_test_util.h"

namespace kvbm::router {
namespace kv_router_test {

using test::batch;
using test::stored;

const std::vector<std::uint64_t> kRequest{1, 2, 3, 4};  // 4 blocks of 16 tokens
constexpr std::uint64_t kTokens = 64;

/// An index of instances "a", "b", ... where instance i first stored `held[i]`.
struct Cluster {
  KvIndexer index;
  std::vector<InstanceId> ids;
  explicit Cluster(const std::vector<std::vector<events::KvEvent>>& held, KvIndexerOptions o = {})
      : index(std::move(o)) {
    for (std::size_t i = 0; i < held.size(); ++i) {
      ids.push_back(index.add_instance(std::string(1, static_cast<char>('a' + i))));
      index.apply(ids.back(), 0, batch(held[i]));
    }
  }
};

TEST(KvRouter, AG1PrefixBeatsAG3PrefixOfTheSameLength) {
  Cluster c({{stored({1, 2}, "GPU")}, {stored({1, 2}, "DISK")}});
  KvRouter router(c.index);
  // a: 32 tokens to compute; b: the same plus 32 tokens from G3 at 0.2.
  EXPECT_EQ(router.costs(kRequest, kTokens), (std::vector<double>{32.0, 32.0 + (0.2 * 32)}));
  const auto d = router.route(kRequest, kTokens);
  EXPECT_EQ(d.instance, c.ids[0]);
  EXPECT_EQ(d.tokens_to_compute, 32U);
  EXPECT_DOUBLE_EQ(d.cost, 32.0);
  EXPECT_EQ(d.overlap.prefix_blocks, 2U);
  EXPECT_EQ(d.overlap.per_tier[TierId::kG1], 2U);
  EXPECT_EQ(d.load, 32U);
}

TEST(KvRouter, ALongerG3PrefixBeatsAShorterG1OneUnlessG3CostsMore) {
  Cluster c({{stored({1}, "GPU")}, {stored({1, 2, 3}, "DISK")}});
  {
    KvRouter router(c.index);
    // a: 48 to compute. b: 16 to compute + 48 from G3 at 0.2 = 25.6.
    const auto costs = router.costs(kRequest, kTokens);
    ASSERT_EQ(costs.size(), 2U);
    EXPECT_DOUBLE_EQ(costs[0], 48.0);
    EXPECT_DOUBLE_EQ(costs[1], 16.0 + (0.2 * 48));
    EXPECT_EQ(router.route(kRequest, kTokens).instance, c.ids[1]);
  }
  {
    KvRouterOptions o;
    o.tier_cost[TierId::kG3] = 1.5;  // reading from disk costs more than recomputing
    KvRouter router(c.index, o);
    EXPECT_DOUBLE_EQ(router.costs(kRequest, kTokens)[1], 16.0 + (1.5 * 48));
    EXPECT_EQ(router.route(kRequest, kTokens).instance, c.ids[0]);
  }
}

TEST(KvRouter, SharedTierHitsCostTheirCopy) {
  Cluster c({{stored({1, 2}, "REMOTE")}, {stored({1}, "GPU")}});
  KvRouter router(c.index);
  const auto costs = router.costs(kRequest, kTokens);
  EXPECT_DOUBLE_EQ(costs[0], 32.0 + (0.3 * 32));  // both blocks from G4
  EXPECT_DOUBLE_EQ(costs[1], 32.0 + (0.3 * 16));  // 1 in G1, 2 from G4
  EXPECT_EQ(router.route(kRequest, kTokens).instance, c.ids[1]);
}

TEST(KvRouter, LoadMakesItSpillToAnIdleInstance) {
  Cluster c({{stored({1, 2}, "GPU")}, {}});
  KvRouterOptions o;
  o.load_weight = 1;  // a queued token costs as much as one to compute
  KvRouter router(c.index, o);
  auto d1 = router.route(kRequest, kTokens);  // a: 32, b: 64
  EXPECT_EQ(d1.instance, c.ids[0]);
  EXPECT_EQ(router.stats().load, (std::vector<std::uint64_t>{32, 0}));
  EXPECT_EQ(router.costs(kRequest, kTokens), (std::vector<double>{64.0, 64.0}));
  // A tie: the less loaded one.
  auto d2 = router.route(kRequest, kTokens);
  EXPECT_EQ(d2.instance, c.ids[1]);
  EXPECT_EQ(d2.load, 64U);
  router.finish(d1);
  router.finish(d2);
  EXPECT_EQ(router.stats().load, (std::vector<std::uint64_t>{0, 0}));
  EXPECT_EQ(router.route(kRequest, kTokens).instance, c.ids[0]);
}

TEST(KvRouter, RequestLoadWithAHeavyWeightSpillsAFullHit) {
  Cluster c({{stored({1, 2, 3, 4}, "GPU")}, {}});
  KvRouterOptions o;
  o.load_unit = LoadUnit::kRequests;
  o.load_weight = 100;
  KvRouter router(c.index, o);
  const auto d1 = router.route(kRequest, kTokens);
  EXPECT_EQ(d1.instance, c.ids[0]);
  EXPECT_EQ(d1.load, 1U);
  EXPECT_EQ(d1.tokens_to_compute, 0U);
  EXPECT_EQ(router.costs(kRequest, kTokens), (std::vector<double>{100.0, 64.0}));
  EXPECT_EQ(router.route(kRequest, kTokens).instance, c.ids[1]);
  router.finish(d1);
  EXPECT_EQ(router.stats().load, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(router.stats().per_instance, (std::vector<std::uint64_t>{1, 1}));
}

TEST(KvRouter, TiesGoToLessLoadThenToASeededDraw) {
  Cluster c({{}, {}, {}});
  KvRouterOptions o;
  o.load_weight = 0;  // every instance costs the same whatever its load
  o.load_unit = LoadUnit::kRequests;
  auto run = [&](std::uint64_t seed) {
    o.seed = seed;
    KvRouter router(c.index, o);
    std::vector<InstanceId> out;
    for (int i = 0; i < 9; ++i) out.push_back(router.route(kRequest, kTokens).instance);
    return out;
  };
  const auto first = run(7);
  // Each round of three spreads over the three (less load wins the tie).
  for (std::size_t r = 0; r < 9; r += 3) {
    EXPECT_EQ((std::set<InstanceId>{first[r], first[r + 1], first[r + 2]}).size(), 3U);
  }
  EXPECT_EQ(run(7), first);  // the same seed repeats exactly
}

TEST(KvRouter, StaleEntriesAreIgnoredUnlessUseStaleAndThenCounted) {
  Cluster c({{stored({1, 2}, "GPU")}, {stored({1}, "GPU")}});
  c.index.mark_stale(c.ids[0]);
  {
    KvRouter router(c.index);
    EXPECT_EQ(router.costs(kRequest, kTokens), (std::vector<double>{64.0, 48.0}));
    const auto d = router.route(kRequest, kTokens);
    EXPECT_EQ(d.instance, c.ids[1]);
    EXPECT_FALSE(d.used_stale);
    const auto s = router.stats();
    EXPECT_EQ(s.decisions, 1U);
    EXPECT_EQ(s.stale_decisions, 0U);
    EXPECT_EQ(s.decisions_while_stale, 1U);
  }
  {
    KvRouterOptions o;
    o.use_stale = true;
    KvRouter router(c.index, o);
    EXPECT_EQ(router.costs(kRequest, kTokens), (std::vector<double>{32.0, 48.0}));
    const auto d = router.route(kRequest, kTokens);
    EXPECT_EQ(d.instance, c.ids[0]);
    EXPECT_TRUE(d.used_stale);
    EXPECT_TRUE(d.overlap.stale);
    EXPECT_EQ(router.stats().stale_decisions, 1U);
  }
  c.index.apply(c.ids[0], 1, batch({}));  // fresh again
  KvRouter router(c.index);
  router.route(kRequest, kTokens);
  EXPECT_EQ(router.stats().decisions_while_stale, 0U);
}

TEST(KvRouter, RoundRobinVisitsTheLiveInstancesInOrder) {
  Cluster c({{stored({1, 2, 3, 4})}, {}, {}});
  KvRouterOptions o;
  o.policy = RoutePolicy::kRoundRobin;
  KvRouter router(c.index, o);
  std::vector<InstanceId> got;
  for (int i = 0; i < 4; ++i) got.push_back(router.route(kRequest, kTokens).instance);
  EXPECT_EQ(got, (std::vector<InstanceId>{0, 1, 2, 0}));
  c.index.remove_instance(c.ids[1]);
  got.clear();
  for (int i = 0; i < 3; ++i) got.push_back(router.route(kRequest, kTokens).instance);
  EXPECT_EQ(got, (std::vector<InstanceId>{2, 0, 2}));
  const auto d = router.route(kRequest, kTokens);
  EXPECT_EQ(d.overlap.prefix_blocks, 0U);  // baselines do not read the index
  EXPECT_EQ(d.tokens_to_compute, kTokens);
  EXPECT_EQ(d.cost, 0.0);
}

TEST(KvRouter, SeededRandomRepeatsExactly) {
  Cluster c({{}, {}, {}, {}});
  auto run = [&](std::uint64_t seed) {
    KvRouterOptions o;
    o.policy = RoutePolicy::kRandom;
    o.seed = seed;
    KvRouter router(c.index, o);
    std::vector<InstanceId> out;
    for (int i = 0; i < 32; ++i) out.push_back(router.route(kRequest, kTokens).instance);
    return out;
  };
  const auto a = run(42);
  EXPECT_EQ(run(42), a);
  EXPECT_NE(run(43), a);
  EXPECT_GT(std::set<InstanceId>(a.begin(), a.end()).size(), 1U);
}

TEST(KvRouter, PolicyNamesRoundTripAndBadOnesSayWhatIsValid) {
  for (auto p : {RoutePolicy::kKv, RoutePolicy::kRoundRobin, RoutePolicy::kRandom}) {
    EXPECT_EQ(parse_route_policy(to_string(p)), p);
  }
  try {
    (void)parse_route_policy("least_loaded");
    FAIL() << "no throw";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("least_loaded"), std::string::npos) << what;
    EXPECT_NE(what.find("kv, round_robin, random"), std::string::npos) << what;
  }
}

TEST(KvRouter, MisuseThrowsUsageError) {
  KvIndexer empty;
  KvRouter router(empty);
  EXPECT_THROW(router.route(kRequest, kTokens), UsageError);
  KvRouterOptions o;
  o.block_size = 0;
  EXPECT_THROW(KvRouter(empty, o), UsageError);
  o = {};
  o.tier_cost[TierId::kG2] = -1;
  EXPECT_THROW(KvRouter(empty, o), UsageError);
}

TEST(KvRouter, MetricsCarryThePoolLabelAndCountDecisions) {
  auto registry = std::make_shared<prometheus::Registry>();
  KvIndexerOptions io;
  io.metrics_registry = registry;
  Cluster c({{stored({1, 2}, "GPU"), stored({3}, "REMOTE"), stored({4}, "NPU")}, {}}, io);
  c.index.apply(c.ids[1], 3, batch({}));  // a gap: b is stale
  c.index.apply(c.ids[0], 0, batch({}));  // a restart
  KvRouterOptions o;
  o.metrics_registry = registry;
  KvRouter router(c.index, o);
  router.route(kRequest, kTokens);
  KvRouterOptions rr;
  rr.policy = RoutePolicy::kRoundRobin;
  rr.metrics_registry = registry;
  KvRouter second(c.index, rr);                    // another policy may share the registry
  EXPECT_THROW(KvRouter(c.index, o), UsageError);  // the same one may not
  EXPECT_THROW(KvIndexer{io}, UsageError);

  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  for (const char* want : {
           R"(kvbm_router_decisions_total{policy="kv",pool="router"} 1)",
           R"(kvbm_router_decisions_total{policy="round_robin",pool="router"} 0)",
           R"(kvbm_router_decisions_while_stale_total{policy="kv",pool="router"} 1)",
           R"(kvbm_router_stale_decisions_total{policy="kv",pool="router"} 0)",
           R"(kvbm_router_events_applied_total{pool="router"} 2)",
           R"(kvbm_router_unknown_medium_events_total{pool="router"} 1)",
           R"(kvbm_router_batches_total{outcome="applied",pool="router"} 2)",
           R"(kvbm_router_batches_total{outcome="gap",pool="router"} 1)",
           R"(kvbm_router_batches_total{outcome="restart",pool="router"} 1)",
           R"(kvbm_router_batches_total{outcome="duplicate",pool="router"} 0)",
           R"(kvbm_router_resyncs_total{pool="router"} 0)",
           R"(kvbm_router_stale_instances{pool="router"} 1)",
           R"(kvbm_router_instances{pool="router"} 2)",
           R"(kvbm_router_indexed_blocks{pool="router",tier="G1"} 0)",
           R"(kvbm_router_indexed_blocks{pool="router",tier="G4"} 1)",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\n" << text;
  }
}

// The usage docs/router.md shows (its [docs] regions; the next test keeps
// the page equal to them): a publisher's batches feed the index in process,
// then the router places a request.
TEST(KvRouter, DocsUsageFedFromAPublisherThroughACallbackSink) {
  const std::vector<std::uint64_t> request_hashes{1, 2, 3, 4};
  const std::uint64_t prompt_tokens = 64;
  // [docs]
  router::KvIndexer index;
  const router::InstanceId engine = index.add_instance("engine-0");
  auto sink = std::make_shared<events::CallbackEventSink>(
      [&index, engine](std::uint64_t seq, const events::KvEventBatch& batch,
                       std::span<const std::uint8_t> /*payload*/) {
        if (index.apply(engine, seq, batch).status == router::ApplyStatus::kGap) {
          // Batches were lost: ask the publisher to replay from
          // index.state(engine).next_sequence, or index.resync(engine).
        }
      });
  events::KvEventPublisher publisher(sink);  // its listener("GPU", 16) goes to the G1 pool
  // [/docs]
  publisher.record(stored({1, 2, 3}, "GPU"));
  publisher.flush();
  (void)index.add_instance("engine-1");
  // [docs]
  router::KvRouter router(index);  // RoutePolicy::kKv, the default weights
  const router::RouteDecision d = router.route(request_hashes, prompt_tokens);
  // ... send the request to d.instance; when it has finished:
  router.finish(d);
  // [/docs]
  EXPECT_EQ(d.instance, engine);
  EXPECT_EQ(d.overlap.prefix_blocks, 3U);
  EXPECT_EQ(d.tokens_to_compute, 16U);
  EXPECT_EQ(router.stats().load[engine], 0U);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// docs/router.md's C++ block is this file's [docs] regions, dedented and
// joined by a blank line, so that the page shows code that compiles and runs.
TEST(KvRouter, DocsSnippetIsTheTestAbove) {
  const std::string root = KVBM_SOURCE_DIR;
  std::vector<std::string> want;
  {
    std::vector<std::string> region;
    bool inside = false;
    for (const auto& line : lines_of(read_file(root + "/tests/router/kv_router_test.cpp"))) {
      const auto text = line.substr(std::min(line.find_first_not_of(' '), line.size()));
      if (text == "// [docs]") {
        inside = true;
        region.clear();
      } else if (text == "// [/docs]") {
        inside = false;
        std::size_t indent = std::string::npos;
        for (const auto& l : region) {
          if (l.find_first_not_of(' ') != std::string::npos)
            indent = std::min(indent, l.find_first_not_of(' '));
        }
        if (!want.empty()) want.emplace_back();
        for (const auto& l : region) want.push_back(l.size() > indent ? l.substr(indent) : "");
      } else if (inside) {
        region.push_back(line);
      }
    }
  }
  ASSERT_FALSE(want.empty());
  std::vector<std::string> shown;
  const auto doc = lines_of(read_file(root + "/docs/router.md"));
  for (std::size_t i = 0; i + 1 < doc.size(); ++i) {
    if (doc[i] == "<!-- snippet: tests/router/kv_router_test.cpp -->" && doc[i + 1] == "```cpp") {
      for (std::size_t j = i + 2; j < doc.size() && doc[j] != "```"; ++j) shown.push_back(doc[j]);
    }
  }
  EXPECT_EQ(shown, want) << "docs/router.md's snippet differs from the [docs] regions of "
                            "tests/router/kv_router_test.cpp; copy them over";
}

}  // namespace kv_router_test
}  // namespace kvbm::router
