// kvbm/hybrid/hybrid_kv_block_manager_config.h: what a HybridKvBlockManager is built from.
//
// A hybrid model's manager over every tier is one KvBlockManager per KV cache
// group (kvbm/groups/kv_cache_group_spec.h). HybridKvBlockManagerConfig names
// the tiers once, in `base` (a KvBlockManagerConfig: entries or the named
// fields), and the groups; group_configs() derives each group's config:
//
//   * layout: the group's tokens per block and bytes per block
//     (group_layout(); `base.layout` only converts a tier size given in
//     blocks into bytes);
//   * each pooled tier's (G1, G2, G3) size: `group_blocks[g][tier]` when
//     given, else the tier's bytes split so that every group gets the same
//     number of blocks (bytes / the sum of the groups' block bytes), as a
//     model whose every layer holds one block per b tokens;
//   * G3's file in `<directory>/group-<id>-<kind>` (created when missing), so a
//     persistent G3 recovers each group's blocks from its own file and a
//     group's file never serves another; its namespace and G4's user namespace
//     are the base's passed through KvCacheGroupSpec::namespace_for();
//   * its own metrics registry (each KvBlockManager's onboarding series are
//     its own); the listeners of `base` are given to every group;
//   * with `events`, a listener of that publisher on each of its pooled tiers
//     (G1 "GPU", G2 "CPU", G3 "STORAGE") naming the group
//     (KvEventPublisher::listener(medium, group)), so the events carry
//     group_idx, the kind and the window as vLLM's do.
//
// Block keys are group keys (kvbm/groups/group_key.h), so even a G4 keyspace
// shared by every group keeps them apart.
//
// Thread-safety: plain values and pure functions.

#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kvbm/events/kv_events.h"
#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/groups/snapshot_policy.h"
#include "kvbm/kv_block_manager_config.h"
#include "kvbm/storage/layout.h"
#include "kvbm/tier_array.h"

namespace kvbm {

/// Everything a HybridKvBlockManager needs; see the file comment.
struct HybridKvBlockManagerConfig {
  /// The tiers, engines and options every group shares; its layout only
  /// converts tier sizes given in blocks into bytes.
  KvBlockManagerConfig base;
  /// The model's groups (ids 0..n-1 in order; validate_groups()).
  std::vector<KvCacheGroupSpec> groups;
  /// Which recurrent-state snapshots are registered.
  SnapshotPolicy snapshot_policy;
  /// Empty, or one row per group: blocks per pooled tier (0: the split by bytes).
  std::vector<TierArray<std::size_t>> group_blocks;
  /// When set, every group's pools publish KV events through it, naming the group.
  std::shared_ptr<events::KvEventPublisher> events;
};

/// Returns the layout of one block of `group`: its tokens per block and, when its
/// KvLayout (layers, heads, head size, dtype) gives exactly its bytes per block,
/// those dimensions; else one layer of bytes_per_block / tokens_per_block bytes
/// per token (rounded up: a snapshot whose bytes the block size does not divide
/// gets a few bytes more).
[[nodiscard]] LayoutConfig group_layout(const KvCacheGroupSpec& group);

/// Returns each group's KvBlockManagerConfig (see the file comment). Throws
/// UsageError naming the option: invalid groups, a group_blocks row count other
/// than the groups', a tier too small for one block of every group, a size in
/// blocks without a base layout, or a G3 directory that cannot be made.
[[nodiscard]] std::vector<KvBlockManagerConfig> group_configs(const HybridKvBlockManagerConfig& c);

}  // namespace kvbm
