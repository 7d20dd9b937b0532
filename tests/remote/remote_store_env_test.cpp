// The remote store on an Env (kvbm/env.h): its backoff and deadlines are
// decisions on the Env's clock, so a ManualClock drives them without a sleep.
// Real redis-server processes on 127.0.0.1; the only waits are the server's own
// restart.

#include <memory>

#include <gtest/gtest.h>

#include "kvbm/clock.h"
#include "kvbm/env.h"
#include "kvbm/remote/remote_store.h"
#include "remote/redis_server.h"
#include "remote/remote_test_util.h"

namespace kvbm {
namespace remote_store_env_test {

using test::RedisServer;
using namespace test;  // NOLINT(google-build-using-namespace): the shared test helpers
using namespace std::chrono_literals;

// A server that failed is retried once backoff_initial has passed on the Env's clock, and not
// before, however much real time the restart took.
TEST(RemoteStoreEnv, BackoffEndsWhenTheEnvClockPassesIt) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto clock = std::make_shared<ManualClock>();
  auto o = options_for({server.url()});
  o.backoff_initial = 2ms;  // on a real clock the restart below would outlast it many times
  o.backoff_max = 1s;
  o.connections_per_server = 1;  // one task per call: one attempt, one failure, one doubling
  o.env = std::make_shared<Env>(clock);
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 16, store->block_bytes());
  ASSERT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 16u);

  server.kill();
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 0u);  // fails: backoff starts
  EXPECT_FALSE(store->server_available(0));
  server.start();  // same port, empty: it answers, but the store is in backoff

  // No time has passed on the Env's clock: every call fails at once, without trying.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kUnavailable), 16u);
  }
  EXPECT_FALSE(store->server_available(0));
  EXPECT_EQ(server.command({"DBSIZE"}), "0") << "a put reached the server during the backoff";

  // Half the backoff: still waiting.
  clock->advance(o.backoff_initial / 2);
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kUnavailable), 16u);
  // The rest of it: the next call tries again, reconnects and stores every block.
  clock->advance(o.backoff_initial / 2);
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 16u);
  EXPECT_TRUE(store->server_available(0));
  EXPECT_EQ(server.command({"DBSIZE"}), "16");
  Destinations dst(blocks.hashes, store->block_bytes());
  ASSERT_EQ(count(store->get(dst.gets), RemoteStatus::kOk), 16u);
  EXPECT_EQ(dst.data, blocks.data);
}

// The backoff doubles per failure up to backoff_max, each step measured on the Env's clock.
TEST(RemoteStoreEnv, BackoffDoublesOnTheEnvClockUpToItsMaximum) {
  KVBM_NEED_REDIS();
  RedisServer server;
  auto clock = std::make_shared<ManualClock>();
  auto o = options_for({server.url()});
  o.backoff_initial = 10s;  // far longer than the test runs: only the Env's clock ends them
  o.backoff_max = 25s;
  o.connections_per_server = 1;  // one task per call: one attempt, one failure, one doubling
  o.env = std::make_shared<Env>(clock);
  auto store = RemoteStore::create(o);
  Blocks blocks(1, 4, store->block_bytes());
  server.kill();
  // Each failed attempt waits longer: 10 s, 20 s, then 25 s (the maximum) for good.
  for (const std::chrono::milliseconds wait : {10s, 20s, 25s, 25s}) {
    EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 0u);  // an attempt, failed
    clock->advance(wait - 1ms);
    const auto waiting = store->put(blocks.puts);  // still in backoff: refused at once
    EXPECT_EQ(count(waiting, RemoteStatus::kUnavailable), 4u) << "backoff " << wait.count();
    clock->advance(1ms);
  }
  server.start();  // the last backoff is over on the Env's clock: the next call is served
  EXPECT_EQ(count(store->put(blocks.puts), RemoteStatus::kOk), 4u);
  EXPECT_TRUE(store->server_available(0));
}

}  // namespace remote_store_env_test
}  // namespace kvbm
