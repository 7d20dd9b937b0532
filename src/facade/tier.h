// src/facade/tier.h (internal): one row of the facade's runtime list of tiers.
//
// The facade holds its tiers as a TierArray of rows (null where a tier is
// absent), fastest first, and walks that list instead of naming G1..G4:
//
//   PoolTier<T>  (pool_tier.h)    G1, G2, G3: a BlockManager<T> in device,
//                                 pinned host or disk memory, and the
//                                 boundaries from it down to the tiers below;
//   RemoteTier   (remote_tier.h)  G4: a store shared by instances, no pool;
//                                 its blocks land in the tier above (G2).
//
// Rows are built bottom-up (G4 first), each from the rows below it, so no
// row is wired after it is built. Onboarding (onboarding.h) uses presence(),
// take(), up() and, for a remote tier, the landing tier's reserve()/land();
// the facade's drain, shutdown, stats and audit walk the list top-down.
//
// Thread-safety: every member from any thread.

#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "facade/tiers.h"
#include "kvbm/block_manager.h"
#include "kvbm/blocks/block_id.h"
#include "kvbm/blocks/release_order.h"
#include "kvbm/error.h"
#include "kvbm/kv_block_manager_stats.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm::facade {

/// Keeps a tier's blocks from being evicted or reused while onboarding copies them.
class Hold {
 public:
  virtual ~Hold() = default;
  /// Lets go of every block after the first `n`.
  virtual void keep_first(std::size_t n) noexcept = 0;
};

/// Holds blocks of a pooled tier; lets go of them last first (release_order.h).
template <TierMarker T>
class HeldBlocks final : public Hold {
 public:
  explicit HeldBlocks(std::vector<ImmutableBlock<T>> blocks) : blocks_(std::move(blocks)) {}
  ~HeldBlocks() override { release_tail_first(blocks_); }
  HeldBlocks(const HeldBlocks&) = delete;
  HeldBlocks& operator=(const HeldBlocks&) = delete;
  void keep_first(std::size_t n) noexcept override {
    if (n >= blocks_.size()) return;
    detail::ReleaseBatch batch;
    for (std::size_t i = blocks_.size(); i > n; --i) batch.add(blocks_[i - 1]);
    batch.flush();
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(n), blocks_.end());
  }

 private:
  std::vector<ImmutableBlock<T>> blocks_;
};

/// Blocks a tier handed to onboarding, held until their copies into G1 end.
struct Taken {
  std::vector<BlockId> ids;    ///< a prefix of the blocks asked for, in order
  TierId at = TierId::kG1;     ///< the tier they are in (a remote tier's land above it)
  std::unique_ptr<Hold> hold;  ///< keeps them
};

/// Blocks reserved in a pooled tier for bytes arriving from a tier without a
/// pool (a remote tier's fetch), before they are verified.
struct Room {
  std::vector<BlockId> ids;
  std::vector<std::vector<std::span<std::byte>>> bytes;  ///< per block: its regions
  std::shared_ptr<void> blocks;                          ///< the reserved blocks
};

/// One tier; see the file comment.
class Tier {
 public:
  explicit Tier(TierSpec spec) : spec_(std::move(spec)) {}
  virtual ~Tier() = default;
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;

  [[nodiscard]] TierId id() const noexcept { return spec_.id; }
  [[nodiscard]] const TierSpec& spec() const noexcept { return spec_; }
  /// A remote tier costs a round trip per call: onboarding asks it off the caller's thread.
  [[nodiscard]] bool remote() const noexcept { return spec_.storage == StorageKind::kRemote; }

  /// Per hash, whether the tier holds it now.
  [[nodiscard]] virtual std::vector<bool> presence(std::span<const SequenceHash> hashes) const = 0;
  /// Takes the blocks of `run` the tier holds, from the first, up to the
  /// first it does not hold (or cannot hand over). A remote tier's land in
  /// `landing`; `error` (may be null) records why a run ended early.
  [[nodiscard]] virtual Taken take(std::span<const SequenceHash> run, Tier* landing,
                                   std::optional<Error>* error) = 0;
  /// The engine copying this tier's blocks into G1 (null: G1, a remote tier).
  [[nodiscard]] virtual TransferEngine* up() const noexcept { return nullptr; }
  /// Reserves up to `n` blocks for arriving bytes (a pooled tier; else none).
  [[nodiscard]] virtual Room reserve(std::size_t n) {
    (void)n;
    return {};
  }
  /// Registers the first `verified` blocks of `room` under `hashes` (the
  /// rest go back) and holds them; a block that cannot be registered ends it.
  [[nodiscard]] virtual Taken land(Room&& room, std::span<const SequenceHash> hashes,
                                   std::size_t verified) {
    (void)room, (void)hashes, (void)verified;
    return {};
  }

  /// Waits for every copy down from this tier enqueued so far.
  virtual void drain() {}
  /// Shutdown, first step (top-down): the pipelines down from this tier stop.
  virtual void stop_pipelines() {}
  /// Shutdown, last step: the on-eviction copiers down from this tier stop.
  virtual void stop_copiers() noexcept {}
  /// Destroys the boundaries down from this tier (top-down, before any row goes).
  virtual void drop_boundaries() noexcept {}

  /// Adds this tier's pool, boundaries, engines and store to `out`.
  virtual void collect(KvBlockManagerStats& out) const = 0;
  /// The pool's audit ("" when sound, or without a pool).
  [[nodiscard]] virtual std::string audit() const { return {}; }

 private:
  const TierSpec spec_;
};

/// The rows, fastest first (null: the tier is absent).
using Rows = TierArray<std::unique_ptr<Tier>>;

}  // namespace kvbm::facade
