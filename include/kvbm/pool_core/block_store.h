// kvbm/pool_core/block_store.h: the per-tier store behind every block handle.
//
// Not part of the public API. A BlockStore owns one pool's block slots, the
// reset pool (free blocks), the inactive pool (an eviction backend over
// registered blocks nobody references) and the tier's registry table (sequence
// hash -> registered block). One mutex guards all of it; the typed handles of
// kvbm/blocks/ and BlockManager<T> are thin layers over this class.
//
// Accounting: every block is in exactly one of reset, inactive or in use, and
// reset + inactive + in use == total at every moment the lock is free.
//
// Lifetime: the manager holds a shared_ptr to the store. Owning handles
// (mutable, complete, immutable) hold a raw pointer, valid because a store
// outlives its last in-use block: when the manager goes away while blocks are
// still out, the store keeps itself alive until the last one comes back.
// Weak handles hold a weak_ptr and degrade cleanly.
//
// Strong references: an immutable block's reference count may go up without
// the lock only from a holder (copying a handle); it goes from 1 to 0 only
// under the lock, so a block can never be revived behind the lock's back.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvbm/detail/hash_index.h"
#include "kvbm/detail/huge_page_allocator.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/duplicate_policy.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/metrics.h"
#include "kvbm/pool_counts.h"
#include "kvbm/pool_listener.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

class FrequencyTracker;

namespace detail {

/// Where a block is in its life. Mutable covers both MutableBlock and
/// CompleteBlock (staging only changes the handle).
enum class SlotState : std::uint8_t { kReset, kMutable, kActive, kInactive, kDuplicate };

struct Slot {
  SequenceHash hash;                   // valid in kActive, kInactive, kDuplicate
  std::atomic<std::uint32_t> refs{0};  // strong ImmutableBlock handles
  std::uint32_t generation = 0;        // bumped each time the block returns to reset
  SlotState state = SlotState::kReset;
};

/// Result of registering a staged block.
struct RegisterOutcome {
  BlockId id;         ///< the block the caller now holds a strong reference to
  bool deduplicated;  ///< true when an existing block was returned (Reject)
};

/// One block of a batch registration: the staged block and its hash in,
/// the outcome out.
struct Registration {
  BlockId id;                 ///< in: the staged block; out: the block now held
  SequenceHash hash;          ///< in
  bool deduplicated = false;  ///< out: true when an existing block was returned
  /// in: the block's tokens for the listeners (on_stored_with_tokens); empty
  /// when the caller gave none. Valid during the registration only.
  std::span<const Token> tokens{};
};

class BlockStore : public std::enable_shared_from_this<BlockStore> {
 public:
  struct Options {
    std::uint32_t block_count = 0;
    std::uint32_t block_size = 0;
    DuplicatePolicy duplicate_policy = DuplicatePolicy::kAllow;
    std::unique_ptr<EvictionBackend> backend;
    std::shared_ptr<FrequencyTracker> tracker;  // may be null
    std::unique_ptr<PoolMetrics> metrics;
    std::string name;
    std::vector<std::shared_ptr<PoolListener>> listeners;  // see kvbm/pool_listener.h
  };

