// src/facade/stats.cpp: KvBlockManager::stats() (facade/stats.h).

#include "facade/stats.h"

#include <cstdint>
#include <string>

#include <prometheus/counter.h>

#include "facade/impl.h"

namespace kvbm::facade {
namespace {

std::uint64_t value(const prometheus::Counter* c) {
  return c == nullptr ? 0 : static_cast<std::uint64_t>(c->Value());
}

}  // namespace

KvBlockManagerStats collect_stats(KvBlockManagerImpl& impl) {
  KvBlockManagerStats out;
  for (const TierId t : kTierIds) {
    if (const auto& row = impl.rows_[t]) row->collect(out);
  }
  if (impl.onboarding_) {
    const auto& c = impl.onboarding_->counters();
    out.onboarding.hits = value(c.from_tier[TierId::kG1]);
    for (const TierId t : kTierIds) {
      if (t == TierId::kG1 || c.from_tier[t] == nullptr) continue;
      out.onboarding.onboarded.push_back({t, value(c.from_tier[t])});
    }
    out.onboarding.failed = value(c.failed);
    out.onboarding.cancelled = value(c.cancelled);
  }
  return out;
}

}  // namespace kvbm::facade
