// kvbm/offload/config.h: the options of an offload pipeline.
//
// The defaults are those of the offload spec:
//
//   batch_config.max_batch_size   64     most blocks per batch (and per engine submit)
//   batch_config.min_batch_size   8      a batch with this many blocks is flushed at once
//   batch_config.flush_interval   10 ms  a smaller batch is flushed this long after
//                                        its first container arrived
//   policy_timeout                100 ms a policy call taking longer counts as
//                                        filtering every block it was asked about
//   sweep_interval                10 ms  how often the CancelSweeper removes
//                                        cancelled containers from the queues
//   max_concurrent_transfers      1      batches submitted to the engine and not
//                                        yet complete, at most
//
// validate() rejects an invalid combination with a UsageError naming the
// option. All durations are measured on the pipeline's Clock.

#pragma once

#include <chrono>
#include <cstddef>

namespace kvbm {

/// How the Batcher groups containers.
struct BatchConfig {
  /// Most blocks in one batch (1 ..). A single container larger than this
  /// forms a batch of its own, which the executor submits in pieces of at
  /// most this many blocks; containers are never split (P1).
  std::size_t max_batch_size = 64;
  /// A batch holding at least this many blocks is flushed at once
  /// (1 .. max_batch_size).
  std::size_t min_batch_size = 8;
  /// A batch below min_batch_size is flushed this long after its first
  /// container arrived (> 0).
  std::chrono::nanoseconds flush_interval = std::chrono::milliseconds(10);
};

/// Every option of an OffloadPipeline; see the file comment.
struct PipelineConfig {
  BatchConfig batch_config;
  /// Longest a policy may take over one container (> 0).
  std::chrono::nanoseconds policy_timeout = std::chrono::milliseconds(100);
  /// Period of the cancel sweeper (> 0).
  std::chrono::nanoseconds sweep_interval = std::chrono::milliseconds(10);
  /// Most batches in flight in the transfer engine (1 ..).
  std::size_t max_concurrent_transfers = 1;
  /// When true, a container holds strong references to its blocks from
  /// enqueue() until the executor seals it (or it is cancelled, filtered
  /// away or ends): queued blocks cannot be evicted, so every one is copied,
  /// and the source pool pushes back (its allocations fail while it is full
  /// of blocks waiting for their copy; drain or wait, then retry). When false
  /// (the spec's default), queued blocks are weak and one evicted before its
  /// copy starts is dropped (P3).
  bool hold_queued_blocks = false;
  /// Longest (on the pipeline's clock) the executor waits for room in the destination
  /// before it reports the blocks that do not fit as kNoSpace; 0 (the
  /// default): it does not wait. While it waits, the pipeline's later
  /// batches wait too. With hold_queued_blocks on every pipeline of a chain,
  /// a nonzero wait makes write-through lose nothing as long as the lowest
  /// tier keeps up: back-pressure reaches the top tier's allocations.
  std::chrono::nanoseconds space_wait{0};

  /// Throws UsageError naming the first invalid option.
  void validate() const;
};

}  // namespace kvbm
