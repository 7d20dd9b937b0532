// The replay as a cluster behind a router (ReplayConfig::router): the
// instances' KV events reach a KvIndexer, whose view is exact (every prefix
// the router expected on an instance is the prefix the instance found); kv
// routing finds more than round-robin and random; the baselines through the
// router place requests exactly as --assign does; the figures repeat run to
// run, and are the same whether the events travel in-process or over ZeroMQ.

#include <algorithm>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "kvbm/config.h"
#include "replay/replay.h"
#include "replay_test_util.h"
#include "zmq_tsan.h"  // the ZeroMQ transport: libzmq is not instrumented for TSan

namespace kvbm::replay {
namespace cluster_test {

using test::first_requests;

ReplayConfig cluster(std::size_t instances, router::RoutePolicy policy) {
  ReplayConfig c;
  c.device = {.blocks = 300};
  c.host = {.blocks = 1'500};
  c.disk = {.blocks = 3'000};
  c.instances = instances;
  c.move_bytes = false;
  ClusterConfig k;
  k.policy = policy;
  k.prefill_tokens_per_s = 31'000;
  c.router = k;
  return c;
}

void expect_same_figures(const ReplayResult& a, const ReplayResult& b) {
  EXPECT_EQ(a.hit_blocks, b.hit_blocks);
  EXPECT_EQ(a.hit_tokens, b.hit_tokens);
  EXPECT_EQ(a.hit_blocks[TierId::kG4], b.hit_blocks[TierId::kG4]);
  ASSERT_EQ(a.per_instance.size(), b.per_instance.size());
  for (std::size_t i = 0; i < a.per_instance.size(); ++i) {
    EXPECT_EQ(a.per_instance[i].requests, b.per_instance[i].requests) << "instance " << i;
    EXPECT_EQ(a.per_instance[i].hit_blocks, b.per_instance[i].hit_blocks) << "instance " << i;
  }
  ASSERT_TRUE(a.cluster && b.cluster);
  EXPECT_EQ(a.cluster->requests, b.cluster->requests);
  EXPECT_EQ(a.cluster->computed_tokens, b.cluster->computed_tokens);
  EXPECT_EQ(a.cluster->ttft_mean_s, b.cluster->ttft_mean_s);
  EXPECT_EQ(a.cluster->ttft_p99_s, b.cluster->ttft_p99_s);
  EXPECT_EQ(a.cluster->predicted_blocks, b.cluster->predicted_blocks);
}

TEST(ReplayCluster, TheIndexKnowsExactlyWhatEachInstanceHolds) {
  const auto trace = first_requests(1'500);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const ReplayResult r = run_replay(*trace, cluster(4, router::RoutePolicy::kKv));
  ASSERT_TRUE(r.cluster);
  const ClusterFigures& f = *r.cluster;
  EXPECT_EQ(r.audit, "");
  EXPECT_GT(f.events_applied, 0u);
  EXPECT_EQ(f.gaps, 0u);
  EXPECT_EQ(f.stale_decisions, 0u);
  // The events G1, G2 and G3 published are the index: the prefix the router
  // saw on the chosen instance is, block for block, the one it onboarded.
  EXPECT_GT(f.found_blocks, 0u);
  EXPECT_EQ(f.predicted_blocks, f.found_blocks);
  EXPECT_EQ(f.found_blocks, r.hits());
  std::uint64_t requests = 0;
  for (const auto n : f.requests) requests += n;
  EXPECT_EQ(requests, r.requests);
}

TEST(ReplayCluster, KvRoutingFindsMoreThanRoundRobinAndRandom) {
  const auto trace = first_requests(2'000);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const ReplayResult kv = run_replay(*trace, cluster(4, router::RoutePolicy::kKv));
  const ReplayResult rr = run_replay(*trace, cluster(4, router::RoutePolicy::kRoundRobin));
  const ReplayResult rnd = run_replay(*trace, cluster(4, router::RoutePolicy::kRandom));
  EXPECT_GT(kv.block_hit_ratio(), rr.block_hit_ratio() + 0.02);
  EXPECT_GT(kv.block_hit_ratio(), rnd.block_hit_ratio() + 0.02);
  // Fewer tokens to prefill, so the simulated first tokens come sooner.
  EXPECT_LT(kv.cluster->ttft_mean_s, rr.cluster->ttft_mean_s);
  // Round-robin spreads requests evenly; kv must not pile them on one instance.
  EXPECT_LT(rr.cluster->request_imbalance, 1.01);
  EXPECT_LT(kv.cluster->request_imbalance, 2.0);
}

TEST(ReplayCluster, RoundRobinThroughTheRouterPlacesRequestsAsAssignDoes) {
  const auto trace = first_requests(600);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  ReplayConfig plain = cluster(3, router::RoutePolicy::kRoundRobin);
  plain.router.reset();
  const ReplayResult a = run_replay(*trace, plain);
  const ReplayResult b = run_replay(*trace, cluster(3, router::RoutePolicy::kRoundRobin));
  EXPECT_EQ(a.hit_blocks, b.hit_blocks);
  ASSERT_EQ(a.per_instance.size(), b.per_instance.size());
  for (std::size_t i = 0; i < a.per_instance.size(); ++i) {
    EXPECT_EQ(a.per_instance[i].requests, b.per_instance[i].requests);
    EXPECT_EQ(a.per_instance[i].hit_blocks, b.per_instance[i].hit_blocks);
  }
}

TEST(ReplayCluster, TheFiguresRepeatRunToRun) {
  const auto trace = first_requests(800);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (const auto policy : {router::RoutePolicy::kKv, router::RoutePolicy::kRandom}) {
    SCOPED_TRACE(router::to_string(policy));
    expect_same_figures(run_replay(*trace, cluster(4, policy)),
                        run_replay(*trace, cluster(4, policy)));
  }
}

TEST(ReplayCluster, LoadWeightTradesReuseForBalance) {
  const auto trace = first_requests(1'500);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  // A slow prefill makes queues; with no load term kv chases prefixes alone.
  ReplayConfig greedy = cluster(4, router::RoutePolicy::kKv);
  greedy.router->prefill_tokens_per_s = 2'000;
  greedy.router->options.load_weight = 0;
  ReplayConfig balanced = greedy;
  balanced.router->options.load_weight = 1;
  const ReplayResult g = run_replay(*trace, greedy);
  const ReplayResult b = run_replay(*trace, balanced);
  EXPECT_LT(b.cluster->token_imbalance, g.cluster->token_imbalance);
  EXPECT_LT(b.cluster->ttft_p99_s, g.cluster->ttft_p99_s);
}

TEST(ReplayCluster, TheRouterSeriesGoToTheReplaysRegistry) {
  const auto trace = first_requests(300);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (int run = 0; run < 2; ++run) {  // a sweep builds one cluster after another on one registry
    ReplayConfig c = cluster(2, router::RoutePolicy::kKv);
    auto registry = std::make_shared<prometheus::Registry>();
    c.metrics_registry = registry;
    const ReplayResult r = run_replay(*trace, c);
    ASSERT_TRUE(r.cluster);
    // The replay is over and its cluster gone: its series went with it.
    EXPECT_EQ(prometheus::TextSerializer().Serialize(registry->Collect()).find("kvbm_router_"),
              std::string::npos);
  }
  // While it runs, the series are there: read them when the replay ends.
  ReplayConfig c = cluster(2, router::RoutePolicy::kKv);
  auto registry = std::make_shared<prometheus::Registry>();
  c.metrics_registry = registry;
  std::string text;
  c.progress_every = 300;
  c.progress = [&](std::size_t done, std::size_t total) {
    if (done == total) text = prometheus::TextSerializer().Serialize(registry->Collect());
  };
  (void)run_replay(*trace, c);
  EXPECT_NE(text.find("kvbm_router_decisions_total{"), std::string::npos) << text;
  EXPECT_NE(text.find("kvbm_router_events_applied_total{"), std::string::npos);
  EXPECT_NE(text.find("pool=\"router\""), std::string::npos);
}

TEST(ReplayCluster, WithoutEventsTheRouterFindsLessThanFedButMoreThanRoundRobin) {
  const auto trace = first_requests(1500);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  ReplayConfig none = cluster(4, router::RoutePolicy::kKv);
  none.router->transport = EventTransport::kNone;
  const ReplayResult fed = run_replay(*trace, cluster(4, router::RoutePolicy::kKv));
  const ReplayResult blind = run_replay(*trace, none);
  const ReplayResult rr = run_replay(*trace, cluster(4, router::RoutePolicy::kRoundRobin));
  EXPECT_EQ(blind.cluster->transport, "none");
  EXPECT_EQ(blind.cluster->events_applied, 0U);
  EXPECT_LT(blind.block_hit_ratio(), fed.block_hit_ratio());
  EXPECT_GT(blind.block_hit_ratio(), rr.block_hit_ratio());
  EXPECT_EQ(blind.audit, "");
  // Deterministic: its TTL runs in trace time.
  expect_same_figures(blind, run_replay(*trace, none));
}

#if KVBM_HAVE_ZMQ
TEST(ReplayCluster, ZeroMqEventsGiveTheSameFiguresAsInProcess) {
  const auto trace = first_requests(500);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  ReplayConfig zmq = cluster(3, router::RoutePolicy::kKv);
  zmq.router->transport = EventTransport::kZmq;
  const ReplayResult a = run_replay(*trace, cluster(3, router::RoutePolicy::kKv));
  const ReplayResult b = run_replay(*trace, zmq);
  expect_same_figures(a, b);
  EXPECT_EQ(b.cluster->transport, "zmq");
  EXPECT_EQ(b.cluster->predicted_blocks, b.cluster->found_blocks);
}
#endif

}  // namespace cluster_test
}  // namespace kvbm::replay
