#include "kvbm/metrics.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace metrics_test {

using test::expect_balanced;
using test::metric_value;
using test::register_one;
using test::root;
using test::seq;
using test::stage_ok;

const std::vector<std::string> kCounters = {
    "kvbm_allocations_total",
    "kvbm_allocations_from_reset_total",
    "kvbm_evictions_total",
    "kvbm_registrations_total",
    "kvbm_duplicate_blocks_total",
    "kvbm_registration_dedup_total",
    "kvbm_stagings_total",
    "kvbm_match_hashes_requested_total",
    "kvbm_match_blocks_returned_total",
    "kvbm_scan_hashes_requested_total",
    "kvbm_scan_blocks_returned_total",
};
const std::vector<std::string> kGauges = {
    "kvbm_inflight_mutable",
    "kvbm_inflight_immutable",
    "kvbm_reset_pool_size",
    "kvbm_inactive_pool_size",
};

using Values = std::map<std::string, double>;

// Every one of the 15 series of `pool`, by name; a missing series fails the test.
Values all_series(prometheus::Registry& registry, const std::string& pool) {
  Values out;
  for (const auto* names : {&kCounters, &kGauges}) {
    for (const auto& name : *names) {
      const auto v = metric_value(registry, name, pool);
      EXPECT_TRUE(v.has_value()) << name << "{pool=\"" << pool << "\"} is missing";
      if (v) out[name] = *v;
    }
  }
  return out;
}

// Names of the series (among the 15) that exist for `pool`.
std::vector<std::string> present_series(prometheus::Registry& registry, const std::string& pool) {
  std::vector<std::string> out;
  for (const auto* names : {&kCounters, &kGauges}) {
    for (const auto& name : *names) {
      if (metric_value(registry, name, pool)) out.push_back(name);
    }
  }
  return out;
}

void expect_values(const Values& actual, const Values& expected) {
  ASSERT_EQ(actual.size(), 15U);
  for (const auto& [name, value] : expected) {
    const auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << name;
    EXPECT_EQ(it->second, value) << name;
  }
  for (const auto& [name, value] : actual) {
    EXPECT_TRUE(expected.contains(name)) << "no expectation for " << name;
  }
}

TEST(Metrics, FreshPoolPublishesAllSeriesWithPoolLabel) {
  auto m = BlockManager<G1>::builder().block_count(5).block_size(16).build();
  auto& registry = *m.metrics_registry();
  Values expected;
  for (const auto& c : kCounters) expected[c] = 0;
  expected["kvbm_inflight_mutable"] = 0;
  expected["kvbm_inflight_immutable"] = 0;
  expected["kvbm_reset_pool_size"] = 5;
  expected["kvbm_inactive_pool_size"] = 0;
  expect_values(all_series(registry, "G1"), expected);
  // Every series of these families carries the pool label.
  for (const auto& family : registry.Collect()) {
    for (const auto& metric : family.metric) {
      ASSERT_EQ(metric.label.size(), 1U) << family.name;
      EXPECT_EQ(metric.label[0].name, "pool") << family.name;
    }
  }
}

// The scripted scenario; see the comments for the running totals.
struct Scenario {
  explicit Scenario(DuplicatePolicy policy, std::shared_ptr<prometheus::Registry> registry,
                    std::string name)
      : m(BlockManager<G1>::builder()
              .block_count(6)
              .block_size(16)
              .duplicate_policy(policy)
              .metrics_registry(std::move(registry))
              .pool_name(std::move(name))
              .build()) {}

