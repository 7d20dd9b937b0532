// kvbm/kv_block_manager_stats.h: what a KvBlockManager holds and has done, as plain numbers.
//
// KvBlockManager::stats() returns a KvBlockManagerStats:
//
//   tiers        per tier present (fastest first): a pooled tier's block
//                counts now (total, reset, inactive, in use) and its counters
//                since build (allocations, evictions, registrations, ...); a
//                tier without a pool (G4) its store's counters and state
//   boundaries   per tier boundary present (G1->G2, G2->G3): what its
//                offloads did with the blocks handed to them (enqueued,
//                transferred, already present, filtered, evicted before their
//                copy, no space, copy failed), every mechanism summed: the
//                write-through pipeline, explicit offloads, the on-eviction
//                copier
//   transfers    per copy path whose engine counts (by the engine's name,
//                copy_path_name(from, to) in kvbm/tier.h: "G1_to_G2",
//                "G2_to_G1", "G2_to_G3", "G3_to_G1"): blocks and
//                bytes moved, blocks whose copy failed; none when the manager
//                moves no bytes (move_bytes = false)
//   onboarding   prefix blocks found in G1 (hits), blocks copied into G1 per
//                source tier, copies that failed, onboardings cancelled
//
// Every number is one of the library's own counters, read: the same values a
// scrape of metrics_registry() shows (kvbm_evictions_total,
// kvbm_offload_blocks_total, kvbm_transfer_blocks_total, kvbm_onboard_*), so
// a tool learns what happened without parsing Prometheus series, and no
// second count is kept. Each counter is read atomically; the set is not one
// instant (a copy may land between two reads). One tier's block counts are
// one consistent snapshot of its pool.
//
// Thread-safety: a plain value. KvBlockManager::stats() may be called from any
// thread, also after shutdown() (the boundaries' counts stay readable).

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/metrics.h"  // PoolCounterDelta
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/pool_counts.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/tier.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm {

enum class OffloadMode : std::uint8_t;  // kvbm/kv_block_manager.h

/// One tier: its pool's counts, or, for a tier without a pool, its store's.
struct TierStats {
  TierId tier = TierId::kG1;
  PoolCounts blocks;          ///< now: total, reset, inactive, in use (one snapshot; no pool: 0)
  PoolCounterDelta counters;  ///< since build: allocations, evictions, ... (no pool: 0)
  /// A tier without a pool (G4, docs/remote.md): the store's own counters
  /// (hits, misses, bytes, failures by kind) and its state: ok, down, or
  /// refused (credentials or ACL) with the server's reply
  /// (RemoteStoreStats::state, refusal). nullopt for a pooled tier.
  std::optional<RemoteStoreStats> store;
  /// Returns true when the tier is a pool (its blocks and counters are its own).
  [[nodiscard]] bool pooled() const noexcept { return !store.has_value(); }
};

/// One tier boundary: what moved down from `upper` to `lower`.
struct BoundaryStats {
  TierId upper = TierId::kG1;
  TierId lower = TierId::kG2;
  OffloadMode mode{};    ///< the boundary's mode (KvBlockManagerConfig)
  OffloadCounts counts;  ///< every mechanism of the boundary, summed
};

/// One copy path, as its engine counted it.
struct TransferPathStats {
  std::string path;  ///< the engine's name, e.g. "G2_to_G3"
  TransferCounts counts;
};

/// Blocks onboarded from one tier below G1.
struct OnboardSourceStats {
  TierId tier = TierId::kG2;
  std::uint64_t blocks = 0;  ///< copied into G1 and handed back in a prefix
};

/// Onboarding totals.
struct OnboardStats {
  std::uint64_t hits = 0;                     ///< prefix blocks found in G1 (no copy)
  std::vector<OnboardSourceStats> onboarded;  ///< per tier below G1 present, fastest first
  std::uint64_t failed = 0;                   ///< copies into G1 that failed
  std::uint64_t cancelled = 0;  ///< onboardings cancelled (or abandoned while copying)
};

/// What KvBlockManager::stats() returns; see the file comment.
struct KvBlockManagerStats {
  /// Tiers present, fastest first: the pools (G1-G3) and G4 when configured
  /// (its store's stats in TierStats::store; its boundary from G2 is in
  /// `boundaries`, what onboarding brought from it in `onboarding`).
  std::vector<TierStats> tiers;
  std::vector<BoundaryStats> boundaries;     ///< boundaries present, top-down
  std::vector<TransferPathStats> transfers;  ///< paths whose engine counts
  OnboardStats onboarding;

  /// Returns the stats of tier `t`, or nullptr when it is absent.
  [[nodiscard]] const TierStats* tier(TierId t) const noexcept {
    for (const auto& s : tiers) {
      if (s.tier == t) return &s;
    }
    return nullptr;
  }
  /// Returns the store stats of tier `t` (a tier without a pool: G4), or
  /// nullptr when it is absent or a pool.
  [[nodiscard]] const RemoteStoreStats* store(TierId t) const noexcept {
    const TierStats* s = tier(t);
    return s != nullptr && s->store ? &*s->store : nullptr;
  }
  /// Returns the stats of the boundary from `upper` down, or nullptr when absent.
  [[nodiscard]] const BoundaryStats* boundary(TierId upper) const noexcept {
    for (const auto& b : boundaries) {
      if (b.upper == upper) return &b;
    }
    return nullptr;
  }
  /// Returns the stats of the boundary from `upper` to `lower` (G2 has two
  /// with G3 and G4), or nullptr when absent.
  [[nodiscard]] const BoundaryStats* boundary(TierId upper, TierId lower) const noexcept {
    for (const auto& b : boundaries) {
      if (b.upper == upper && b.lower == lower) return &b;
    }
    return nullptr;
  }
  /// Returns the stats of the engine named `path`, or nullptr when none counts.
  [[nodiscard]] const TransferPathStats* transfer(std::string_view path) const noexcept {
    for (const auto& p : transfers) {
      if (p.path == path) return &p;
    }
    return nullptr;
  }
  /// Returns the stats of the engine copying from tier `from` to tier `to`
  /// (named copy_path_name(from, to)), or nullptr when none counts.
  [[nodiscard]] const TransferPathStats* transfer(TierId from, TierId to) const {
    return transfer(copy_path_name(from, to));
  }
  /// Returns the blocks onboarded from tier `t` (0 when absent).
  [[nodiscard]] std::uint64_t onboarded_from(TierId t) const noexcept {
    for (const auto& s : onboarding.onboarded) {
      if (s.tier == t) return s.blocks;
    }
    return 0;
  }
};

}  // namespace kvbm
