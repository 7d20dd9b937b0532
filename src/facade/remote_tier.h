// src/facade/remote_tier.h (internal): the remote tier G4 in the facade.
//
// G4 is a RemoteStore (kvbm/remote/) shared by engine instances. It has no
// pool here: the store evicts by its own policy and other instances write to
// it, so what it holds is asked, never remembered. Both ways go through G2:
//
//   down  G2 -> G4 in the mode of config.host_to_remote:
//           kWriteThrough  every block that lands in G2 (a copy from G1, or
//                          one registered on host()) is handed to take();
//           kOnEviction    eviction_listener() on the G2 pool hands over
//                          what G2 evicts;
//         either way a RemoteWriter copies the block into its staging memory
//         at once and writes it on its worker, through the boundary's
//         policies (host_to_remote_policy: the presence policy asks G4 in one
//         round trip per batch; min_frequency); config.remote_listeners hear
//         of each block that is then in G4 (written, or found there);
//   up    fetch_into_g2(hashes), on the fetch worker (post(): never the
//         caller's thread): that many G2 blocks are allocated and filled by
//         one pipelined GET per server, each value verified (namespace,
//         hash, size, checksum) before its block is registered in G2; the
//         verified prefix is returned, held. A block that fails verification
//         (or is missing, or its server fails) ends it: a miss, counted by
//         the store. Onboarding (facade/onboarding.cpp) walks the prefix
//         across the tiers with present_prefix() and these fetches.
//
// Lifetime: bind() once the pools exist. Shutdown: drain() and stop_writes()
// after the pipelines into G2 stopped; stop_fetches() after onboarding has
// ended (post() refuses work afterwards).
// Thread-safety: every member from any thread.

#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/offload/remote_writer.h"
#include "kvbm/pool_listener.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm::facade {

/// G4 in the facade; see the file comment.
class RemoteTier {
 public:
  /// Connects nothing yet (the store's workers connect on first use); throws
  /// UsageError on a bad URL. `host` lays out G2 (memory already allocated).
  RemoteTier(const KvBlockManagerConfig& c, Layout host, std::shared_ptr<FrequencyTracker> tracker);
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  [[nodiscard]] OffloadMode mode() const noexcept { return mode_; }
  /// The listener the G2 pool is built with (on-eviction), else null.
  [[nodiscard]] std::shared_ptr<PoolListener> eviction_listener() const { return listener_; }
  void bind(BlockManager<G2>& g2);

  /// Write-through: blocks just registered in G2.
  void take(const std::vector<ImmutableBlock<G2>>& blocks) noexcept;
  /// Waits until every block taken so far is written (or failed).
  void drain();
  void stop_writes();

  /// How many of `hashes`, from the first, G4 holds (one round trip).
  [[nodiscard]] std::size_t present_prefix(std::span<const SequenceHash> hashes) const;
  /// Fetches `hashes` into G2 (see the file comment); returns the verified
  /// prefix, registered in G2 and held. Blocks for the round trips.
  /// With `error`, the first failure that ended the prefix early is recorded
  /// there (a G4 status as its ErrorKind; kNoSpace when G2 had no room).
  [[nodiscard]] std::vector<ImmutableBlock<G2>> fetch_into_g2(
      std::span<const SequenceHash> hashes, std::optional<Error>* error = nullptr);
  /// Runs `job` on the fetch worker; false (job not run) once stopped.
  [[nodiscard]] bool post(std::function<void()> job);
  /// Waits until the fetch worker has run every job posted so far.
  void wait_fetches();
  void stop_fetches();

  [[nodiscard]] RemoteStore& store() noexcept { return *store_; }
  /// The G2 -> G4 outcomes so far.
  [[nodiscard]] OffloadCounts write_counts() const noexcept { return writer_->counts(); }

 private:
  const OffloadMode mode_;
  const Layout host_;
  std::shared_ptr<RemoteStore> store_;
  std::shared_ptr<RemoteWriter> writer_;
  std::shared_ptr<PoolListener> listener_;
  BlockManager<G2>* g2_ = nullptr;

  std::unique_ptr<detail::Worker> worker_;  // the fetch worker, from bind(); last
};

}  // namespace kvbm::facade
