// kvbm/events/kv_events.h: publishes the pools' KV cache events for routers.
//
// A KvEventPublisher collects BlockStored, BlockRemoved and AllBlocksCleared
// events from the pools it is attached to (listener(medium, block_size): one
// PoolListener per pool; listener(medium, group) for a hybrid model's group,
// whose events carry the group), batches them and hands each batch, encoded in vLLM's
// msgpack layout, to an EventSink (kvbm/events/event_sink.h): a ZeroMQ PUB
// socket for routers, or a callback. flush() publishes what was collected and
// returns when the sink has it; a background flusher does the same every
// flush_interval, and the destructor flushes what is left. Batches carry
// consecutive sequence numbers from 0, in the order the pools reported; a batch
// the sink failed to take leaves a gap. A BlockStored carries token_ids only
// when the block was registered with its tokens (Dynamo's router drops one
// without). docs/events.md has the events, the wire format, coalescing,
// ordering, heartbeats and an example.
//
// Collecting never blocks a pool: the listeners run under the pool's lock and
// only append to a buffer under the publisher's own short lock (no encoding,
// no I/O). At most max_pending_blocks wait for a flush; beyond that new events
// are dropped and counted (stats().dropped_blocks).
//
// Lifetime: listeners hold the publisher's state weakly; events reported
// after the publisher is destroyed are dropped.
// Thread-safety: every member may be called from any thread.

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvbm/clock.h"
#include "kvbm/events/event_group.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_event.h"
#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/pool_listener.h"

namespace kvbm::events {

/// Configuration of a KvEventPublisher.
struct KvEventPublisherOptions {
  /// The background flusher publishes at least this often.
  std::chrono::milliseconds flush_interval{100};
  /// Most blocks in one batch; this many waiting wakes the flusher early.
  std::size_t max_batch_size = 1024;
  /// Most blocks waiting for a flush before new events are dropped.
  std::size_t max_pending_blocks = std::size_t{1} << 20;
  /// Start the background flusher; false leaves publishing to flush().
  bool background_flush = true;
  /// The data-parallel rank stamped on every batch (vLLM stamps its own).
  std::optional<std::int32_t> data_parallel_rank = 0;
  /// The msgpack layout: kMap is what vLLM sends today (docs/events.md).
  WireLayout layout = WireLayout::kMap;
  /// Seconds since the epoch for a batch's timestamp; the system clock when empty.
  std::function<double()> clock;
  /// Publish an empty batch when nothing was published for this long; zero
  /// (the default) turns heartbeats off. See the file comment.
  std::chrono::milliseconds heartbeat_interval{0};
  /// Monotonic time for the flush interval and the heartbeat (kvbm/clock.h);
  /// the steady clock when null.
  std::shared_ptr<Clock> monotonic_clock;
};

/// Counters of a KvEventPublisher.
struct KvEventPublisherStats {
  std::uint64_t batches_published = 0;  ///< batches the sink accepted (heartbeats included)
  std::uint64_t heartbeats = 0;         ///< empty batches the sink accepted
  std::uint64_t events_published = 0;   ///< events in those batches
  std::uint64_t failed_batches = 0;     ///< batches the sink threw on
  std::uint64_t dropped_blocks = 0;     ///< blocks dropped beyond max_pending_blocks
};

/// Collects, batches and publishes KV events; see the file comment.
class KvEventPublisher {
 public:
  /// Precondition: sink is not null, max_batch_size > 0, flush_interval > 0
  /// when background_flush, heartbeat_interval >= 0.
  explicit KvEventPublisher(std::shared_ptr<EventSink> sink, KvEventPublisherOptions options = {});
  /// Stops the flusher and flushes what is left.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  /// Returns a listener for one pool: blocks of `block_size` tokens on `medium`
  /// (kMediumGpu, kMediumCpu, kMediumDisk, kMediumRemote). Precondition:
  /// medium is not empty, block_size > 0.
  [[nodiscard]] std::shared_ptr<PoolListener> listener(std::string medium,
                                                       std::uint32_t block_size);
  /// Returns a listener for the pool of one KV cache group of a hybrid model
  /// on `medium`: blocks of the group's tokens per block, whose events name the
  /// group (event_group(group): group_idx, kind, sliding window). Events of
  /// different groups are never coalesced. Throws UsageError for an empty
  /// medium or an invalid group.
  [[nodiscard]] std::shared_ptr<PoolListener> listener(std::string medium,
                                                       const KvCacheGroupSpec& group);

  /// Adds an event as a pool would (coalesced the same way). Cheap; no I/O.
  void record(KvEvent event);
  /// Adds an AllBlocksCleared for `medium`.
  void clear_all(std::string medium);

  /// Publishes everything collected so far; returns the number of batches
  /// handed to the sink (0 when nothing was waiting and no heartbeat was due).
  std::size_t flush();

  /// Returns the number of events waiting for a flush.
  [[nodiscard]] std::size_t pending_events() const;
  /// Returns the counters.
  [[nodiscard]] KvEventPublisherStats stats() const;

  struct State;  // defined in src/events/kv_events.cpp

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kvbm::events
