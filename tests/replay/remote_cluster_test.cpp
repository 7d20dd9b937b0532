// The cluster replay (replay/cluster.h) with a shared G4 on a real
// redis-server started by the test: the instances' G4 writes reach the
// router's index as REMOTE events, so the prefix the router expected on the
// chosen instance, G4 included, is block for block the one it onboarded;
// kv routing fetches fewer blocks over the network than round-robin for as
// many hits or more; and the figures repeat.

#include <gtest/gtest.h>

#include "kvbm/storage/storage.h"
#include "remote/redis_server.h"
#include "replay/replay.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace remote_cluster_test {

using test::first_requests;

using kvbm::test::RedisServer;

ReplayConfig shared_cluster(const RedisServer& server, router::RoutePolicy policy) {
  ReplayConfig c;
  c.layout = {.num_layers = 1, .outer_dim = 2, .page_size = 512, .inner_dim = 1, .dtype_bytes = 2};
  // G2 large enough that fetching a G4 run never evicts a later block of
  // the same prefix from G2 (onboarding would then stop short of what the
  // index rightly showed).
  c.device = {.blocks = 500};
  c.host = {.blocks = 8'000};
  c.disk = {};
  c.instances = 4;
  c.remote_urls = {server.url()};
  ClusterConfig k;
  k.policy = policy;
  c.router = k;
  return c;
}

TEST(ReplayRemoteCluster, TheIndexKnowsWhatG4HoldsAndKvFetchesLess) {
  if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage);
  const auto trace = first_requests(1'200);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  RedisServer server;
  const ReplayResult kv = run_replay(*trace, shared_cluster(server, router::RoutePolicy::kKv));
  const ReplayResult rr =
      run_replay(*trace, shared_cluster(server, router::RoutePolicy::kRoundRobin));
  for (const ReplayResult* r : {&kv, &rr}) {
    ASSERT_TRUE(r->cluster);
    EXPECT_EQ(r->audit, "");
    EXPECT_EQ(r->onboard_failed, 0u);
    EXPECT_EQ(r->verify_failures, 0u);
  }
  EXPECT_GT(kv.hit_blocks[TierId::kG4], 0u);
  EXPECT_EQ(kv.cluster->predicted_blocks, kv.cluster->found_blocks);
  EXPECT_EQ(kv.cluster->found_blocks, kv.hits());
  EXPECT_GE(kv.hits(), rr.hits());
  EXPECT_LT(2 * kv.hit_blocks[TierId::kG4], rr.hit_blocks[TierId::kG4]);
  // A fresh G4 namespace per run: the same figures again.
  const ReplayResult again = run_replay(*trace, shared_cluster(server, router::RoutePolicy::kKv));
  EXPECT_EQ(again.hit_blocks, kv.hit_blocks);
  EXPECT_EQ(again.hit_blocks[TierId::kG4], kv.hit_blocks[TierId::kG4]);
  EXPECT_EQ(again.cluster->requests, kv.cluster->requests);
}

}  // namespace remote_cluster_test
}  // namespace kvbm::replay
