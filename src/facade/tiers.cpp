// src/facade/tiers.cpp: the table of the facade's tiers (facade/tiers.h).

#include "facade/tiers.h"

namespace kvbm::facade {

TierSpecs describe_tiers(const KvBlockManagerConfig& c, const detail::CheckedTiers& checked) {
  TierSpecs out;
  for (const TierId t : kTierIds) {
    TierSpec& s = out[t];
    s.id = t;
    s.storage = kTierKinds[t].storage;
    s.above = kTierKinds[t].above;
    s.blocks = checked.blocks[t];
    s.names = checked.names[t];
  }
  for (const TierEntry& e : c.tiers) {
    TierSpec& s = out[e.id];
    s.present = true;
    s.entry = &e;
    s.size = &e.size;
    s.listeners = &e.listeners;
    s.policy = &e.policy;
    s.disk = e.disk ? &*e.disk : nullptr;
    s.remote = e.remote ? &*e.remote : nullptr;
    if (e.id == TierId::kG1) continue;  // nothing is above G1
    s.mode = e.mode;
    s.pipeline = e.pipeline.value_or(c.pipeline);
  }
  return out;
}

}  // namespace kvbm::facade
