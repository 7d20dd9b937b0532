// kvbm/detail/series_set.h: the Prometheus series one object adds to a
// registry, removed again when it goes.
//
// Every metrics holder of kvbm (a pool, a transfer path, an offload pipeline,
// the remote store, the router, onboarding) adds its series through one
// SeriesSet: each series carries the set's base labels (pool="G2",
// path="G2_to_G3", ...) plus its own; a series the registry already holds is
// refused with a UsageError that names it and says what to do (`hint`), and
// nothing is left behind (the series added before it are removed when the
// set is destroyed, as on any destruction). The hot paths then touch only the
// returned counter, gauge or histogram.
//
// Thread-safety: build from one thread; the returned series are prometheus-
// cpp's (thread-safe).

#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace kvbm::detail {

/// Series added to a registry under base labels; removed on destruction.
class SeriesSet {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  /// `what` names the owner in errors ("PoolMetrics"); `hint` says what to do
  /// when the registry already holds one of its series. Throws UsageError when
  /// `registry` is null.
  SeriesSet(std::shared_ptr<prometheus::Registry> registry, Labels base, std::string what,
            std::string hint);
  ~SeriesSet();
  SeriesSet(const SeriesSet&) = delete;
  SeriesSet& operator=(const SeriesSet&) = delete;

  /// Adds the series `name`{base labels, `labels`}. Throws UsageError when the
  /// registry already holds it.
  prometheus::Counter* counter(const std::string& name, const std::string& help,
                               const Labels& labels = {});
  prometheus::Gauge* gauge(const std::string& name, const std::string& help,
                           const Labels& labels = {});
  prometheus::Histogram* histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& buckets, const Labels& labels = {});
  /// Returns the registry.
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& registry() const noexcept {
    return registry_;
  }

 private:
  struct Entries;
  std::shared_ptr<prometheus::Registry> registry_;
  Labels base_;
  std::string what_;
  std::string hint_;
  std::unique_ptr<Entries> entries_;
};

}  // namespace kvbm::detail
