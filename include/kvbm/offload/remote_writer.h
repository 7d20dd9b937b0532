// kvbm/offload/remote_writer.h: the offload of blocks into the remote tier (G4).
//
// A RemoteWriter takes blocks of a host-memory tier (G2) and writes them to a
// RemoteStore. Taking a block (stage()) copies its bytes into the writer's
// own staging memory at once, so the caller (an allocation evicting the
// block, or the hand-off of a block just registered in G2) never waits for
// the network and the tier's block is free again when stage() returns. One
// worker thread (a detail::Worker) then writes what is staged, in batches of up to
// max_batch_blocks, in staging order:
//
//   1. the policies drop what they filter (a RemotePresencePolicy asks the
//      store which blocks it holds in one round trip per batch);
//   2. the rest is written in one pipelined put per batch;
//   3. each block's outcome is counted in OffloadMetrics (pipeline `name`),
//      and the listeners' on_stored sees, once per batch, the hashes of the
//      blocks now in the store: written, or found there by the presence
//      policy (already_present), in staging order (no lock held, on the
//      worker):
//      transferred; already_present (the presence policy); filtered (the
//      other policies); no_space (the staging memory was full when the block
//      came: it is dropped, never waited for); copy_failed (the store refused
//      the write or could not be reached; the store's own
//      kvbm_remote_errors_total{kind} says why).
//
// A block staged again while its first copy is still waiting is not staged
// twice (already_present).
//
// Memory: staging_blocks x the store's block bytes, allocated once (pages
// are touched only when used).
//
// Lifetime: the store and the source layout's memory outlive the writer.
// shutdown() (also the destructor) lets the worker write what is staged
// (each batch bounded by the store's command timeout), then stops it; stage()
// afterwards drops and counts its blocks.
// Thread-safety: every member from any thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/policy.h"
#include "kvbm/pool_listener.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/storage/layout.h"
#include "kvbm/tier.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// Writes blocks of a host tier to a remote store; see the file comment.
class RemoteWriter {
 public:
  struct Options {
    std::size_t staging_blocks = 128;   ///< blocks waiting to be written (1 ..)
    std::size_t max_batch_blocks = 64;  ///< blocks per write batch (1 ..)
    std::string name = copy_path_name(TierId::kG2, TierId::kG4);  ///< the pipeline label
    /// Told what reached the store (step 3 of the file comment).
    std::vector<std::shared_ptr<PoolListener>> listeners;
    /// Told, on the worker, how long each write batch (step 2) took and how
    /// many blocks it wrote, timed on `clock` (null: the steady clock); the
    /// facade's G2 -> G4 cost (kvbm/transfer_costs.h). Must not throw.
    std::function<void(std::size_t blocks, Clock::duration took)> on_put;
    std::shared_ptr<Clock> clock;
  };
  /// One block to take: where it is in the source layout, and its hash.
  struct Source {
    BlockId id = 0;
    SequenceHash hash;
  };

  /// Starts the worker. `source` lays out the blocks stage() copies from; its
  /// blocks must have the store's block bytes. Throws UsageError on a bad
  /// option, a null store or registry, or a size mismatch.
  RemoteWriter(std::shared_ptr<RemoteStore> store, const Layout& source, Options options,
               std::vector<std::shared_ptr<OffloadPolicy>> policies,
               std::shared_ptr<prometheus::Registry> metrics);
  ~RemoteWriter();
  RemoteWriter(const RemoteWriter&) = delete;
  RemoteWriter& operator=(const RemoteWriter&) = delete;

  /// Copies the blocks into staging and queues them; returns how many were
  /// staged (the others were already waiting, or found no room). noexcept:
  /// called from pool listeners and completion threads.
  std::size_t stage(std::span<const Source> blocks) noexcept;
  /// Waits until everything staged so far has been written (or has failed).
  void drain();
  /// See the file comment. Idempotent.
  void shutdown();
  /// The outcomes so far (the metrics' counters).
  [[nodiscard]] OffloadCounts counts() const noexcept { return metrics_->counts(); }

 private:
  struct Item {
    std::size_t slot = 0;
    SequenceHash hash;
  };
  void write_staged();
  void write(std::vector<Item>& batch);
  std::span<std::byte> slot_bytes(std::size_t slot) noexcept {
    return {staging_.get() + slot * block_bytes_, block_bytes_};
  }

  const std::shared_ptr<RemoteStore> store_;
  const Layout source_;
  const Options options_;
  const std::size_t block_bytes_;
  const std::vector<std::shared_ptr<OffloadPolicy>> policies_;
  std::vector<std::size_t> policy_index_;  // into metrics_
  std::vector<bool> is_presence_;          // the policy's filtered blocks are already_present
  std::shared_ptr<OffloadMetrics> metrics_;
  std::unique_ptr<std::byte[]> staging_;

  detail::Mutex mu_;
  std::vector<std::size_t> free_slots_ KVBM_GUARDED_BY(mu_);
  std::deque<Item> queue_ KVBM_GUARDED_BY(mu_);
  std::unordered_set<std::uint64_t> waiting_ KVBM_GUARDED_BY(mu_);  // hashes staged, not written
  bool posted_ KVBM_GUARDED_BY(mu_) = false;  // a write_staged() job is queued or running
  bool stop_ KVBM_GUARDED_BY(mu_) = false;
  detail::Worker worker_{"G4 writer"};  // last: stops first
};

}  // namespace kvbm
