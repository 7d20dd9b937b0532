// KvRouter without KV events (set_approximate): the router remembers where it
// sent each prefix, for a TTL, in a bounded table.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/clock.h"
#include "kvbm/error.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "router/router_test_util.h"

namespace kvbm::router {
namespace kv_router_approximate_test {

using namespace std::chrono_literals;
using test::batch;
using test::stored;

struct Cluster {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  KvIndexer index;
  InstanceId a = index.add_instance("a");
  InstanceId b = index.add_instance("b");
  std::unique_ptr<KvRouter> router;

  explicit Cluster(std::size_t max_blocks = 1 << 20) {
    KvRouterOptions o;
    o.block_size = 16;
    o.load_weight = 0;  // the prefix alone decides
    o.approximate_ttl = 1000ms;
    o.approximate_max_blocks = max_blocks;
    o.clock = clock;
    router = std::make_unique<KvRouter>(index, o);
    router->set_approximate(a);
    router->set_approximate(b);
  }
  RouteDecision route(const std::vector<std::uint64_t>& hashes) {
    RouteDecision d = router->route(hashes, hashes.size() * 16);
    router->finish(d);
    return d;
  }
};

TEST(KvRouterApproximate, ARoutedPrefixIsRoutedBackToWhereItWent) {
  Cluster c;
  const std::vector<std::uint64_t> r = {1, 2, 3, 4};
  const RouteDecision first = c.route(r);
  EXPECT_EQ(first.overlap.prefix_blocks, 0U);
  for (int i = 0; i < 5; ++i) {
    const RouteDecision again = c.route({1, 2, 3, 4, 5});
    EXPECT_EQ(again.instance, first.instance);
    EXPECT_GE(again.overlap.prefix_blocks, 4U);
    EXPECT_EQ(again.overlap.per_tier[TierId::kG1], again.overlap.prefix_blocks);
  }
  // A prefix the other instance was sent goes there.
  const InstanceId other = first.instance == c.a ? c.b : c.a;
  c.router->set_approximate(first.instance, false);  // forgets what it was sent
  c.router->set_approximate(first.instance, true);
  const RouteDecision moved = c.route({1, 2, 3, 4});
  const RouteDecision back = c.route({1, 2, 3, 4});
  EXPECT_EQ(back.instance, moved.instance);
  EXPECT_EQ(back.overlap.prefix_blocks, 4U);
  (void)other;
}

TEST(KvRouterApproximate, EntriesExpireAfterTheTtl) {
  Cluster c;
  const std::vector<std::uint64_t> r = {7, 8};
  const RouteDecision first = c.route(r);
  c.clock->advance(900ms);
  EXPECT_EQ(c.router->costs(r, 32)[first.instance], 0.0);  // held: nothing to compute
  c.clock->advance(200ms);                                 // 1.1 s after it was sent
  const auto costs = c.router->costs(r, 32);
  EXPECT_EQ(costs[0], 32.0);
  EXPECT_EQ(costs[1], 32.0);
}

TEST(KvRouterApproximate, TheTableIsBoundedAndDropsTailsFirst) {
  Cluster c(3);
  const RouteDecision d = c.route({1, 2, 3, 4});
  // Three entries kept: the request's head three (its tail was recorded first).
  const RouteDecision again = c.route({1, 2, 3, 4});
  EXPECT_EQ(again.instance, d.instance);
  EXPECT_EQ(again.overlap.prefix_blocks, 3U);
}

TEST(KvRouterApproximate, EventFedAndApproximateInstancesSideBySide) {
  Cluster c;
  c.router->set_approximate(c.b, false);  // b publishes events
  c.index.apply(c.b, 0, batch({stored({10, 11, 12})}));
  EXPECT_EQ(c.route({10, 11, 12}).instance, c.b);
  // A prompt nobody holds goes to either; sent to a, it comes back to a.
  const RouteDecision d = c.route({20, 21, 22});
  if (d.instance == c.a) {
    EXPECT_EQ(c.route({20, 21, 22}).instance, c.a);
  }
}

TEST(KvRouterApproximate, BadOptionsAreRefused) {
  KvIndexer index;
  KvRouterOptions o;
  o.approximate_ttl = 0ms;
  EXPECT_THROW(KvRouter(index, o), UsageError);
  o.approximate_ttl = 1000ms;
  o.approximate_max_blocks = 0;
  EXPECT_THROW(KvRouter(index, o), UsageError);
}

}  // namespace kv_router_approximate_test
}  // namespace kvbm::router
