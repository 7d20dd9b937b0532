// The replay over several engine instances (ReplayConfig::instances), sharing
// nothing or a G4 on a real redis-server started by the test: the totals are
// the sum of the instances, the shared tier serves blocks another instance
// computed with every byte verified, and the figures are the same on every run.

#include <algorithm>

#include <gtest/gtest.h>

#include "kvbm/storage/storage.h"
#include "remote/redis_server.h"
#include "replay/replay.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace remote_instances_test {

using test::first_requests;

using kvbm::test::RedisServer;

ReplayConfig small(std::size_t instances) {
  ReplayConfig c;
  c.device = {.blocks = 200};
  c.host = {.blocks = 1'000};
  c.disk = {};
  c.instances = instances;
  return c;
}

void expect_sum_of_instances(const ReplayResult& r) {
  ASSERT_EQ(r.per_instance.size(), r.instances);
  ReplayResult::InstanceFigures sum;
  for (const auto& x : r.per_instance) {
    sum.requests += x.requests;
    sum.blocks += x.blocks;
    for (const TierId t : kTierIds) sum.hit_blocks[t] += x.hit_blocks[t];
  }
  EXPECT_EQ(sum.requests, r.requests);
  EXPECT_EQ(sum.blocks, r.blocks);
  EXPECT_EQ(sum.hit_blocks, r.hit_blocks);
}

TEST(ReplayInstances, RoundRobinSplitsTheRequestsAndTheTotalsAddUp) {
  const auto trace = first_requests(400);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  ReplayConfig c = small(3);
  c.move_bytes = false;
  const ReplayResult r = run_replay(*trace, c);
  EXPECT_EQ(r.requests, 400u);
  ASSERT_EQ(r.per_instance.size(), 3u);
  EXPECT_EQ(r.per_instance[0].requests, 134u);
  EXPECT_EQ(r.per_instance[1].requests, 133u);
  EXPECT_EQ(r.per_instance[2].requests, 133u);
  expect_sum_of_instances(r);
  EXPECT_EQ(r.hit_blocks[TierId::kG4], 0u);
  EXPECT_EQ(r.audit, "");
  // Sharing nothing, instance i is a replay of requests i, i + 3, ... alone.
  for (std::size_t i = 0; i < 3; ++i) {
    Trace part = *trace;
    part.requests.clear();
    for (std::size_t k = i; k < trace->requests.size(); k += 3)
      part.requests.push_back(trace->requests[k]);
    ReplayConfig one = small(1);
    one.move_bytes = false;
    const ReplayResult alone = run_replay(part, one);
    EXPECT_EQ(alone.blocks, r.per_instance[i].blocks) << "instance " << i;
    EXPECT_EQ(alone.hit_blocks, r.per_instance[i].hit_blocks) << "instance " << i;
    EXPECT_TRUE(alone.per_instance.empty());
  }
}

TEST(ReplayInstances, RandomAssignmentIsTheSameOnEveryRun) {
  const auto trace = first_requests(300);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  ReplayConfig c = small(4);
  c.move_bytes = false;
  c.assign_random = true;
  c.assign_seed = 7;
  const ReplayResult a = run_replay(*trace, c);
  const ReplayResult b = run_replay(*trace, c);
  ASSERT_EQ(a.per_instance.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.per_instance[i].requests, b.per_instance[i].requests);
    EXPECT_EQ(a.per_instance[i].hit_blocks, b.per_instance[i].hit_blocks);
  }
  expect_sum_of_instances(a);
}

TEST(ReplayInstances, SharedG4ServesOtherInstancesBlocksVerifiedAndRepeatable) {
  if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage);
  const auto trace = first_requests(600);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  RedisServer server;
  ReplayConfig apart = small(2);
  const ReplayResult without = run_replay(*trace, apart);
  ReplayConfig shared = small(2);
  shared.remote_urls = {server.url()};
  const ReplayResult with = run_replay(*trace, shared);
  const ReplayResult again = run_replay(*trace, shared);  // a fresh namespace: nothing carried over

  EXPECT_TRUE(with.bytes_checked);
  EXPECT_GT(with.verified_blocks, 0u);
  EXPECT_EQ(with.verify_failures, 0u);
  EXPECT_EQ(with.audit, "");
  EXPECT_GT(with.hit_blocks[TierId::kG4], 0u) << "no instance found another's blocks in G4";
  EXPECT_GT(with.hits(), without.hits()) << "sharing G4 should find more";
  expect_sum_of_instances(with);
  // Deterministic: every block written to G4 lands before the next request.
  EXPECT_EQ(again.hit_blocks, with.hit_blocks);
  EXPECT_EQ(again.hit_blocks[TierId::kG4], with.hit_blocks[TierId::kG4]);
  EXPECT_EQ(again.verify_failures, 0u);
}

}  // namespace remote_instances_test
}  // namespace kvbm::replay
