// Tests of kvbm/detail/series_set.h: base labels on every series, a series the
// registry already holds refused by name with what to do, and every series
// removed when its set (or an owner whose construction failed) goes.

#include "kvbm/detail/series_set.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm::detail {
namespace series_set_test {

/// The number of series of family `name` in the registry (0 when absent).
std::size_t series(const prometheus::Registry& r, const std::string& name) {
  for (const auto& f : r.Collect()) {
    if (f.name == name) return f.metric.size();
  }
  return 0;
}

TEST(SeriesSet, EverySeriesCarriesTheBaseLabelsAndGoesWithTheSet) {
  auto registry = std::make_shared<prometheus::Registry>();
  {
    SeriesSet set(registry, {{"pool", "G2"}}, "PoolMetrics", "name the pool");
    set.counter("kvbm_test_total", "a test counter", {{"outcome", "hit"}})->Increment(3);
    set.gauge("kvbm_test_gauge", "a test gauge")->Set(7);
    const auto families = registry->Collect();
    ASSERT_EQ(series(*registry, "kvbm_test_total"), 1u);
    for (const auto& f : families) {
      for (const auto& m : f.metric) {
        bool pool = false;
        for (const auto& l : m.label) pool = pool || (l.name == "pool" && l.value == "G2");
        EXPECT_TRUE(pool) << f.name;
      }
    }
  }
  EXPECT_EQ(series(*registry, "kvbm_test_total"), 0u);
  EXPECT_EQ(series(*registry, "kvbm_test_gauge"), 0u);
}

TEST(SeriesSet, ASeriesTheRegistryHoldsIsRefusedByNameWithWhatToDo) {
  auto registry = std::make_shared<prometheus::Registry>();
  SeriesSet first(registry, {{"path", "G2_to_G3"}}, "TransferMetrics", "name each engine");
  first.counter("kvbm_test_total", "t");
  SeriesSet second(registry, {{"path", "G2_to_G3"}}, "TransferMetrics", "name each engine");
  try {
    second.counter("kvbm_test_total", "t");
    FAIL() << "a second series of the same name and labels was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kvbm_test_total{path=\"G2_to_G3\"}"), std::string::npos) << what;
    EXPECT_NE(what.find("name each engine"), std::string::npos) << what;
  }
  EXPECT_THROW(SeriesSet(nullptr, {}, "X", "y"), UsageError);
}

TEST(SeriesSet, AnOwnerWhoseConstructionFailsLeavesNothingBehind) {
  auto registry = std::make_shared<prometheus::Registry>();
  SeriesSet squatter(registry, {{"path", "p"}}, "test", "");
  squatter.counter("kvbm_transfer_failed_blocks_total", "t");  // the third of its series
  EXPECT_THROW(TransferMetrics(registry, "p"), UsageError);
  EXPECT_EQ(series(*registry, "kvbm_transfer_blocks_total"), 0u);
  EXPECT_EQ(series(*registry, "kvbm_transfer_bytes_total"), 0u);
  TransferMetrics other(registry, "q");  // another path is fine
  EXPECT_EQ(series(*registry, "kvbm_transfer_blocks_total"), 1u);
}

}  // namespace series_set_test
}  // namespace kvbm::detail
