// kvbm/router/kv_indexer.h: which instance holds which block, from KV events.
//
// A KvIndexer is the router's view of a cluster. It applies every engine
// instance's BlockStored / BlockRemoved / AllBlocksCleared batches
// (kvbm/events/kv_event.h) per instance and per tier (an event's medium names
// the tier through options.mediums; a shared tier, G4 by default, is indexed
// once for the whole cluster) and answers overlaps(): for a request's block
// hashes, how long a prefix each instance holds, and where.
//
//   router::KvIndexer index;
//   const auto a = index.add_instance("engine-a");
//   index.apply(a, seq, batch);                 // from a subscriber or an in-process sink
//   router::OverlapScores s = index.overlaps(request_hashes);
//
// Keyed by tokens (KvIndexerOptions::key = BlockKey::kTokens), the index
// re-keys each stored block by kvbm's chained hash of its tokens, following
// the event's parent, and a query gives token_keys(request tokens).
//
// A hybrid model (KvIndexerOptions::groups: its KV cache groups, two or more,
// or one that is not full attention) is indexed per (instance, group): each
// event's group_idx names its group (an event without one, or naming a group
// the index does not know, or a kind other than the group's, is counted in
// KvIndexerStats::group_mismatch_events and ignored), and an instance's
// overlap for a request is the longest cut every group can serve there by the
// hit rules of kvbm/groups/hit_rules.h (full attention: every block before the
// cut; a sliding window: the blocks of the window's tail before it; chunked
// local: the cut's chunk's blocks; recurrent state: a snapshot exactly at it).
// group_overlaps() takes each group's block keys as its events name them;
// overlaps() takes the request's chained hashes at hash_block_size(groups)
// tokens per block and derives the keys kvbm's HybridBlockManager registers
// (kvbm_group_keys()). A hybrid answer counts blocks of hash_block_size(groups)
// tokens; each is counted in the slowest tier among the blocks the groups read
// for it (a position no group reads is G1's: nothing to bring). A dense index
// (no groups, or one full-attention group) ignores the events' group fields.
//
// apply() says what it did with the batch's sequence number: kApplied,
// kDuplicate (ignored), kGap (held; the instance is stale until the caller has
// the publisher replay from `expected`, or resync()s it), kRestart (the
// instance's entries dropped, the batch applied). Stale entries stay in the
// index; overlaps() reports them with InstanceOverlap::stale set. docs/router.md
// has the tier rules, sequence numbers and staleness, the data structure and
// the metrics.
//
// Errors: a second indexer on one metrics registry throws UsageError.
// Thread-safety: every member may be called from any thread; apply() takes
// the index exclusively, overlaps() and the other readers share it.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/events/kv_event.h"
#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/router/overlap.h"
#include "kvbm/tier.h"

namespace prometheus {
class Registry;
}

