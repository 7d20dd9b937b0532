// kvbm/kv_block_manager.h: the public facade over the tiers.
//
// One KvBlockManagerConfig builds everything a scheduler needs: the G1 device
// pool (host memory standing in for it when no GPU is usable; a log line says
// so), optionally a G2 pinned host pool, a G3 disk pool and a G4 remote store
// on Redis (both need G2; G4 has no pool), the copy engines between them, the
// offload at each boundary (kWriteThrough, kOnEviction or kNone) and
// onboarding: onboard(hashes) brings the longest prefix present in any tier
// into fresh G1 blocks, registered there; plan_onboard() and onboard(hashes,
// options) weigh each copy path's measured cost (transfer_costs()) against
// recomputing, and load only what arrives sooner (kvbm/onboard_plan.h,
// docs/onboarding.md). docs/offload.md has the tiers, modes,
// onboarding and options, docs/remote.md G4, docs/scheduler_guide.md the calls
// in a scheduler (kvbm::admit, kvbm/admission.h, admits a request in one call).
//
//   auto kvbm = KvBlockManager::build(config);          // throws UsageError
//   auto registered = kvbm->register_blocks(std::move(complete), fwd_done);
//   OnboardHandle h = kvbm->onboard(request_hashes);    // overlap with compute
//   h.wait(); auto prefix = h.take_blocks();            // G1 blocks, in order
//
// With move_bytes = false no memory is allocated and copies complete at once;
// the pools, pipelines and onboarding behave the same.
// Shutdown: shutdown() (also run by the destructor) stops the offload
// pipelines (cancelling what has not started copying, waiting for what has),
// waits for onboarding copies in flight, and leaves every pool balanced.
// Handles the caller still holds stay valid (they may outlive the manager).
// Thread-safety: every member may be called from several threads.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/disk/disk_recovery.h"
#include "kvbm/kv_block_manager_config.h"
#include "kvbm/kv_block_manager_stats.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/offload/transfer_handle.h"
#include "kvbm/onboard_plan.h"
#include "kvbm/storage/layout.h"
#include "kvbm/tier.h"
#include "kvbm/tier_array.h"
#include "kvbm/transfer_costs.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// Where an onboarded prefix came from: its blocks by the tier they were
/// found in (G1: already there; G2, G3: copied up; G4: fetched through G2
/// and verified), and what cut it short.
struct OnboardCounts {
  TierArray<std::size_t> found{};  ///< prefix blocks per tier they came from
  std::size_t failed = 0;          ///< copies that failed (the prefix ends before the first)
  std::size_t no_space = 0;        ///< blocks found below G1 that did not fit in G1
  /// Blocks found below G1 whose copies had not arrived when the onboarding
  /// was cut (OnboardHandle::take_arrived(), or its deadline): never served.
  std::size_t abandoned = 0;
  /// Returns the prefix blocks that came from tier `t`.
  [[nodiscard]] std::size_t from(TierId t) const noexcept { return found[t]; }
  /// Returns the prefix's length: its blocks from every tier.
  [[nodiscard]] std::size_t total() const noexcept { return kvbm::total(found); }
};

namespace detail {
class OnboardState;
}

/// The caller's handle on one onboarding; see KvBlockManager::onboard.
///
/// Status: kTransferring while copies run, then kDone (every found block
/// arrived), kFailed (a copy failed: the prefix ends before it) or
/// kCancelled. cancel() returns only once every block of the onboarding has
/// been released (copies already started are waited for, then discarded).
///
/// take_arrived() cuts an onboarding short without waiting: the leading
/// blocks whose copies are back are the prefix (kDone), the rest is
/// abandoned (counts().abandoned) for the caller to compute. A copy still
/// running keeps its G1 block until the copy ends, so nothing is reused or
/// served while an engine may still write into it; the blocks are released
/// then. An onboarding with a deadline is cut the same way when a wait
/// reaches the deadline or status() is asked after it (error() kTimeout).
///
/// The handle is move-only and owns the result: dropping it without
/// take_blocks() releases the prefix's blocks (an onboarding still copying
/// is abandoned without waiting; its blocks are released when the copies end).
class OnboardHandle {
 public:
  OnboardHandle() = default;
  explicit OnboardHandle(std::shared_ptr<detail::OnboardState> s) : s_(std::move(s)) {}
  OnboardHandle(OnboardHandle&&) noexcept = default;
  OnboardHandle& operator=(OnboardHandle&& other) noexcept {
    if (this != &other) {
      abandon();
      s_ = std::move(other.s_);
    }
    return *this;
  }
  OnboardHandle(const OnboardHandle&) = delete;
  OnboardHandle& operator=(const OnboardHandle&) = delete;
  ~OnboardHandle() { abandon(); }
  [[nodiscard]] bool valid() const noexcept { return s_ != nullptr; }
  [[nodiscard]] TransferStatus status() const;
  /// Blocks until terminal; returns the status.
  TransferStatus wait() const;
  /// Blocks until terminal or the timeout; returns true when terminal.
  bool wait_for(std::chrono::nanoseconds timeout) const;
  /// Discards the onboarding; see the class comment. Returns true when it
  /// was cancelled, false when it had already finished (the blocks stay
  /// available through take_blocks()).
  bool cancel();
  /// Waits, then returns the G1 blocks of the prefix, in order (once; later
  /// calls return nothing). Empty after cancel().
  [[nodiscard]] std::vector<ImmutableBlock<G1>> take_blocks();
  /// Returns at once (see the class comment): the prefix that has arrived,
  /// the rest abandoned; take_blocks() if the onboarding is already over.
  [[nodiscard]] std::vector<ImmutableBlock<G1>> take_arrived();
  /// Returns at once: how many leading blocks are G1 hits or have arrived
  /// (what take_arrived() would hand back now; the prefix once over).
  [[nodiscard]] std::size_t arrived() const;
  /// Waits, then returns where the prefix came from.
  [[nodiscard]] OnboardCounts counts() const;
  /// Waits, then returns the tier each block of the prefix came from, in
  /// order (one entry per block take_blocks() returns).
  [[nodiscard]] std::vector<TierId> sources() const;
  /// Waits, then returns the first problem, if any: a copy's error (kIo,
  /// kCorrupt, kDevice, ...; the status is kFailed), a G4 fetch's error
  /// (kUnavailable, kTimeout, kCorrupt, ...), or kNoSpace when blocks found
  /// below G1 had no room in G1 (the prefix ends before them; kDone).
  [[nodiscard]] std::optional<Error> error() const;
  /// The plan the onboarding followed (onboard(hashes, options)), decided
  /// before any copy started; nullopt for onboard(hashes). Does not wait.
  [[nodiscard]] std::optional<OnboardPlan> plan() const;

