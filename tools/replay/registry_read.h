// replay/registry_read.h: reads series values out of a prometheus-cpp registry.
//
// The replay reports what the library counted (evictions, bytes per transfer
// path) by collecting the registry the KvBlockManager publishes into, the same
// numbers a Prometheus server scraping --metrics-port sees.
//
// Thread-safety: Registry::Collect is thread-safe.

#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Registry;
}

namespace kvbm::replay {

/// One series: its labels and its value (counter or gauge).
struct SeriesValue {
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// Returns every series of the family `name` (empty when absent).
[[nodiscard]] std::vector<SeriesValue> collect_series(const prometheus::Registry& registry,
                                                      const std::string& name);

/// Returns the sum of the series of `name` whose labels include every pair
/// of `match` (0 when none).
[[nodiscard]] double series_sum(const prometheus::Registry& registry, const std::string& name,
                                const std::map<std::string, std::string>& match = {});

}  // namespace kvbm::replay