namespace kvbm::router {

/// What the index keys a block by.
enum class BlockKey : std::uint8_t {
  /// The events' block hashes: a query gives the request's hashes in the
  /// same engine's hashing.
  kEngineHash,
  /// kvbm's own chained hash of each block's tokens (token_keys()), so that a
  /// query needs only the request's token ids, whatever the engines hash
  /// with (vLLM seeds its hash per process). Needs events carrying token ids:
  /// a BlockStored without them (or under a parent the index never saw) is
  /// counted (KvIndexerStats::unkeyed_events) and ignored.
  kTokens,
};

/// Returns "hashes" (kEngineHash) or "tokens" (kTokens).
[[nodiscard]] const char* to_string(BlockKey k) noexcept;
/// Parses "hashes" or "tokens"; throws UsageError otherwise.
[[nodiscard]] BlockKey parse_block_key(std::string_view s);

/// The BlockKey::kTokens keys of a request's full blocks: kvbm's chained hash
/// (kvbm/hashing.h, salted with the LoRA adapter's id when there is one) of
/// each `block_size` tokens from the first; a partial last block has none.
[[nodiscard]] std::vector<std::uint64_t> token_keys(std::span<const std::uint32_t> tokens,
                                                    std::uint32_t block_size,
                                                    std::optional<std::int64_t> lora_id = {});

/// The keys kvbm's HybridBlockManager registers (and its pools publish) for each
/// group's blocks (kvbm/groups/group_key.h), given a request's chained hashes at
/// hash_block_size(groups) tokens per block: out[g][j] is group g's block j.
/// Throws UsageError for an invalid group list.
[[nodiscard]] std::vector<std::vector<std::uint64_t>> kvbm_group_keys(
    std::span<const std::uint64_t> hashes, std::span<const KvCacheGroupSpec> groups);

/// The BlockKey::kTokens keys of each group's blocks: token_keys(tokens, the
/// group's tokens per block, lora_id) per group.
[[nodiscard]] std::vector<std::vector<std::uint64_t>> group_token_keys(
    std::span<const std::uint32_t> tokens, std::span<const KvCacheGroupSpec> groups,
    std::optional<std::int64_t> lora_id = {});

/// Configuration of a KvIndexer.
struct KvIndexerOptions {
  /// What blocks are keyed by (events' hashes, or their tokens).
  BlockKey key = BlockKey::kEngineHash;
  /// Medium name -> tier. Empty: "GPU" G1, "CPU" G2, "DISK" and "STORAGE" G3,
  /// "REMOTE" G4.
  std::map<std::string, TierId, std::less<>> mediums;
  /// Tiers every instance reads (indexed once for the cluster).
  std::vector<TierId> shared_tiers{TierId::kG4};
  /// Batches held per instance after a gap while the replay is awaited;
  /// beyond this the instance is resynced.
  std::size_t max_held_batches = 1024;
  /// An instance silent this long is stale (zero: never).
  std::chrono::milliseconds silence_timeout{0};
  /// The clock for silence (kvbm/clock.h; Clock::steady() when null); tests
  /// inject a ManualClock.
  std::shared_ptr<Clock> clock;
  /// Where the router's series go (none when null).
  std::shared_ptr<prometheus::Registry> metrics_registry;
  /// A hybrid model's KV cache groups, ids 0..n-1 in order (validate_groups());
  /// empty for a dense model. See the file comment.
  std::vector<KvCacheGroupSpec> groups;
};

/// What apply() did with one batch; see the file comment.
enum class ApplyStatus : std::uint8_t { kApplied, kDuplicate, kGap, kRestart };

/// The outcome of one apply().
struct ApplyResult {
  ApplyStatus status = ApplyStatus::kApplied;
  std::uint64_t expected = 0;       ///< the next sequence number wanted after this call
  std::size_t applied_batches = 0;  ///< batches applied by this call (held ones included)
};

/// Why an instance is stale.
enum class StaleReason : std::uint8_t { kFresh, kGap, kSilent, kMarked };

/// Returns "fresh", "gap", "silent" or "marked".
[[nodiscard]] const char* to_string(StaleReason r) noexcept;

/// One instance as the indexer sees it.
struct InstanceState {
  std::string name;
  std::uint64_t next_sequence = 0;  ///< the next batch expected
  StaleReason stale = StaleReason::kFresh;
  std::size_t held_batches = 0;  ///< batches past a gap, waiting
  TierBlockCounts blocks{};      ///< blocks indexed per tier (shared tiers not included;
                                 ///< hybrid: every group's together)
};

/// Counters of a KvIndexer.
struct KvIndexerStats {
  std::uint64_t batches_applied = 0;
  std::uint64_t events_applied = 0;
  std::uint64_t blocks_stored = 0;   ///< hashes of applied BlockStored events
  std::uint64_t blocks_removed = 0;  ///< hashes of applied BlockRemoved events
  std::uint64_t clears = 0;          ///< AllBlocksCleared applied
  std::uint64_t duplicate_batches = 0;
  std::uint64_t gaps = 0;  ///< gaps detected
  std::uint64_t restarts = 0;
  std::uint64_t resyncs = 0;
  std::uint64_t unknown_medium_events = 0;
  std::uint64_t removed_unknown_blocks = 0;  ///< BlockRemoved of hashes not indexed
  std::uint64_t unkeyed_events = 0;          ///< BlockKey::kTokens: BlockStored ignored
  std::uint64_t group_mismatch_events = 0;   ///< hybrid: events of no known group, ignored
  std::uint64_t distinct_blocks = 0;         ///< block hashes indexed now (any instance, any tier)
  std::uint64_t index_bytes = 0;             ///< memory of the index's table and rows now
};

/// The cluster's block index; see the file comment.
class KvIndexer {
 public:
  explicit KvIndexer(KvIndexerOptions options = {});
  ~KvIndexer();
  KvIndexer(const KvIndexer&) = delete;
  KvIndexer& operator=(const KvIndexer&) = delete;