 private:
  void abandon() noexcept;
  std::shared_ptr<detail::OnboardState> s_;
};

class KvBlockManagerImpl;

/// The facade; see the file comment.
class KvBlockManager {
 public:
  /// Builds every tier, engine and pipeline. Throws UsageError naming the
  /// first invalid option, as "KvBlockManagerConfig.<option>: ...". Throws
  /// RuntimeError when a valid configuration cannot be built on this machine
  /// now: kind kNoSpace when the G3 file finds no room (a full disk or a file
  /// size limit), kIo for a disk that fails, kDevice for CUDA.
  [[nodiscard]] static std::unique_ptr<KvBlockManager> build(KvBlockManagerConfig config);
  ~KvBlockManager();
  KvBlockManager(const KvBlockManager&) = delete;
  KvBlockManager& operator=(const KvBlockManager&) = delete;

  /// The pool of tier T (G1, G2 or G3), or nullptr when the config has none;
  /// pool<G1>() is never null. Code generic over the tier marker calls this;
  /// device(), host() and disk() below are the same pools by name.
  template <PooledTier T>
  [[nodiscard]] BlockManager<T>* pool() noexcept;
  /// The G1 pool: *pool<G1>().
  [[nodiscard]] BlockManager<G1>& device() noexcept { return *pool<G1>(); }
  /// The G2 pool, or nullptr when the config has none: pool<G2>().
  [[nodiscard]] BlockManager<G2>* host() noexcept { return pool<G2>(); }
  /// The G3 pool, or nullptr when the config has none: pool<G3>().
  [[nodiscard]] BlockManager<G3>* disk() noexcept { return pool<G3>(); }
  /// The config it was built from; its `tiers` are the entries in use.
  [[nodiscard]] const KvBlockManagerConfig& config() const noexcept;
  /// True when tier `t` is present (G1 always).
  [[nodiscard]] bool has_tier(TierId t) const noexcept;
  /// Tokens per block (layout.page_size).
  [[nodiscard]] std::uint32_t block_size() const noexcept;
  [[nodiscard]] std::size_t block_bytes() const noexcept;
  /// True when G1 is host memory standing in for a GPU.
  [[nodiscard]] bool device_emulated() const noexcept;
  /// Where G1 / G2 blocks live (meaningful only with move_bytes).
  [[nodiscard]] const Layout& device_layout() const noexcept;
  [[nodiscard]] const Layout& host_layout() const;
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& metrics_registry() const noexcept;

  /// Registers computed G1 blocks and, in write-through mode, enqueues them
  /// for offload to G2 once `forward_pass_done` (if any) is met. Throws
  /// UsageError, registering none and leaving every block with the caller,
  /// when a block is moved from or belongs to another manager.
  std::vector<ImmutableBlock<G1>> register_blocks(
      std::vector<CompleteBlock<G1>>&& blocks,
      std::shared_ptr<Precondition> forward_pass_done = nullptr);
  /// As above, with tokens[i] the block_size() tokens of blocks[i]: the G1
  /// pool's listeners hear them (PoolListener::on_stored_with_tokens), so a
  /// KV event publisher's BlockStored carries token_ids, which routers that
  /// rebuild hashes from tokens (Dynamo's) need. Throws UsageError,
  /// registering none, unless there is one span of block_size() tokens per
  /// block.
  std::vector<ImmutableBlock<G1>> register_blocks(
      std::vector<CompleteBlock<G1>>&& blocks, std::span<const std::span<const Token>> tokens,
      std::shared_ptr<Precondition> forward_pass_done = nullptr);
  /// Enqueues registered G1 blocks for offload to G2, whatever the mode;
  /// from G2 they go on to G3 as any block registered there does (through
  /// the G2 -> G3 pipeline when host_to_disk is write-through). The handle
  /// follows the G1 -> G2 copy. Returns an empty handle when there is no G2.
  /// Throws UsageError, enqueuing none, when a block is moved from or
  /// belongs to another manager (whatever the tiers).
  TransferHandle offload(const std::vector<ImmutableBlock<G1>>& blocks,
                         std::shared_ptr<Precondition> forward_pass_done = nullptr);

