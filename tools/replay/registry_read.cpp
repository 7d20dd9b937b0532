#include "replay/registry_read.h"

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

namespace kvbm::replay {

std::vector<SeriesValue> collect_series(const prometheus::Registry& registry,
                                        const std::string& name) {
  std::vector<SeriesValue> out;
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      SeriesValue v;
      for (const auto& l : m.label) v.labels[l.name] = l.value;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          v.value = m.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          v.value = m.gauge.value;
          break;
        case prometheus::MetricType::Untyped:
          v.value = m.untyped.value;
          break;
        default:
          continue;
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

double series_sum(const prometheus::Registry& registry, const std::string& name,
                  const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const auto& s : collect_series(registry, name)) {
    bool ok = true;
    for (const auto& [k, v] : match) {
      const auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        ok = false;
        break;
      }
    }
    if (ok) sum += s.value;
  }
  return sum;
}

}  // namespace kvbm::replay
