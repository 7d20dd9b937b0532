// kvbm/events/kv_events.h: publishes the pools' KV cache events for routers.
//
// A KvEventPublisher collects BlockStored, BlockRemoved and AllBlocksCleared
// events from the pools it is attached to, batches them and hands each batch,
// encoded in vLLM's msgpack layout, to an EventSink (kvbm/events/event_sink.h):
// a ZeroMQ PUB socket for routers, or a callback.
//
//   events::ZmqEventSinkOptions zmq;
//   zmq.endpoint = "tcp://*:5557";
//   zmq.topic = "kv-events";
//   events::KvEventPublisher publisher(std::make_shared<events::ZmqEventSink>(zmq));
//   auto g1 = BlockManager<G1>::builder()....listener(publisher.listener("GPU", 16)).build();
//
// Collecting: listener(medium, block_size) returns a PoolListener. Its
// on_stored / on_removed run under the pool's lock, so they only append to a
// buffer under the publisher's own short lock: no encoding, no I/O. A stored
// hash becomes a BlockStored with block_hashes = [value], parent_block_hash =
// its parent (nil at position 0) and no LoRA id; its token_ids are the
// block's tokens when the caller registered it with them
// (BlockManager::register_block(block, tokens), which reaches the listener's
// on_stored_with_tokens), else empty (Dynamo's router drops a BlockStored
// without tokens: register with tokens for it). Consecutive events of one kind and medium are
// coalesced into one event with several hashes, keeping their order; a BlockStored only grows when
// the new block's parent is its last block, so the chain a router reads stays true. record() adds
// any event (one with token ids, say) and clear_all(medium) an AllBlocksCleared.
//
// Publishing: flush() encodes everything collected so far into batches of at
// most max_batch_size blocks (an AllBlocksCleared counts as one) and hands
// them to the sink with consecutive sequence numbers from 0; it returns when
// the sink has them, so tests can flush and look. A background flusher does
// the same every flush_interval, and sooner when max_batch_size blocks wait.
// The destructor stops it and flushes what is left.
//
// Heartbeat (heartbeat_interval, off by default): a flush that finds nothing
// to publish, heartbeat_interval or more after the last batch went to the
// sink, publishes an empty batch (events = []) with the next sequence number,
// so a router can tell a silent instance from a vanished one. The background
// flusher wakes at least every heartbeat_interval for it.
//
// Ordering: events reach the sink in the order the pools reported them (the
// order each pool changed; across pools, the order their listeners ran).
// Batches carry strictly increasing sequence numbers; a batch the sink failed
// to take leaves a gap.
//
// Back-pressure: at most max_pending_blocks wait for a flush; beyond that new
// events are dropped and counted (stats().dropped_blocks), since a pool's lock
// must never wait on a slow subscriber.
//
// Lifetime: listeners hold the publisher's state weakly; events reported
// after the publisher is destroyed are dropped.
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvbm/clock.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_event.h"
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
  /// Monotonic time for the heartbeat (kvbm/clock.h); the steady clock when null.
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
