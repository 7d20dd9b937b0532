// kvbm/transfer/bounce_engine.h: a two-hop transfer through a staging pool.
//
// Some paths have no direct copy: disk to device goes through pinned host
// memory (the GPU cannot read a file, and O_DIRECT reads want aligned host
// buffers). A BounceTransferEngine joins two engines over a small pool of
// staging ("bounce") blocks: `first` copies source blocks into bounce blocks,
// `second` copies bounce blocks into destination blocks. For disk -> device:
//
//   first  = a disk engine from the disk layout to the bounce layout (pinned),
//   second = CudaTransferEngine(bounce layout, device layout, kHostToDevice).
//
// Bounce block ids are 0 .. bounce_blocks - 1 in first's destination and in
// second's source. A batch larger than the pool runs in chunks of half the
// pool, pipelined: while `second` moves chunk k, `first` fills chunk k + 1 in
// the other half. The engine owns one thread that drives the chunks; the two
// engines do the copies on their own threads or streams.
//
// Failure: a pair that fails in the first hop is not copied in the second; a
// pair is reported failed when either hop failed it (by its index in the
// batch); the outcome's error is the first hop error seen.
//
// Lifetime: `first` and `second` must outlive this engine and must not be
// used by anyone else for the bounce blocks. Destroying the engine waits for
// every accepted batch.
//
// Thread-safety: submit() may be called from several threads; batches run
// one after another, in submission order.

#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvbm/transfer/transfer_engine.h"

namespace kvbm {

/// Settings of a BounceTransferEngine.
struct BounceEngineOptions {
  /// Staging blocks shared by the two hops; at least 1 (2 or more pipelines).
  std::size_t bounce_blocks = 0;
  /// Blocks in the source (first's source), for validating submitted ids.
  std::size_t src_blocks = 0;
  /// Blocks in the destination (second's destination), likewise.
  std::size_t dst_blocks = 0;
  /// The path's name, e.g. "disk_to_device".
  std::string name = "bounce";
};

/// A TransferEngine that copies through a pool of bounce blocks.
class BounceTransferEngine final : public TransferEngine {
 public:
  /// Starts the driver thread. Throws UsageError when a count in `options` is
  /// zero or the name is empty.
  BounceTransferEngine(TransferEngine& first, TransferEngine& second, BounceEngineOptions options);
  /// Waits for every accepted batch, then stops the driver thread.
  ~BounceTransferEngine() override;
  BounceTransferEngine(const BounceTransferEngine&) = delete;
  BounceTransferEngine& operator=(const BounceTransferEngine&) = delete;

  [[nodiscard]] std::string_view name() const noexcept override;
  /// Queues the batch; returns at once. Throws UsageError, having started
  /// nothing, when the batch is empty, an id is out of range, or a
  /// destination block appears twice.
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm
