// The series one metrics holder adds to a registry (kvbm/detail/series_set.h).

#include "kvbm/detail/series_set.h"

#include <functional>
#include <map>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"

namespace kvbm::detail {

struct SeriesSet::Entries {
  std::vector<std::function<void()>> removers;  // in creation order
};

SeriesSet::SeriesSet(std::shared_ptr<prometheus::Registry> registry, Labels base, std::string what,
                     std::string hint)
    : registry_(std::move(registry)),
      base_(std::move(base)),
      what_(std::move(what)),
      hint_(std::move(hint)),
      entries_(std::make_unique<Entries>()) {
  KVBM_CHECK(registry_ != nullptr, what_, " needs a prometheus registry (it is null)");
}

SeriesSet::~SeriesSet() {
  auto& removers = entries_->removers;  // the last series added goes first
  while (!removers.empty()) {
    removers.back()();
    removers.pop_back();
  }
}

namespace {

std::map<std::string, std::string> merged(const SeriesSet::Labels& base,
                                          const SeriesSet::Labels& extra) {
  std::map<std::string, std::string> out(base.begin(), base.end());
  for (const auto& [k, v] : extra) out[k] = v;
  return out;
}

std::string shown(const std::string& name, const std::map<std::string, std::string>& labels) {
  std::string out = name + "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    out += k;
    out += "=\"";
    out += v;
    out += '"';
    first = false;
  }
  return out + "}";
}

}  // namespace

prometheus::Counter* SeriesSet::counter(const std::string& name, const std::string& help,
                                        const Labels& labels) {
  auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  const auto l = merged(base_, labels);
  KVBM_CHECK(!family.Has(l), what_, ": the metrics registry already holds ", shown(name, l), ": ",
             hint_);
  auto* c = &family.Add(l);
  entries_->removers.emplace_back([&family, c] { family.Remove(c); });
  return c;
}

prometheus::Gauge* SeriesSet::gauge(const std::string& name, const std::string& help,
                                    const Labels& labels) {
  auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  const auto l = merged(base_, labels);
  KVBM_CHECK(!family.Has(l), what_, ": the metrics registry already holds ", shown(name, l), ": ",
             hint_);
  auto* g = &family.Add(l);
  entries_->removers.emplace_back([&family, g] { family.Remove(g); });
  return g;
}

prometheus::Histogram* SeriesSet::histogram(const std::string& name, const std::string& help,
                                            const std::vector<double>& buckets,
                                            const Labels& labels) {
  auto& family = prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
  const auto l = merged(base_, labels);
  KVBM_CHECK(!family.Has(l), what_, ": the metrics registry already holds ", shown(name, l), ": ",
             hint_);
  auto* h = &family.Add(l, prometheus::Histogram::BucketBoundaries(buckets));
  entries_->removers.emplace_back([&family, h] { family.Remove(h); });
  return h;
}

}  // namespace kvbm::detail