  /// Finds the longest prefix of `hashes` present in G1, G2 or G3 (each
  /// block in any tier), allocates G1 blocks for the part below G1, starts
  /// copying it up and returns at once. When G1 cannot hold the whole part,
  /// the prefix is cut where it can. The G1 hits are held by the handle.
  /// With G4, the rest of the prefix is looked up there on a worker thread
  /// (one round trip), fetched into G2, verified and copied up like G2's own
  /// blocks: the handle completes when that is done; a block G4 cannot serve
  /// intact ends the prefix (a miss, never served). cancel() does not wait
  /// for a G4 round trip in flight (it waits for copies, as always).
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes);
  /// Plans as plan_onboard(hashes, options) does, then onboards the plan's
  /// cut: its loaded() leading blocks of `hashes` (the G1 hits among them
  /// held, the rest copied up as above). The handle's plan() is that plan.
  /// With G4, the plan's round trip is made on the caller's thread.
  [[nodiscard]] OnboardHandle onboard(std::span<const SequenceHash> hashes,
                                      const OnboardOptions& options);
  /// Decides, without taking or copying anything, how much of the prefix
  /// onboard(hashes, options) would load and how much the caller would
  /// compute, from what each tier holds now (as probe(): with G4, one round
  /// trip) and the measured costs (transfer_costs()): kvbm/onboard_plan.h.
  [[nodiscard]] OnboardPlan plan_onboard(std::span<const SequenceHash> hashes,
                                         const OnboardOptions& options = {}) const;
  /// What onboard(hashes) would find right now, without taking or copying
  /// anything: the G1 hits, then the blocks below G1 (host / disk) up to the
  /// first block no tier holds, then (with G4) the blocks G4 holds after
  /// them, asked in one round trip. An admission check: total() minus
  /// from(TierId::kG1) is the number of fresh G1 blocks onboard() will allocate. (A snapshot:
  /// another thread or instance may change it before the onboard.)
  [[nodiscard]] OnboardCounts probe(std::span<const SequenceHash> hashes) const;
  /// Where each block of `hashes` is right now, without taking or copying
  /// anything: per hash, the fastest tier holding it (G1, G2, G3; with G4, the
  /// blocks no local tier holds are asked there in one round trip), or nullopt
  /// when none does. Unlike probe(), every position is answered, not only a
  /// prefix's: the hybrid model's hit rules (kvbm/groups/hit_rules.h) read a
  /// window's tail or one snapshot, not the blocks before them. (A snapshot:
  /// another thread or instance may change it.)
  [[nodiscard]] std::vector<std::optional<TierId>> locate(
      std::span<const SequenceHash> hashes) const;

  /// Waits until the offload pipelines are idle (everything enqueued so far
  /// has finished, G4 writes included) and every onboarding started so far
  /// has ended (G4 lookups included); for tests, tools and orderly shutdown.
  void drain();
  /// See the file comment. Idempotent.
  void shutdown();

  /// Returns "" when every pool's counts balance, else what is wrong.
  [[nodiscard]] std::string audit() const;
  /// Returns what the manager holds and has done: per tier, boundary, copy
  /// path and onboarding (kvbm/kv_block_manager_stats.h); its own counters,
  /// read. Waits for an on-eviction copy in progress.
  [[nodiscard]] KvBlockManagerStats stats() const;
  /// What each copy path costs, as measured so far, and the prefill
  /// estimate (kvbm/transfer_costs.h); refreshes their gauges.
  [[nodiscard]] TransferCosts transfer_costs() const;
  /// The engine reports one prefill batch: `tokens` computed in `duration`
  /// (on the engine's own measure). Feeds the recompute estimate per token
  /// that onboarding plans weigh loads against (it replaces
  /// KvBlockManagerConfig::prefill_tokens_per_second once reported).
  void report_prefill(std::size_t tokens, std::chrono::nanoseconds duration) noexcept;
  /// What build() recovered from a persistent G3 (disk_persistent); nullopt
  /// otherwise.
  [[nodiscard]] std::optional<RecoverySummary> disk_recovery() const;

 private:
  explicit KvBlockManager(std::unique_ptr<KvBlockManagerImpl> impl);
  std::unique_ptr<KvBlockManagerImpl> impl_;
};

}  // namespace kvbm
