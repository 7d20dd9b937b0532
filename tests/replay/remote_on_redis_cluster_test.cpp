// kvbm-replay (the built program, run as a child) with 8 instances sharing G4, once on a real
// Redis Cluster (3 primaries, 1 replica each, started by the test on loopback ports) through
// `--remote redis+cluster://...` and once on one redis-server through `--remote redis://...`:
// every deterministic figure of --json (hits per tier and G4, blocks, evictions, paths,
// per-instance figures, verification) is the same. Each run writes a fresh G4 namespace and
// every G4 write lands before the next request, so where the keys live must not matter.
// ctest label: remote_cluster (it starts a cluster).

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remote/redis_cluster.h"
#include "remote/redis_server.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace remote_on_redis_cluster_test {

using kvbm::test::RedisCluster;
using kvbm::test::RedisServer;
using test::ScratchDir;

/// Runs kvbm-replay on the first `limit` requests of the shipped trace with 8 instances and
/// `--remote url`; returns its --json (null, with a test failure, when it did not succeed).
nlohmann::json replay_on(const std::string& trace, const std::string& url, std::size_t limit) {
  ScratchDir dir("kvbm-replay-cluster");
  const std::string err = (dir.path() / "stderr").string();
  const std::string cmd = std::string(KVBM_REPLAY_BINARY) + " --trace '" + trace + "' --limit " +
                          std::to_string(limit) +
                          " --instances 8 --device-blocks 200 --host-blocks 1000"
                          " --disk-blocks 0 --json --quiet --remote '" +
                          url + "' 2>'" + err + "'";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return nullptr;
  }
  char buf[4096];
  for (std::size_t got = 0; (got = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, got);
  const int status = ::pclose(p);
  std::ifstream e(err);
  const std::string errors{std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>()};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << cmd << " failed (" << status << "):\n" << errors;
    return nullptr;
  }
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) ADD_FAILURE() << "not JSON:\n" << out << "\n" << errors;
  return j;
}

/// The result's figures without what depends on the clock.
nlohmann::json figures(nlohmann::json j) {
  nlohmann::json r = j["result"];
  for (const char* k : {"wall_seconds", "requests_per_second", "blocks_per_second", "cpu_seconds",
                        "blocks_per_cpu_second"})
    r.erase(k);
  for (auto& [name, path] : r["paths"].items()) path.erase("gb_per_s");
  return r;
}

TEST(ReplayOnRedisCluster, EightInstancesShowTheSameFiguresOnAClusterAsOnOneServer) {
  if (!RedisCluster::installed()) KVBM_SKIP_OR_FAIL(RedisCluster::kSkipMessage);
  const auto trace = test::shipped_trace_path();
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  constexpr std::size_t kRequests = 1'500;
  RedisServer server;
  const nlohmann::json one = replay_on(*trace, server.url(), kRequests);
  RedisCluster cluster;
  const nlohmann::json many = replay_on(*trace, cluster.url(), kRequests);
  ASSERT_FALSE(one.is_null() || one.is_discarded());
  ASSERT_FALSE(many.is_null() || many.is_discarded());
  const nlohmann::json a = figures(one);
  const nlohmann::json b = figures(many);
  EXPECT_EQ(a["requests"], kRequests);
  EXPECT_EQ(a["instances"]["count"], 8);
  EXPECT_GT(a["hits"]["G4"]["blocks"].get<std::size_t>(), 0u) << "no instance hit G4";
  EXPECT_EQ(a["verification"]["failures"], 0);
  EXPECT_EQ(a["audit"], "");
  std::cout << kRequests << " requests, 8 instances: " << a["hits"]["total"]["blocks"]
            << " blocks hit, " << a["hits"]["G4"]["blocks"] << " of them from G4, "
            << a["verification"]["blocks"] << " verified; " << a.size()
            << " top-level fields compared\n";
  EXPECT_EQ(a, b) << "the figures differ (one server -> cluster): "
                  << nlohmann::json::diff(a, b).dump(1);
  // The keys did spread over the cluster's primaries.
  std::size_t primaries_with_keys = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (cluster.is_primary(i) && std::stoul(cluster.node(i).command({"DBSIZE"})) > 0)
      ++primaries_with_keys;
  }
  EXPECT_EQ(primaries_with_keys, 3u);
}

}  // namespace remote_on_redis_cluster_test
}  // namespace kvbm::replay