  explicit BlockStore(Options options);
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  [[nodiscard]] std::uint32_t block_size() const noexcept { return block_size_; }
  [[nodiscard]] std::size_t total_blocks() const noexcept { return slots_.size(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] DuplicatePolicy duplicate_policy() const noexcept { return duplicate_policy_; }
  // Unlocked: the backend, and so its policy, is fixed at construction.
  [[nodiscard]] EvictionPolicy eviction_policy() const noexcept KVBM_NO_THREAD_SAFETY_ANALYSIS {
    return backend_->policy();
  }
  [[nodiscard]] PoolMetrics& metrics() noexcept { return *metrics_; }

  /// Takes n blocks (reset pool first, then evictions) or none. Writes their
  /// ids to out[0, n) and returns true, or returns false and changes nothing.
  bool allocate(std::uint32_t n, BlockId* out);
  /// Takes exactly the blocks `ids` out of the reset pool (for restoring
  /// blocks whose bytes already sit in those slots, e.g. a recovered disk
  /// file). All or nothing: false, and no change, when an id is out of range,
  /// repeated or not free. Evicts nothing.
  bool allocate_ids(std::span<const BlockId> ids);

  /// Returns a mutable or complete block to the reset pool.
  void release_mutable(BlockId id) noexcept;

  /// Counts a staging (MutableBlock -> CompleteBlock) in the metrics, and
  /// starts loading the registry line the block's registration will need.
  /// Unlocked: a prefetch only hints the CPU's cache, and the table's storage is fixed.
  void note_staged(const SequenceHash& hash) noexcept KVBM_NO_THREAD_SAFETY_ANALYSIS {
    metrics_->add_staging();
    table_.prefetch(hash.value());
  }

  /// Registers a staged block under `hash`. The caller's reference to `id`
  /// is consumed; it holds one strong reference to the returned block.
  RegisterOutcome register_block(BlockId id, const SequenceHash& hash,
                                 std::span<const Token> tokens = {});
  /// Registers a batch under one lock acquisition, in order; each entry's
  /// outcome is written back into it.
  void register_blocks(std::span<Registration> batch);

  /// Prefix match: strong references to the leading present blocks.
  std::size_t match(std::span<const SequenceHash> hashes, std::vector<BlockId>& out);
  /// Every present block, in request order, skipping misses.
  std::size_t scan(std::span<const SequenceHash> hashes, std::vector<BlockId>& out);
  /// Writes whether each hash is registered in this tier (all false once
  /// the manager is gone).
  void presence(std::span<const SequenceHash> hashes, std::vector<bool>& out) const;

  /// Adds a strong reference to a block the caller already holds one of.
  void acquire(BlockId id) noexcept { slots_[id].refs.fetch_add(1, std::memory_order_relaxed); }
  /// Drops a strong reference; the last one moves the block to the inactive
  /// pool (or the reset pool for a duplicate).
  void release_immutable(BlockId id) noexcept {
    auto& refs = slots_[id].refs;
    std::uint32_t n = refs.load(std::memory_order_relaxed);
    while (n > 1) {
      if (refs.compare_exchange_weak(n, n - 1, std::memory_order_release,
                                     std::memory_order_relaxed)) {
        return;
      }
    }
    release_last_reference(id);
  }
  /// Drops one strong reference to each of `ids`, in order, under one lock
  /// acquisition, and sets the gauges once: the same transitions as
  /// release_immutable() on each in turn (kvbm/blocks/release_order.h).
  void release_immutable_batch(std::span<const BlockId> ids) noexcept;
  /// Current strong reference count of a block (diagnostics).
  [[nodiscard]] std::uint32_t ref_count(BlockId id) const noexcept {
    return slots_[id].refs.load(std::memory_order_relaxed);
  }
  [[nodiscard]] const SequenceHash& slot_hash(BlockId id) const noexcept { return slots_[id].hash; }
  [[nodiscard]] std::uint32_t generation(BlockId id) const noexcept;

  /// Weak upgrade: the same block if it still holds `hash` since
  /// `generation`, else any registered block with `hash`, else nullopt.
  std::optional<BlockId> upgrade(BlockId id, std::uint32_t generation, const SequenceHash& hash);

  /// Evicts every evictable inactive block; returns how many.
  std::size_t evict_all_inactive();

  /// Consistent snapshot of the counts.
  [[nodiscard]] PoolCounts counts() const;
  /// Returns how many times a block has left use (back to the reset or
  /// inactive pool) so far.
  [[nodiscard]] std::uint64_t releases() const;
  /// Waits until releases() differs from `seen` or `deadline` passes; returns
  /// true when a block left use.
  bool wait_for_release(std::uint64_t seen, std::chrono::steady_clock::time_point deadline) const;
  /// Recounts every slot's state and checks it against the pool structures;
  /// returns an empty string when consistent, else what is wrong.
  [[nodiscard]] std::string audit() const;

  /// Called by the manager's destructor: from now on the store lives only as
  /// long as blocks are out, and weak upgrades fail.
  void orphan() noexcept;

 private:
  void release_last_reference(BlockId id) noexcept;
  // Drops one strong reference; returns true when it was the last (the block left use).
  bool drop_reference_locked(BlockId id, std::shared_ptr<BlockStore>& keepalive) noexcept
      KVBM_REQUIRES(mu_);
  void return_to_reset_locked(BlockId id) noexcept KVBM_REQUIRES(mu_);
  std::optional<BlockId> evict_one_locked() noexcept KVBM_REQUIRES(mu_);
  bool evict_locked(std::size_t n, BlockId* victims) noexcept KVBM_REQUIRES(mu_);
  void prefetch_next_victim_locked() const noexcept KVBM_REQUIRES(mu_);
  // Prefix (stop at the first miss) or scan (skip misses): the found blocks,
  // revived, appended to `out`; returns how many.
  std::size_t find_and_revive_locked(std::span<const SequenceHash> hashes,
                                     std::vector<BlockId>& out, bool prefix) KVBM_REQUIRES(mu_);
  void register_locked(Registration& r, PoolCounterDelta& delta,
                       std::shared_ptr<BlockStore>& keepalive) KVBM_REQUIRES(mu_);
  void undo_evictions_locked(std::span<const BlockId> evicted) noexcept KVBM_REQUIRES(mu_);
  void revive_locked(BlockId id) noexcept KVBM_REQUIRES(mu_);
  void publish_gauges_locked() noexcept KVBM_REQUIRES(mu_);
  void leave_in_use_locked(std::shared_ptr<BlockStore>& keepalive) noexcept KVBM_REQUIRES(mu_);
  void touch(std::span<const SequenceHash> hashes, std::size_t n) noexcept;

  const std::uint32_t block_size_;
  const DuplicatePolicy duplicate_policy_;
  const std::string name_;
  std::unique_ptr<PoolMetrics> metrics_;
  std::shared_ptr<FrequencyTracker> tracker_;
  const std::vector<std::shared_ptr<PoolListener>> listeners_;  // fixed at construction

  mutable Mutex mu_;
  std::vector<Slot, HugePageAllocator<Slot>> slots_;                  // fixed size
  std::vector<BlockId> reset_ KVBM_GUARDED_BY(mu_);                   // free stack
  std::unique_ptr<EvictionBackend> backend_ KVBM_PT_GUARDED_BY(mu_);  // fixed; its state guarded
  HashIndex table_ KVBM_GUARDED_BY(mu_);                              // hash -> registered block
  std::size_t in_use_ KVBM_GUARDED_BY(mu_) = 0;
  std::uint64_t releases_ KVBM_GUARDED_BY(mu_) = 0;               // blocks that left use
  mutable std::size_t release_waiters_ KVBM_GUARDED_BY(mu_) = 0;  // in wait_for_release()
  mutable std::condition_variable release_cv_;                    // a block left use
  std::size_t mutable_out_ KVBM_GUARDED_BY(mu_) = 0;
  bool orphaned_ KVBM_GUARDED_BY(mu_) = false;
  std::shared_ptr<BlockStore> keepalive_ KVBM_GUARDED_BY(mu_);
  struct Published {
    std::size_t reset, inactive, mutable_out, immutable_out;
  };
  Published published_ KVBM_GUARDED_BY(mu_){};  // last gauge values set
};

}  // namespace detail
}  // namespace kvbm
