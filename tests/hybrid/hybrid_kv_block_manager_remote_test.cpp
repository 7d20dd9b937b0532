// tests/hybrid/hybrid_kv_block_manager_remote_test.cpp: a hybrid model's groups through G4,
// against a real redis-server on 127.0.0.1 (tests/remote/redis_server.h): two managers share
// G4, and the second finds the first's blocks per group, only what its cut reads, never
// another group's.

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hybrid/hybrid_test_util.h"
#include "kvbm/hybrid/hybrid_kv_block_manager.h"
#include "remote/redis_server.h"
#include "skip_or_fail.h"
#include "test_util.h"

namespace kvbm {
namespace hybrid_kv_block_manager_remote_test {

using test::expect_clean;
using test::expect_served;
using test::RedisServer;
using test::serve;

#define KVBM_NEED_REDIS()                                                        \
  do {                                                                           \
    if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage); \
  } while (0)

constexpr std::size_t kPrompt = 40;  // blocks of 16 tokens

// G1 and G2 of 64 blocks a group, G4 at `url`.
HybridKvBlockManagerConfig remote_config(std::vector<KvCacheGroupSpec> groups,
                                         const std::string& url) {
  HybridKvBlockManagerConfig c =
      test::hybrid_config(std::move(groups), TierArray<std::size_t>{{64, 64, 0, 0}});
  c.base.remote.urls = {url};
  c.base.remote.model = "model-a@1";
  c.base.remote.dtype = "bf16";
  c.base.remote.connect_timeout = std::chrono::milliseconds(200);
  c.base.remote.command_timeout = std::chrono::milliseconds(500);
  return c;
}

TEST(HybridKvBlockManagerRemote, TwoManagersShareG4PerGroup) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto config = remote_config({test::full(0), test::window(1)}, server.url());
  const auto a = test::chain(kPrompt, 1);
  auto first = HybridKvBlockManager::build(config);
  serve(*first, a);
  auto second = HybridKvBlockManager::build(config);
  const std::size_t limit = kPrompt * test::kTokens - 1;
  const HybridProbe p = second->probe(a, limit);
  EXPECT_EQ(p.tokens, 624u);
  EXPECT_EQ(p.found[0][TierId::kG4], 39u);
  EXPECT_EQ(p.found[1][TierId::kG4], 8u);
  HybridOnboardHandle h = second->onboard(a, limit);
  EXPECT_EQ(h.counts(0).from(TierId::kG4), 39u);
  EXPECT_EQ(h.counts(1).from(TierId::kG4), 8u) << "only the window's tail is fetched";
  EXPECT_EQ(h.counts(1).total(), 8u);
  {
    const PrefixHit<G1> hit = h.take_hit();
    EXPECT_EQ(hit.tokens, 624u);
    expect_served(*second, a, hit);
  }
  expect_clean(*first);
  expect_clean(*second);
}

// Two groups of the same geometry and the same hashes: the first manager stores only
// group 0's blocks (under group 0's keys); the second finds them for group 0 and not
// for group 1, even when asked for group 0's very keys.
TEST(HybridKvBlockManagerRemote, AGroupsBlocksAreNeverServedForAnother) {
  KVBM_NEED_REDIS();
  RedisServer server;
  const auto config = remote_config({test::full(0), test::full(1)}, server.url());
  const auto a = test::chain(8, 1);
  auto first = HybridKvBlockManager::build(config);
  const auto keys0 = first->core().group_hashes(0, a);
  test::compute(first->group(0), keys0);
  first->drain();
  auto second = HybridKvBlockManager::build(config);
  for (const auto& where : second->group(0).locate(keys0)) EXPECT_EQ(where, TierId::kG4);
  for (const auto& where : second->group(1).locate(keys0)) EXPECT_FALSE(where.has_value());
  EXPECT_EQ(second->probe(a).tokens, 0u) << "group 1 has nothing in G4";
  EXPECT_EQ(serve(*second, a), 0u);
  expect_clean(*first);
  expect_clean(*second);
}

}  // namespace hybrid_kv_block_manager_remote_test
}  // namespace kvbm
