// kvbm/router/kv_event_feed.h: a KvIndexer fed by the instances' ZeroMQ event streams.
//
// A KvEventFeed subscribes to every instance's KV event publisher
// (events::ZmqEventSink: a PUB socket and its replay ROUTER) through one
// events::ZmqEventSubscriber and applies each batch to a KvIndexer. It keeps
// the index right when the network is not: it asks for a replay from 0 when an
// instance is added and from the first missing batch on a gap, resyncs an
// instance whose batches the publisher no longer keeps or that sent a batch
// that does not decode, and reads a restarted publisher's new run from batch 0.
// docs/router.md ("Fed over ZeroMQ") has each case. A restart whose first
// batch seen carries the very number expected next looks like a continuation:
// an engine that restarts should publish AllBlocksCleared first
// (KvEventPublisher::clear_all), which clears its old entries.
//
// wait_applied() lets a caller that knows what an instance published wait
// until the index has it, asking for a replay again every `retry_interval`
// (a batch lost at the tail of a stream reveals no gap).
//
// Thread-safety: every member may be called from any thread; the indexer is
// written from the subscriber's thread.

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kvbm/clock.h"
#include "kvbm/events/zmq_event_subscriber.h"
#include "kvbm/router/kv_indexer.h"

namespace kvbm::router {

/// Configuration of a KvEventFeed.
struct KvEventFeedOptions {
  events::ZmqEventSubscriberOptions subscriber;
  /// How often wait_applied() asks again for what is missing.
  std::chrono::milliseconds retry_interval{100};
  /// Measures wait_applied()'s timeout and retry_interval, and the
  /// subscriber's replay_timeout when subscriber.clock is null
  /// (kvbm/clock.h); Clock::steady() when null.
  std::shared_ptr<Clock> clock;
};

/// Counters of a KvEventFeed.
struct KvEventFeedStats {
  std::uint64_t batches_received = 0;  ///< live and replayed
  std::uint64_t replays_requested = 0;
  std::uint64_t replays_incomplete = 0;  ///< the publisher no longer kept the batch: resynced
  std::uint64_t decode_errors = 0;
  std::uint64_t restarts = 0;  ///< live batches numbered below the next expected
};

/// Feeds a KvIndexer from ZeroMQ; see the file comment.
class KvEventFeed {
 public:
  /// Precondition: `index` outlives the feed. Throws UsageError when kvbm was
  /// built without ZeroMQ.
  explicit KvEventFeed(KvIndexer& index, KvEventFeedOptions options = {});
  ~KvEventFeed();
  KvEventFeed(const KvEventFeed&) = delete;
  KvEventFeed& operator=(const KvEventFeed&) = delete;

  /// Adds instance `name` to the index and subscribes to `source` (its
  /// endpoint, topic and replay endpoint). Returns its id in the index.
  InstanceId add_instance(std::string name, events::EventSource source);
  /// Unsubscribes and removes the instance from the index.
  void remove_instance(InstanceId id);
  /// Waits until the index has applied batch `sequence` of `id` (and every
  /// one before it); returns false after `timeout`.
  bool wait_applied(InstanceId id, std::uint64_t sequence, std::chrono::milliseconds timeout);
  [[nodiscard]] KvEventFeedStats stats() const;

  struct Impl;  // defined in src/router/kv_event_feed.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::router
