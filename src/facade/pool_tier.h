// src/facade/pool_tier.h (internal): a pooled tier (G1, G2, G3), a row of the facade.
//
// A PoolTier<T> owns the tier's BlockManager<T> and the boundaries from it
// down to the tiers below it (TierSpec::above names this tier), built in
// one constructor, bottom-up: the rows below hand their links (on-eviction
// listeners and boundary makers) first, the pool is built with the config's
// listeners and those, then the boundaries over the pool. Blocks registered
// here (by a caller, or by the boundary above: intake()) go to every
// boundary below through pass_down(); write-through ones enqueue them.
//
// Lifetime: the memory and engines (impl.h) outlive the row; the rows below
// outlive this one's boundaries (drop_boundaries() top-down, first).
// Thread-safety: every member from any thread.

#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "facade/boundary.h"
#include "facade/remote_tier.h"
#include "facade/tier.h"
#include "facade/tier_engines.h"
#include "facade/tier_memory.h"
#include "kvbm/block_manager.h"
#include "kvbm/transfer/stage_and_register.h"

namespace kvbm::facade {

/// What every row is built from.
struct RowContext {
  const KvBlockManagerConfig& config;
  const TierArray<TierMemory>& memory;
  const TierArray<TierEngines>& engines;
  BoundaryContext boundary;
};

/// A pooled tier; see the file comment.
template <TierMarker T>
class PoolTier final : public Tier {
 public:
  using Intake = std::function<void(std::vector<ImmutableBlock<T>>&&)>;

  /// `below`: the built rows of the tiers whose blocks come down from this one.
  PoolTier(const TierSpec& spec, const RowContext& ctx, const std::vector<Tier*>& below)
      : Tier(spec),
        registry_(ctx.boundary.registry),
        memory_(ctx.memory[spec.id]),
        engines_(ctx.engines[spec.id]),
        links_(make_links(ctx, below)),
        pool_(make_pool(ctx.config)),
        boundaries_(make_boundaries()) {
    links_.clear();  // the boundaries and the pool hold what they need
  }

  [[nodiscard]] BlockManager<T>& pool() noexcept { return pool_; }
  [[nodiscard]] const BlockManager<T>& pool() const noexcept { return pool_; }

  /// Blocks registered in this tier: every boundary below takes them.
  void pass_down(const std::vector<ImmutableBlock<T>>& blocks, std::shared_ptr<Precondition> pre) {
    for (auto& b : boundaries_) b->take(blocks, pre);
  }
  /// What the boundary above hands the copies it registers here to (empty
  /// when no boundary below is write-through: nothing needs them).
  [[nodiscard]] Intake intake() {
    for (const auto& b : boundaries_) {
      if (b->mode() != OffloadMode::kWriteThrough) continue;
      return [this](std::vector<ImmutableBlock<T>>&& blocks) { pass_down(blocks, nullptr); };
    }
    return {};
  }
  /// Explicit offload into the first tier below (none: an empty handle).
  TransferHandle offload(const std::vector<ImmutableBlock<T>>& blocks,
                         std::shared_ptr<Precondition> pre) {
    if (boundaries_.empty()) return {};
    return boundaries_.front()->offload(blocks, std::move(pre));
  }

  [[nodiscard]] std::vector<bool> presence(std::span<const SequenceHash> hashes) const override {
    return registry_->template presence<T>(hashes);
  }
  [[nodiscard]] Taken take(std::span<const SequenceHash> run, Tier* /*landing*/,
                           std::optional<Error>* /*error*/) override {
    auto blocks = pool_.match_blocks(run);
    Taken out;
    out.at = id();
    out.ids.reserve(blocks.size());
    for (const auto& b : blocks) out.ids.push_back(b.block_id());
    out.hold = std::make_unique<HeldBlocks<T>>(std::move(blocks));
    return out;
  }
  [[nodiscard]] TransferEngine* up() const noexcept override { return engines_.up.get(); }
  [[nodiscard]] Room reserve(std::size_t n) override;
  [[nodiscard]] Taken land(Room&& room, std::span<const SequenceHash> hashes,
                           std::size_t verified) override;

  void drain() override {
    for (auto& b : boundaries_) b->drain();
  }
  void stop_pipelines() override {
    for (auto& b : boundaries_) b->stop_pipelines();
  }
  void stop_copiers() noexcept override {
    for (auto& b : boundaries_) b->stop_copier();
  }
  void drop_boundaries() noexcept override { boundaries_.clear(); }

  void collect(KvBlockManagerStats& out) const override;
  [[nodiscard]] std::string audit() const override {
    std::string a = pool_.audit();
    return a.empty() ? a : std::string(to_string(id())) + ": " + a + "\n";
  }

 private:
  std::vector<Link<T>> make_links(const RowContext& ctx, const std::vector<Tier*>& below);
  template <TierMarker Lower>
  static Link<T> pool_link(PoolTier<Lower>& lower, const RowContext& ctx);
  BlockManager<T> make_pool(const KvBlockManagerConfig& c);
  std::vector<std::unique_ptr<Boundary<T>>> make_boundaries() {
    std::vector<std::unique_ptr<Boundary<T>>> out;
    for (auto& l : links_) out.push_back(l.make(pool_));
    return out;
  }

