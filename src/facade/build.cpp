// src/facade/build.cpp: building a KvBlockManager (facade/impl.h).
//
// In this order: the config's checks and the tier table (facade/tiers.h);
// the memory of each pooled tier; the engines of each tier below G1; the
// rows (facade/tier.h), bottom-up, each built from the rows below it (whose
// blocks come down from it); a persistent G3's recovery; onboarding.

#include <algorithm>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "facade/config.h"
#include "facade/impl.h"
#include "facade/timed_engine.h"
#include "kvbm/logging.h"

namespace kvbm {
namespace {

// "a Redis Cluster" or "N server(s)", for the build's log line (no URL: they
// may carry a password).
std::string remote_servers(const RemoteTierConfig& r) {
  if (r.urls.size() == 1 && r.urls[0].starts_with("redis+cluster://")) return "a Redis Cluster";
  return std::to_string(r.urls.size()) + " server(s)";
}

// True when a boundary's policy (min_frequency) or a pool's eviction backend
// (multi-level LRU) reads the frequency sketch.
bool reads_frequency(const facade::TierSpecs& specs) {
  for (const auto& s : specs.items) {
    if (!s.present) continue;
    if (s.policy != nullptr && s.policy->min_frequency > 0) return true;
    if (s.size != nullptr && s.size->eviction == EvictionPolicy::kMultiLevelLru) return true;
  }
  return false;
}

}  // namespace

using facade::StorageKind;

void KvBlockManagerImpl::build() {
  auto& c = config_;
  const detail::CheckedTiers checked = detail::check_config(c);
  specs_ = facade::describe_tiers(c, checked);
  std::size_t all_blocks = 0;
  for (const auto& s : specs_.items) all_blocks += s.blocks;
  // Each touch of the sketch is a random cache line, on every registration
  // and match: it is kept only when something reads it.
  if (reads_frequency(specs_)) {
    tracker_ = std::make_shared<FrequencyTracker>(std::max<std::size_t>(1024, all_blocks));
  }
  registry_ = BlockRegistry::builder().frequency_tracker(tracker_).build();
  costs_ = std::make_shared<facade::Costs>(specs_, c);

  for (const TierId t : kTierIds) {
    if (specs_[t].present) facade::build_memory(c, specs_[t], memory_[t]);
  }
  const facade::EngineContext ctx{c, specs_, memory_};
  for (const TierId t : kTierIds) {
    const auto& s = specs_[t];
    if (s.present && t != TierId::kG1 && s.storage != StorageKind::kRemote) {
      facade::build_engines(ctx, t, engines_[t]);
      if (!c.move_bytes) continue;  // nothing to measure: every batch completes at once
      engines_[t].down = facade::timed(engines_[t].down, costs_, s.above, t);
      engines_[t].up = facade::timed(engines_[t].up, costs_, t, TierId::kG1);
    }
  }
  build_rows();
  recover_disk();
  onboarding_ =
      std::make_unique<facade::Onboarding>(rows_, c.metrics_registry, costs_, c.layout.page_size);
  const facade::TierSpec& g4 = specs_[TierId::kG4];
  logger()->info(
      "kvbm: G1 {} blocks{}, G2 {} blocks, G3 {} blocks of {} tokens ({} bytes each); "
      "G1->G2 {}, G2->G3 {}{}{}",
      specs_[TierId::kG1].blocks, memory_[TierId::kG1].emulated ? " (emulated in host memory)" : "",
      specs_[TierId::kG2].blocks, specs_[TierId::kG3].blocks, c.layout.page_size,
      c.layout.block_bytes(), to_string(specs_[TierId::kG2].mode),
      to_string(specs_[TierId::kG3].mode), c.move_bytes ? "" : " (metadata only)",
      g4.present
          ? fmt::format("; G4 on {}, G2->G4 {}", remote_servers(*g4.remote), to_string(g4.mode))
          : std::string());
}

// Bottom-up: a row is built from the rows below it, which therefore exist.
void KvBlockManagerImpl::build_rows() {
  const facade::RowContext ctx{
      config_, memory_, engines_,
      facade::BoundaryContext{registry_, tracker_, config_.metrics_registry, config_.env->clock()}};
  for (auto it = kTierIds.rbegin(); it != kTierIds.rend(); ++it) {
    const facade::TierSpec& spec = specs_[*it];
    if (!spec.present) continue;
    if (spec.storage == StorageKind::kRemote) {
      rows_[*it] = std::make_unique<facade::RemoteTier>(spec, config_, *memory_[spec.above].layout,
                                                        tracker_, costs_);
      continue;
    }
    std::vector<facade::Tier*> below;
    for (const TierId lower : kTierIds) {
      if (lower != *it && rows_[lower] && specs_[lower].above == *it) {
        below.push_back(rows_[lower].get());
      }
    }
    rows_[*it] = facade::with_marker(*it, [&](auto marker) -> std::unique_ptr<facade::Tier> {
      return std::make_unique<facade::PoolTier<decltype(marker)>>(spec, ctx, below);
    });
  }
}

// A persistent G3: every intact block of the file goes into G3 at its own
// slot, as a cached block (registered, then released: inactive), before any
// engine can write. Its hash is the one recorded with its bytes; the file
// keeps no parent or position, so the block enters as a first block (the
// pools match by value; a lineage backend sees it as a root).
void KvBlockManagerImpl::recover_disk() {
  auto* g3 = pool<G3>();
  const auto& file = memory_[TierId::kG3].file;
  if (g3 == nullptr || !file || !specs_[TierId::kG3].disk->persistent) return;
  Recovery r = file->recover();
  std::vector<BlockId> ids;
  ids.reserve(r.slots.size());
  for (const auto& s : r.slots) ids.push_back(s.slot);
  auto blocks = g3->allocate_ids(ids);
  KVBM_CHECK(blocks.has_value(),
             "KvBlockManager: recovered disk slots are not free in a new G3 pool");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto staged = std::move((*blocks)[i])
                      .stage(SequenceHash(r.slots[i].hash, std::nullopt, 0), g3->block_size());
    KVBM_CHECK(staged.ok(), "KvBlockManager: a recovered disk block could not be staged");
    ImmutableBlock<G3> release = g3->register_copy(std::move(staged).value());
  }
  disk_recovery_ = r.summary;
}

}  // namespace kvbm