  void run() {
    const SequenceHash h0 = seq(0), h1 = seq(1), h2 = root(1000), h3 = root(1001);
    const SequenceHash miss = root(2000);
    // 1. allocate 2 (allocations 2, from reset 2).
    auto first = m.allocate_blocks(2);
    ASSERT_TRUE(first);
    // 2. stage b0 with h0; b1 first with a wrong size (no staging), then h1 (stagings 2).
    auto c0 = stage_ok(std::move((*first)[0]), h0);
    auto bad = std::move((*first)[1]).stage(h1, 15);
    ASSERT_FALSE(bad.ok());
    auto c1 = stage_ok(std::move(bad.error().block), h1);
    // 3. register both (registrations 2).
    auto i0 = m.register_block(std::move(c0));
    auto i1 = m.register_block(std::move(c1));
    // 4. allocate 1 (allocations 3, from reset 3); stage h0 again (stagings 3) and register:
    //    Allow: a duplicate (registrations 3, duplicates 1); Reject: deduplicated (dedup 1).
    auto i2 = register_one(m, h0);
    // 5. allocate 1 (allocations 4, from reset 4), stage h2 (stagings 4), register
    //    (registrations Allow 4 / Reject 3).
    auto i3 = register_one(m, h2);
    // 6. drop every immutable handle: h0, h1, h2 inactive; the Allow duplicate to reset.
    { auto gone = std::move(i0); }
    { auto gone = std::move(i1); }
    { auto gone = std::move(i2); }
    { auto gone = std::move(i3); }
    // 7. match [h0, h1, miss]: 3 requested, 2 returned; dropped at once (h2 is now the LRU).
    { auto matched = m.match_blocks(std::vector{h0, h1, miss}); }
    // 8. scan [miss, h1]: 2 requested, 1 returned; h1 stays held.
    auto scanned = m.scan_matches(std::vector{miss, h1});
    ASSERT_EQ(scanned.size(), 1U);
    held_immutable.emplace(std::move(scanned[0]));
    // A failed allocation (3 reset + 2 inactive < 6) changes no counter and no gauge.
    held_mutable = m.allocate_blocks(6);
    ASSERT_FALSE(held_mutable.has_value());
    // 9. allocate 4: 3 from reset, 1 eviction (h2) (allocations 8, from reset 7, evictions 1).
    held_mutable = m.allocate_blocks(4);
    ASSERT_TRUE(held_mutable);
    // Stage one (stagings 5) and keep it complete, drop one mutable back to reset.
    held_complete.emplace(stage_ok(std::move((*held_mutable)[2]), h3));
    held_mutable->pop_back();
    held_mutable->pop_back();  // the moved-from one
    // End: in use h1 (immutable) + 2 mutable + 1 complete, h0 inactive, 1 reset.
  }

  BlockManager<G1> m;
  std::optional<std::vector<MutableBlock<G1>>> held_mutable;
  std::optional<CompleteBlock<G1>> held_complete;
  std::optional<ImmutableBlock<G1>> held_immutable;
};

Values expected_after_scenario(DuplicatePolicy policy) {
  const bool allow = policy == DuplicatePolicy::kAllow;
  return {
      {"kvbm_allocations_total", 8},
      {"kvbm_allocations_from_reset_total", 7},
      {"kvbm_evictions_total", 1},
      {"kvbm_registrations_total", allow ? 4 : 3},
      {"kvbm_duplicate_blocks_total", allow ? 1 : 0},
      {"kvbm_registration_dedup_total", allow ? 0 : 1},
      {"kvbm_stagings_total", 5},
      {"kvbm_match_hashes_requested_total", 3},
      {"kvbm_match_blocks_returned_total", 2},
      {"kvbm_scan_hashes_requested_total", 2},
      {"kvbm_scan_blocks_returned_total", 1},
      {"kvbm_inflight_mutable", 3},
      {"kvbm_inflight_immutable", 1},
      {"kvbm_reset_pool_size", 1},
      {"kvbm_inactive_pool_size", 1},
  };
}

class MetricsScenario : public ::testing::TestWithParam<DuplicatePolicy> {};