  std::shared_ptr<BlockRegistry> registry_;
  const TierMemory& memory_;
  const TierEngines& engines_;
  std::vector<Link<T>> links_;  // only while the constructor runs
  BlockManager<T> pool_;
  std::vector<std::unique_ptr<Boundary<T>>> boundaries_;  // last: destroyed first
};

// The link of each row below: a remote tier's, or a pooled tier's (only the
// one right below: the pipelines are compiled for adjacent pooled tiers).
template <TierMarker T>
std::vector<Link<T>> PoolTier<T>::make_links(const RowContext& ctx,
                                             const std::vector<Tier*>& below) {
  std::vector<Link<T>> out;
  for (Tier* lower : below) {
    if (lower->remote()) {
      out.push_back(static_cast<RemoteTier&>(*lower).template link<T>());
      continue;
    }
    out.push_back(with_marker(lower->id(), [&](auto marker) -> Link<T> {
      using Lower = decltype(marker);
      if constexpr (static_cast<int>(tier_id_of<Lower>()) ==
                    static_cast<int>(tier_id_of<T>()) + 1) {
        return pool_link<Lower>(static_cast<PoolTier<Lower>&>(*lower), ctx);
      } else {
        KVBM_CHECK(false, "KvBlockManager: ", to_string(lower->id()), " cannot be below ",
                   to_string(tier_id_of<T>()));
        return {};
      }
    }));
  }
  return out;
}

template <TierMarker T>
template <TierMarker Lower>
Link<T> PoolTier<T>::pool_link(PoolTier<Lower>& lower, const RowContext& ctx) {
  using B = TierBoundary<T, Lower>;
  const TierSpec& spec = lower.spec();
  auto engine = ctx.engines[spec.id].down;
  auto next = lower.intake();
  auto copier = B::make_copier(spec, lower.pool(), engine, ctx.boundary, next);
  Link<T> l;
  l.mode = spec.mode;
  l.listener = copier;
  l.make = [&lower, &spec, engine, bctx = ctx.boundary, copier, next](BlockManager<T>& upper) {
    return std::make_unique<B>(spec, upper, lower.pool(), engine, bctx, copier, next);
  };
  return l;
}

// The pool with its listeners: the config's, then the links' (on-eviction);
// write-through below it sees what callers register here.
template <TierMarker T>
BlockManager<T> PoolTier<T>::make_pool(const KvBlockManagerConfig& c) {
  auto b = BlockManager<T>::builder();
  b.block_count(spec().blocks)
      .block_size(c.layout.page_size)
      .registry(registry_)
      .eviction(spec().size->eviction)
      .duplicate_policy(c.duplicate_policy)
      .metrics_registry(c.metrics_registry);
  for (const auto& l : *spec().listeners) b.listener(l);
  bool write_through = false;
  for (const auto& l : links_) {
    if (l.listener) b.listener(l.listener);
    write_through = write_through || l.mode == OffloadMode::kWriteThrough;
  }
  if (write_through) {
    b.on_register(
        [this](const std::vector<ImmutableBlock<T>>& blocks) { pass_down(blocks, nullptr); });
  }
  return b.build();
}

template <TierMarker T>
Room PoolTier<T>::reserve(std::size_t n) {
  KVBM_CHECK(memory_.layout.has_value(), "KvBlockManager: ", to_string(id()),
             " has no memory layout for arriving blocks");
  auto blocks = std::make_shared<std::vector<MutableBlock<T>>>(pool_.allocate_at_most(n));
  Room room;
  room.ids.reserve(blocks->size());
  room.bytes.resize(blocks->size());
  std::vector<Region> regions;
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    const BlockId id = (*blocks)[i].block_id();
    room.ids.push_back(id);
    regions.clear();
    memory_.layout->append_regions(id, regions);
    for (const auto& r : regions) {
      room.bytes[i].emplace_back(reinterpret_cast<std::byte*>(r.addr), r.size);
    }
  }
  room.blocks = std::move(blocks);
  return room;
}

// A block that cannot be registered ends the prefix there.
template <TierMarker T>
Taken PoolTier<T>::land(Room&& room, std::span<const SequenceHash> hashes, std::size_t verified) {
  auto blocks = std::static_pointer_cast<std::vector<MutableBlock<T>>>(std::move(room.blocks));
  Taken out;
  out.at = id();
  if (!blocks) return out;
  // The unverified go back to the reset pool.
  blocks->erase(blocks->begin() + static_cast<std::ptrdiff_t>(verified), blocks->end());
  std::vector<ImmutableBlock<T>> held;
  held.reserve(verified);
  bool whole = true;
  stage_and_register_copies(
      pool_, *blocks, {}, [&](std::size_t i) { return hashes[i]; },
      [&](std::size_t, std::optional<ImmutableBlock<T>>&& r) {
        if (!r) whole = false;
        if (r && whole) held.push_back(std::move(*r));
      });
  for (const auto& b : held) out.ids.push_back(b.block_id());
  out.hold = std::make_unique<HeldBlocks<T>>(std::move(held));
  return out;
}

// The pool, the boundaries down from it and the tier's engines (each engine
// that counts: `down` into it, `up` into G1 and the parts `up` is made of; a
// disk read engine counts, the bounce engine around it does not).
template <TierMarker T>
void PoolTier<T>::collect(KvBlockManagerStats& out) const {
  out.tiers.push_back({id(), pool_.pool_counts(), pool_.counter_totals(), std::nullopt});
  for (const auto& b : boundaries_)
    out.boundaries.push_back({id(), b->lower(), b->mode(), b->counts()});
  const auto add = [&out](const TransferEngine* e) {
    if (e == nullptr) return;
    if (const auto counts = e->counts()) out.transfers.push_back({std::string(e->name()), *counts});
  };
  add(engines_.down.get());
  add(engines_.up.get());
  for (const auto& part : engines_.parts) add(part.get());
}

}  // namespace kvbm::facade
