// src/facade/build.cpp: building a KvBlockManager, tier by tier (facade/impl.h).
//
// In this order, each step over the tier table (facade/tiers.h): the config's
// checks; the memory of each tier; the boundaries' shells (an on-eviction
// boundary's copier is a listener of the upper pool); the pools; the engines;
// the boundaries, bottom-up (each hands its copies on to the one below);
// the remote tier's fetches; onboarding. The remote tier (G4, no pool) is
// made with the memory (its writer copies out of G2) and hooked to G2: its
// listener (on-eviction), or G2's registrations and the G1 -> G2 copies
// (write-through).

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "facade/config.h"
#include "facade/impl.h"
#include "kvbm/logging.h"

namespace kvbm {

using facade::for_each_index;
using facade::kTierCount;
using facade::TierAt;

void KvBlockManagerImpl::build() {
  auto& c = config_;
  const detail::TierBlocks n = detail::check_config(c);
  specs_ = facade::describe_tiers(c, {n.device, n.host, n.disk});
  std::size_t all_blocks = 0;
  for (const auto& s : specs_) all_blocks += s.blocks;
  tracker_ = std::make_shared<FrequencyTracker>(std::max<std::size_t>(1024, all_blocks));
  registry_ = BlockRegistry::builder().frequency_tracker(tracker_).build();

  for (std::size_t i = 0; i < kTierCount; ++i) {
    if (specs_[i].blocks > 0) facade::build_memory(c, specs_[i], memory_[i]);
  }
  if (!c.remote.urls.empty()) {
    remote_ = std::make_unique<facade::RemoteTier>(c, *memory_[1].layout, tracker_);
  }
  build_pools();
  recover_disk();
  facade::EngineContext ctx{c, specs_, {}};
  for (const auto& m : memory_) ctx.memory.push_back(&m);
  for (std::size_t i = 1; i < kTierCount; ++i) {
    if (specs_[i].blocks > 0) facade::build_engines(ctx, i, engines_[i]);
  }
  build_boundaries();
  if (remote_) remote_->bind(*pool<1>());
  onboarding_ = std::make_unique<facade::Onboarding>(pools_, engines_, registry_,
                                                     c.metrics_registry, remote_.get());
  logger()->info(
      "kvbm: G1 {} blocks{}, G2 {} blocks, G3 {} blocks of {} tokens ({} bytes each); "
      "G1->G2 {}, G2->G3 {}{}{}",
      n.device, memory_[0].emulated ? " (emulated in host memory)" : "", n.host, n.disk,
      c.layout.page_size, c.layout.block_bytes(), to_string(c.device_to_host),
      to_string(c.host_to_disk), c.move_bytes ? "" : " (metadata only)",
      remote_ ? fmt::format("; G4 on {} server(s), G2->G4 {}", c.remote.urls.size(),
                            to_string(c.host_to_remote))
              : std::string());
}

// A persistent G3: every intact block of the file goes into G3 at its own
// slot, as a cached block (registered, then released: inactive), before any
// engine can write. Its hash is the one recorded with its bytes; the file
// keeps no parent or position, so the block enters as a first block (the
// pools match by value; a lineage backend sees it as a root).
void KvBlockManagerImpl::recover_disk() {
  auto* g3 = pool<2>();
  const auto& file = memory_[2].file;
  if (g3 == nullptr || !file || !config_.disk_persistent) return;
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

// The boundaries' shells come first (an on-eviction copier listens to the
// upper pool), then every present tier's pool.
void KvBlockManagerImpl::build_pools() {
  for_each_index<kTierCount - 1>([&](auto I) {
    if (specs_[I() + 1].blocks == 0) return;
    using B = typename std::tuple_element_t<I(), facade::Boundaries>::element_type;
    std::get<I()>(boundaries_) = std::make_unique<B>(
        specs_[I() + 1], facade::BoundaryContext{registry_, tracker_, config_.metrics_registry,
                                                 config_.clock ? config_.clock : Clock::steady()});
  });
  for_each_index<kTierCount>([&](auto I) {
    if (specs_[I()].blocks > 0) build_pool<I()>();
  });
}

// A pool with its listeners: the config's, then its boundary's copier (on
// eviction); write-through below it sees what callers register there.
template <std::size_t I>
void KvBlockManagerImpl::build_pool() {
  using T = TierAt<I>;
  const facade::TierSpec& spec = specs_[I];
  auto b = BlockManager<T>::builder();
  b.block_count(spec.blocks)
      .block_size(config_.layout.page_size)
      .registry(registry_)
      .eviction(spec.size->eviction)
      .duplicate_policy(config_.duplicate_policy)
      .metrics_registry(config_.metrics_registry);
  for (const auto& l : *spec.listeners) b.listener(l);
  std::function<void(const std::vector<ImmutableBlock<T>>&)> on_register;
  if constexpr (I + 1 < kTierCount) {
    if (auto* boundary = std::get<I>(boundaries_).get()) {
      if (auto l = boundary->eviction_listener()) b.listener(std::move(l));
      if (boundary->mode() == OffloadMode::kWriteThrough) {
        on_register = [boundary](const std::vector<ImmutableBlock<T>>& blocks) {
          boundary->take(blocks, nullptr);
        };
      }
    }
  }
  if constexpr (std::is_same_v<T, G2>) {
    if (auto* remote = remote_.get()) {
      if (auto l = remote->eviction_listener()) b.listener(std::move(l));
      if (remote->mode() == OffloadMode::kWriteThrough) {
        on_register =
            [remote, below = std::move(on_register)](const std::vector<ImmutableBlock<T>>& blocks) {
              remote->take(blocks);
              if (below) below(blocks);
            };
      }
    }
  }
  if (on_register) b.on_register(std::move(on_register));
  std::get<I>(pools_).emplace(b.build());
}

// Bottom-up: each boundary hands the copies it registers below to the
// intake of the boundary under it.
void KvBlockManagerImpl::build_boundaries() {
  constexpr std::size_t kBoundaries = kTierCount - 1;
  for_each_index<kBoundaries>([&](auto J) {
    constexpr std::size_t I = kBoundaries - 1 - J();
    auto* boundary = std::get<I>(boundaries_).get();
    if (boundary == nullptr) return;
    using Lower = TierAt<I + 1>;
    std::function<void(std::vector<ImmutableBlock<Lower>> &&)> next;
    if constexpr (I + 1 < kBoundaries) {
      if (auto* below = std::get<I + 1>(boundaries_).get()) next = below->intake();
    }
    if constexpr (std::is_same_v<Lower, G2>) {
      // Write-through G2 -> G4 takes every copy landing in G2, beside G2 -> G3.
      if (auto* remote = remote_.get(); remote && remote->mode() == OffloadMode::kWriteThrough) {
        next = [remote, g3 = std::move(next)](std::vector<ImmutableBlock<Lower>>&& blocks) {
          remote->take(blocks);
          if (g3) g3(std::move(blocks));
        };
      }
    }
    boundary->bind(*std::get<I>(pools_), *std::get<I + 1>(pools_), engines_[I + 1].down,
                   std::move(next));
  });
}

}  // namespace kvbm