TEST_P(MetricsScenario, ExactValuesOfEverySeries) {
  auto registry = std::make_shared<prometheus::Registry>();
  Scenario s(GetParam(), registry, "scripted");
  ASSERT_NO_FATAL_FAILURE(s.run());
  const auto c = s.m.pool_counts();
  ASSERT_EQ(c.reset, 1U);
  ASSERT_EQ(c.inactive, 1U);
  ASSERT_EQ(c.mutable_out, 3U);
  ASSERT_EQ(c.immutable_out, 1U);
  expect_balanced(s.m);
  EXPECT_EQ(s.m.metrics_registry(), registry);
  Values expected = expected_after_scenario(GetParam());
  expect_values(all_series(*registry, "scripted"), expected);

  // Drop the held immutable block and empty the inactive pool: 2 more evictions.
  s.held_immutable.reset();
  EXPECT_EQ(s.m.reset_inactive_pool(), 2U);
  expected["kvbm_evictions_total"] = 3;
  expected["kvbm_inflight_immutable"] = 0;
  expected["kvbm_inactive_pool_size"] = 0;
  expected["kvbm_reset_pool_size"] = 3;
  expect_values(all_series(*registry, "scripted"), expected);

  // Return everything: the gauges follow.
  s.held_mutable.reset();
  s.held_complete.reset();
  expected["kvbm_inflight_mutable"] = 0;
  expected["kvbm_reset_pool_size"] = 6;
  expect_values(all_series(*registry, "scripted"), expected);
  expect_balanced(s.m);
}

INSTANTIATE_TEST_SUITE_P(BothPolicies, MetricsScenario,
                         ::testing::Values(DuplicatePolicy::kAllow, DuplicatePolicy::kReject),
                         [](const ::testing::TestParamInfo<DuplicatePolicy>& p) {
                           return p.param == DuplicatePolicy::kAllow ? "Allow" : "Reject";
                         });

TEST(Metrics, TwoManagersShareARegistryUnderDifferentPoolNames) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto a = BlockManager<G1>::builder()
               .block_count(4)
               .block_size(16)
               .metrics_registry(registry)
               .pool_name("a")
               .build();
  auto b = BlockManager<G1>::builder()
               .block_count(2)
               .block_size(16)
               .metrics_registry(registry)
               .pool_name("b")
               .build();
  EXPECT_EQ(a.metrics_registry(), b.metrics_registry());
  auto held = register_one(a, seq(0));
  auto mut = a.allocate_blocks(2);
  ASSERT_TRUE(mut);
  EXPECT_EQ(metric_value(*registry, "kvbm_allocations_total", "a"), 3.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_registrations_total", "a"), 1.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_reset_pool_size", "a"), 1.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_inflight_mutable", "a"), 2.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_inflight_immutable", "a"), 1.0);
  // b is untouched.
  Values expected_b;
  for (const auto& c : kCounters) expected_b[c] = 0;
  expected_b["kvbm_inflight_mutable"] = 0;
  expected_b["kvbm_inflight_immutable"] = 0;
  expected_b["kvbm_reset_pool_size"] = 2;
  expected_b["kvbm_inactive_pool_size"] = 0;
  expect_values(all_series(*registry, "b"), expected_b);
  // One family per metric name, with one series per pool.
  for (const auto& family : registry->Collect()) {
    EXPECT_EQ(family.metric.size(), 2U) << family.name;
  }
  // The test helper reads through the manager as well.
  EXPECT_EQ(metric_value(b, "kvbm_reset_pool_size"), 2.0);
}

TEST(Metrics, SamePoolNameTwiceInOneRegistryIsAUsageError) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = BlockManager<G1>::builder()
                   .block_count(4)
                   .block_size(16)
                   .metrics_registry(registry)
                   .build();  // pool "G1"
  auto held = register_one(first, seq(0));
  try {
    (void)BlockManager<G2>::builder()
        .block_count(4)
        .block_size(16)
        .metrics_registry(registry)
        .pool_name("G1")
        .build();
    ADD_FAILURE() << "a second pool named G1 in the same registry was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pool=\"G1\""), std::string::npos) << what;
    EXPECT_NE(what.find("pool_name"), std::string::npos) << what;
  }
  // The first pool's series are intact.
  EXPECT_EQ(metric_value(*registry, "kvbm_registrations_total", "G1"), 1.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_reset_pool_size", "G1"), 3.0);
  for (const auto& family : registry->Collect()) {
    EXPECT_EQ(family.metric.size(), 1U) << family.name;
  }
  expect_balanced(first);
}

