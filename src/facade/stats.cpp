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

// The tier at `index` of TierTypes (G1 is index 0).
TierId tier_at(std::size_t index) { return static_cast<TierId>(index + 1); }

void add_engine(const TransferEngine* engine, KvBlockManagerStats& out) {
  if (engine == nullptr) return;
  if (const auto counts = engine->counts()) {
    out.transfers.push_back({std::string(engine->name()), *counts});
  }
}

}  // namespace

KvBlockManagerStats collect_stats(KvBlockManagerImpl& impl) {
  KvBlockManagerStats out;
  for_each_index<kTierCount>([&](auto I) {
    const auto& pool = std::get<I()>(impl.pools_);
    if (!pool) return;
    out.tiers.push_back({tier_at(I()), pool->pool_counts(), pool->counter_totals()});
  });
  for_each_index<kTierCount - 1>([&](auto I) {
    auto& boundary = std::get<I()>(impl.boundaries_);
    if (!boundary) return;
    out.boundaries.push_back(
        {tier_at(I()), tier_at(I() + 1), boundary->mode(), boundary->counts()});
  });
  if (impl.remote_) {
    out.boundaries.push_back(
        {TierId::kG2, TierId::kG4, impl.remote_->mode(), impl.remote_->write_counts()});
    out.remote = impl.remote_->store().stats();
  }
  // Every engine that counts: each tier's down and up engines and the parts
  // `up` is made of (a disk read engine counts; the bounce engine around it
  // does not, so each path is counted once).
  for (std::size_t t = 1; t < kTierCount; ++t) {
    const TierEngines& e = impl.engines_[t];
    add_engine(e.down.get(), out);
    add_engine(e.up.get(), out);
    for (const auto& part : e.parts) add_engine(part.get(), out);
  }
  if (impl.onboarding_) {
    const auto& c = impl.onboarding_->counters();
    out.onboarding.hits = value(c.from_tier[0]);
    for (std::size_t t = 1; t < kTierCount; ++t) {
      if (impl.specs_[t].blocks == 0) continue;
      out.onboarding.onboarded.push_back({tier_at(t), value(c.from_tier[t])});
    }
    if (c.remote != nullptr) out.onboarding.onboarded.push_back({TierId::kG4, value(c.remote)});
    out.onboarding.failed = value(c.failed);
    out.onboarding.cancelled = value(c.cancelled);
  }
  return out;
}

}  // namespace kvbm::facade
