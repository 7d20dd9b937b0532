// src/facade/remote_tier.h (internal): the remote tier G4, a row of the facade.
//
// G4 is a RemoteStore (kvbm/remote/) shared by engine instances. It has no
// pool here: the store evicts by its own policy and other instances write to
// it, so what it holds is asked, never remembered. Both ways go through the
// tier above it (TierSpec::above, G2, in pinned host memory):
//
//   down  the boundary from above (link()) in the mode of
//         config.host_to_remote: write-through takes every block that lands
//         above (a copy from the tier above that, or one registered there);
//         on-eviction listens to the upper pool for what it evicts. Either
//         way a RemoteWriter copies the block into its staging memory at once
//         and writes it on its worker, through the boundary's policies
//         (host_to_remote_policy: the presence policy asks G4 in one round
//         trip per batch; min_frequency); config.remote_listeners hear of
//         each block that is then in G4 (written, or found there);
//   up    take(hashes, landing): that many blocks are reserved in the landing
//         tier and filled by one pipelined GET per server, each value
//         verified (namespace, hash, size, checksum) before its block is
//         registered there; the verified prefix is handed back, held. A block
//         that fails verification (or is missing, or its server fails) ends
//         it: a miss, counted by the store. Onboarding calls it off the
//         caller's thread (Tier::remote()).
//
// Lifetime: built before the row above it (which listens with link()'s
// listener). Shutdown: the boundary's stop_pipelines() writes what is staged
// and stops the writer.
// Thread-safety: every member from any thread.

#pragma once

#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "facade/boundary.h"
#include "facade/costs.h"
#include "facade/tier.h"
#include "kvbm/block_manager.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/offload/remote_writer.h"
#include "kvbm/pool_listener.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm::facade {

/// The boundary into G4: its writer's intake; see the file comment.
template <TierMarker Upper>
class RemoteBoundary final : public Boundary<Upper> {
 public:
  RemoteBoundary(const TierSpec& remote, std::shared_ptr<RemoteWriter> writer)
      : Boundary<Upper>(remote.id, remote.mode), writer_(std::move(writer)) {}

  void take(const std::vector<ImmutableBlock<Upper>>& blocks,
            std::shared_ptr<Precondition> pre) override {
    (void)pre;  // blocks land above only once their bytes are there
    if (this->mode() == OffloadMode::kWriteThrough) stage(blocks);
  }
  /// Stages the blocks whatever the mode; there is no handle to wait on
  /// (drain() waits for every write).
  TransferHandle offload(const std::vector<ImmutableBlock<Upper>>& blocks,
                         std::shared_ptr<Precondition> pre) override {
    (void)pre;
    stage(blocks);
    return {};
  }
  void drain() override { writer_->drain(); }
  void stop_pipelines() override { writer_->shutdown(); }
  [[nodiscard]] OffloadCounts counts() override { return writer_->counts(); }

 private:
  void stage(const std::vector<ImmutableBlock<Upper>>& blocks) noexcept {
    if (blocks.empty()) return;
    std::vector<RemoteWriter::Source> sources;
    sources.reserve(blocks.size());
    for (const auto& b : blocks) sources.push_back({b.block_id(), b.sequence_hash()});
    (void)writer_->stage(sources);
  }

  std::shared_ptr<RemoteWriter> writer_;
};

/// G4 in the facade; see the file comment.
class RemoteTier final : public Tier {
 public:
  /// Connects nothing yet (the store's workers connect on first use); throws
  /// UsageError on a bad URL. `above` lays out the tier above (allocated).
  /// `costs` learns what G4 fetches and writes cost (facade/costs.h).
  RemoteTier(const TierSpec& spec, const KvBlockManagerConfig& c, const Layout& above,
             std::shared_ptr<FrequencyTracker> tracker, std::shared_ptr<Costs> costs);
  ~RemoteTier() override;

  /// What the row above is built with: the on-eviction listener and the boundary.
  template <TierMarker Upper>
  [[nodiscard]] Link<Upper> link() const {
    Link<Upper> l;
    l.mode = spec().mode;
    l.listener = listener_;
    l.make = [spec = spec(), writer = writer_](BlockManager<Upper>&) {
      return std::make_unique<RemoteBoundary<Upper>>(spec, writer);
    };
    return l;
  }

  [[nodiscard]] std::vector<bool> presence(std::span<const SequenceHash> hashes) const override;
  [[nodiscard]] Taken take(std::span<const SequenceHash> run, Tier* landing,
                           std::optional<Error>* error) override;
  void collect(KvBlockManagerStats& out) const override;

 private:
  std::shared_ptr<RemoteStore> store_;
  std::shared_ptr<RemoteWriter> writer_;
  std::shared_ptr<PoolListener> listener_;
  std::shared_ptr<Costs> costs_;
};

}  // namespace kvbm::facade
