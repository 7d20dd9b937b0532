// kvbm/offload/container.h: what flows through the offload pipeline.
//
// An OffloadContainer<Src> is one enqueue() call: the blocks to offload, held
// as WeakBlocks so that a queued block never prevents its eviction, the
// precondition that must be met before they are copied, the container's
// cancellation token (P2) and the state its TransferHandle reads. A
// container is never split (P1: it is the unit of cancellation).
//
// An OffloadBatch<Src> groups whole containers for one transfer; each stays
// independently cancellable until the executor seals it (P3, P4).
//
// Thread-safety: a container or batch is owned by one stage at a time and is
// not shared; its state and token are.

#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/weak_block.h"
#include "kvbm/offload/cancel.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/offload/transfer_handle.h"
#include "kvbm/tier.h"

namespace kvbm {

/// One enqueued group of blocks of tier Src; see the file comment.
template <TierMarker Src>
struct OffloadContainer {
  std::vector<WeakBlock<Src>> blocks;
  std::shared_ptr<Precondition> precondition;  ///< null: none
  CancellationToken token;                     ///< shared with the handle (P2)
  std::shared_ptr<detail::OffloadState> state;
  /// Strong references that keep the blocks from eviction until the seal;
  /// empty unless PipelineConfig::hold_queued_blocks. Released before the
  /// handle ends, so nothing is pinned once a waiter returns.
  mutable std::vector<ImmutableBlock<Src>> held;

  /// Builds a container and the handle that follows it. With `hold`, the
  /// blocks that can still be upgraded are held until the seal.
  static std::pair<OffloadContainer, TransferHandle> make(
      std::vector<WeakBlock<Src>> blocks, std::shared_ptr<Precondition> precondition = nullptr,
      std::weak_ptr<OffloadMetrics> metrics = {}, bool hold = false) {
    std::vector<ImmutableBlock<Src>> held;
    if (hold) {
      held.reserve(blocks.size());
      for (const auto& w : blocks) {
        if (auto strong = w.upgrade()) held.push_back(std::move(*strong));
      }
    }
    auto state = std::make_shared<detail::OffloadState>(blocks.size(), std::move(metrics));
    OffloadContainer c{std::move(blocks), std::move(precondition), state->token, state,
                       std::move(held)};
    return {std::move(c), TransferHandle(std::move(state))};
  }

  /// Builds a container from strong blocks, downgrading them; with `hold`,
  /// it also keeps them strong until the seal.
  static std::pair<OffloadContainer, TransferHandle> make(
      const std::vector<ImmutableBlock<Src>>& blocks,
      std::shared_ptr<Precondition> precondition = nullptr,
      std::weak_ptr<OffloadMetrics> metrics = {}, bool hold = false) {
    std::vector<WeakBlock<Src>> weak;
    weak.reserve(blocks.size());
    for (const auto& b : blocks) weak.push_back(b.downgrade());
    auto made = make(std::move(weak), std::move(precondition), std::move(metrics));
    if (hold) made.first.held = blocks;
    return made;
  }

  /// Returns true once the token is cancelled.
  [[nodiscard]] bool cancelled() const noexcept { return token.is_cancelled(); }
  /// Returns true when there is no precondition or it is met.
  [[nodiscard]] bool precondition_met() const { return !precondition || precondition->is_met(); }
  /// Cancels the container (a no-op past the seal) and ends its handle as
  /// kCancelled; used when a stage must drop it (shutdown).
  void cancel() const {
    if (token.cancel() || token.is_cancelled()) finish_cancelled();
  }
  /// For CancellableQueue::sweep: when cancelled, ends the handle and
  /// returns true (remove me).
  bool sweep() const {
    if (!cancelled()) return false;
    finish_cancelled();
    return true;
  }
  /// Releases the held blocks, then ends the handle (nothing left to copy).
  void finish() const {
    held.clear();
    state->finish();
  }
  /// Releases the held blocks, then ends the handle as kCancelled.
  void finish_cancelled() const {
    held.clear();
    state->finish_cancelled();
  }
};

/// Whole containers grouped for one transfer.
template <TierMarker Src>
struct OffloadBatch {
  std::vector<OffloadContainer<Src>> containers;

  /// Returns the number of blocks over all containers.
  [[nodiscard]] std::size_t block_count() const noexcept {
    std::size_t n = 0;
    for (const auto& c : containers) n += c.blocks.size();
    return n;
  }
  [[nodiscard]] bool empty() const noexcept { return containers.empty(); }
  /// Returns true when every container's precondition is met.
  [[nodiscard]] bool preconditions_met() const {
    for (const auto& c : containers) {
      if (!c.precondition_met()) return false;
    }
    return true;
  }
  /// Removes the cancelled containers, ending their handles (P4); returns
  /// how many were removed.
  std::size_t sweep_cancelled() {
    return std::erase_if(containers, [](const OffloadContainer<Src>& c) { return c.sweep(); });
  }
  /// For CancellableQueue::sweep: sweeps, and asks to be removed when empty.
  bool sweep() {
    sweep_cancelled();
    return empty();
  }
};

}  // namespace kvbm