  /// Adds an instance and returns its id. Throws UsageError for an empty or
  /// duplicate name.
  InstanceId add_instance(std::string name);
  /// Drops an instance that vanished: its entries go, it is in no answer.
  /// Its blocks in shared tiers stay (the store still holds them).
  void remove_instance(InstanceId id);
  /// Returns the id of the instance named `name`, if there is one.
  [[nodiscard]] std::optional<InstanceId> find_instance(std::string_view name) const;

  /// Applies batch `sequence` of instance `id`; see the file comment.
  /// Throws UsageError for an unknown or removed id.
  ApplyResult apply(InstanceId id, std::uint64_t sequence, const events::KvEventBatch& batch);
  /// The publisher cannot replay what was lost (or a batch could not be
  /// decoded): drops the instance's entries and makes it fresh. The held
  /// batches from `resume_at` on (all of them when unset) are applied in
  /// order, and the instance goes on after the last; with none, it goes on
  /// at `resume_at`, or, when unset, at whatever batch comes next.
  void resync(InstanceId id, std::optional<std::uint64_t> resume_at = std::nullopt);
  /// The publisher restarted (its caller saw a live batch numbered below the
  /// next expected one, say): drops the instance's entries and held batches
  /// and expects batch 0 of the new run. Counted as a restart.
  void restart(InstanceId id);
  /// Marks an instance stale (a batch could not be decoded, say) until its
  /// next applied batch.
  void mark_stale(InstanceId id);

  /// Per live instance, the prefix of `hashes` it holds; see overlap.h. Hybrid:
  /// `hashes` are the request's chained hashes at hash_block_size(groups) tokens
  /// per block, and the answer is group_overlaps(kvbm_group_keys(hashes, groups)).
  [[nodiscard]] OverlapScores overlaps(std::span<const std::uint64_t> hashes) const;
  /// Hybrid: per live instance, the longest cut of at most `max_tokens` tokens
  /// every group can serve, in blocks of hash_block_size(groups) tokens (see the
  /// file comment). `group_keys[g]` are group g's block keys from the first, as
  /// its events name them (kvbm_group_keys(), group_token_keys(), or an
  /// engine's own hashes per group). Throws UsageError for a dense index or
  /// unless there is one key list per group.
  [[nodiscard]] OverlapScores group_overlaps(std::span<const std::vector<std::uint64_t>> group_keys,
                                             std::size_t max_tokens = SIZE_MAX) const;
  /// Returns true when instance `id` holds `hash` in `tier` (a shared tier:
  /// when the cluster does). Hybrid: `hash` is the index's own key of a group's
  /// block (group_key(event hash, group_seed(group))); group_overlaps() is the
  /// question to ask instead.
  [[nodiscard]] bool holds(InstanceId id, std::uint64_t hash, TierId tier) const;
  /// Returns the instance's state. Throws UsageError for an unknown id.
  [[nodiscard]] InstanceState state(InstanceId id) const;
  /// Returns the ids of the live instances, in order.
  [[nodiscard]] std::vector<InstanceId> instances() const;
  /// Returns the blocks indexed in shared tier `tier`.
  [[nodiscard]] std::size_t shared_blocks(TierId tier) const;
  [[nodiscard]] KvIndexerStats stats() const;
  /// What blocks are keyed by (KvIndexerOptions::key).
  [[nodiscard]] BlockKey key() const noexcept;
  /// True when the groups make the index hybrid (see the file comment).
  [[nodiscard]] bool hybrid() const noexcept;
  /// The model's groups (KvIndexerOptions::groups).
  [[nodiscard]] std::span<const KvCacheGroupSpec> groups() const noexcept;

  struct Impl;  // defined in src/router/kv_indexer.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::router