TEST(Metrics, SeriesAreRemovedOnceManagerAndBlocksAreGone) {
  auto registry = std::make_shared<prometheus::Registry>();
  std::optional<ImmutableBlock<G1>> held;
  {
    auto m = BlockManager<G1>::builder()
                 .block_count(4)
                 .block_size(16)
                 .metrics_registry(registry)
                 .pool_name("gone")
                 .build();
    held.emplace(register_one(m, seq(0)));
    EXPECT_EQ(present_series(*registry, "gone").size(), 15U);
  }
  // The manager is gone but a block is out: the pool and its series live on.
  EXPECT_EQ(present_series(*registry, "gone").size(), 15U);
  EXPECT_EQ(metric_value(*registry, "kvbm_inflight_immutable", "gone"), 1.0);
  held.reset();
  EXPECT_TRUE(present_series(*registry, "gone").empty());

  // The name is free again.
  auto again = BlockManager<G1>::builder()
                   .block_count(2)
                   .block_size(16)
                   .metrics_registry(registry)
                   .pool_name("gone")
                   .build();
  EXPECT_EQ(metric_value(*registry, "kvbm_allocations_total", "gone"), 0.0);
  EXPECT_EQ(metric_value(*registry, "kvbm_reset_pool_size", "gone"), 2.0);
}

TEST(Metrics, SeriesAreRemovedWhenManagerGoesWithNoBlocksOut) {
  auto registry = std::make_shared<prometheus::Registry>();
  {
    auto m = BlockManager<G3>::builder()
                 .block_count(2)
                 .block_size(16)
                 .metrics_registry(registry)
                 .build();
    { auto dropped = register_one(m, seq(0)); }  // inactive blocks do not keep the pool
    EXPECT_EQ(present_series(*registry, "G3").size(), 15U);
  }
  EXPECT_TRUE(present_series(*registry, "G3").empty());
}

TEST(Metrics, PoolMetricsDirectly) {
  auto registry = std::make_shared<prometheus::Registry>();
  {
    PoolMetrics pm(registry, "direct");
    EXPECT_EQ(pm.pool(), "direct");
    EXPECT_EQ(pm.registry(), registry);
    PoolCounterDelta d;
    d.allocations = 3;
    d.scan_blocks_returned = 2;
    pm.add(d);
    pm.add(d);
    pm.add_staging();
    pm.set_inflight_mutable(7);
    pm.set_inactive_pool_size(9);
    EXPECT_EQ(metric_value(*registry, "kvbm_allocations_total", "direct"), 6.0);
    EXPECT_EQ(metric_value(*registry, "kvbm_scan_blocks_returned_total", "direct"), 4.0);
    EXPECT_EQ(metric_value(*registry, "kvbm_stagings_total", "direct"), 1.0);
    EXPECT_EQ(metric_value(*registry, "kvbm_evictions_total", "direct"), 0.0);
    EXPECT_EQ(metric_value(*registry, "kvbm_inflight_mutable", "direct"), 7.0);
    EXPECT_EQ(metric_value(*registry, "kvbm_inactive_pool_size", "direct"), 9.0);
    EXPECT_THROW(PoolMetrics(registry, "direct"), UsageError);
  }
  EXPECT_TRUE(present_series(*registry, "direct").empty());
  EXPECT_THROW(PoolMetrics(nullptr, "x"), UsageError);
}

}  // namespace metrics_test
}  // namespace kvbm
