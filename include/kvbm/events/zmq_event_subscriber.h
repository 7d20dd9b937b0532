// kvbm/events/zmq_event_subscriber.h: receives KV event batches from many
// publishers over ZeroMQ.
//
// The consumer side of ZmqEventSink (kvbm/events/event_sink.h) and of vLLM's
// own publisher: a router adds one source per engine instance; one thread polls
// a SUB socket per source (and a DEALER for its replay socket), decodes each
// batch (kvbm/events/kv_event_decoder.h) and hands it to on_batch in the order
// it arrived, with the publisher's sequence number. The subscriber does not
// judge sequences (a gap shows as a jump, a restart as a lower number); the
// caller fills a gap with request_replay(source, from), whose batches come with
// replayed = true, in order, before the live ones held back meanwhile, and
// on_replay_incomplete says when `from` could not be delivered. docs/events.md
// ("Replay", "Subscribing") has the details and an example; router::KvEventFeed
// does all of this for a KvIndexer.
//
// Errors: a message that does not decode goes to on_decode_error (sequence ~0
// when it had none) and is counted; the subscriber goes on. Built without
// KVBM_HAVE_ZMQ (kvbm/config.h), the constructor throws UsageError.
//
// Lifetime and threads: callbacks run on the subscriber's thread, one at a
// time, in order per source; they may call add_source, request_replay and
// remove_source (not the destructor). Every member may be called from any
// thread. remove_source returns once no further callback of that source will
// run (at once when called from a callback). The destructor stops the thread
// and closes every socket; sources may still be connected.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvbm/clock.h"
#include "kvbm/events/kv_event.h"

namespace kvbm::events {

/// One publisher to subscribe to.
struct EventSource {
  std::string name;             ///< for logs
  std::string endpoint;         ///< its PUB socket, e.g. "tcp://engine-0:5557" (connected)
  std::string topic;            ///< the topic prefix to subscribe to; "" for every message
  std::string replay_endpoint;  ///< its ROUTER replay socket; "" for none
};

/// Configuration of a ZmqEventSubscriber.
struct ZmqEventSubscriberOptions {
  /// A replay that has had no answer for this long is given up (reported incomplete).
  std::chrono::milliseconds replay_timeout{1000};
  /// ZMQ receive high-water mark of each SUB socket (messages queued).
  int recv_hwm = 100'000;
  /// Measures replay_timeout (kvbm/clock.h); Clock::steady() when null. The
  /// thread waits in zmq_poll, which a ManualClock's advance() does not wake:
  /// a timeout is seen at its next wake (a message, a call, or a real-time
  /// poll timeout of at most replay_timeout).
  std::shared_ptr<Clock> clock;
};

/// Counters of a ZmqEventSubscriber.
struct ZmqEventSubscriberStats {
  std::uint64_t batches = 0;             ///< delivered to on_batch, live and replayed
  std::uint64_t replayed_batches = 0;    ///< of those, replayed
  std::uint64_t decode_errors = 0;       ///< messages that did not decode
  std::uint64_t skipped_events = 0;      ///< events of classes kvbm does not know
  std::uint64_t replays_requested = 0;   ///< request_replay calls
  std::uint64_t replays_answered = 0;    ///< replays that ended with the end marker
  std::uint64_t replays_incomplete = 0;  ///< on_replay_incomplete calls
};

/// Subscribes to KV event publishers; see the file comment.
class ZmqEventSubscriber {
 public:
  /// A decoded batch: the source's id, the batch's sequence number, whether a replay brought it.
  using OnBatch = std::function<void(std::size_t source, std::uint64_t sequence,
                                     const KvEventBatch& batch, bool replayed)>;
  /// A message that was not a batch; `error` says why.
  using OnDecodeError =
      std::function<void(std::size_t source, std::uint64_t sequence, const std::string& error)>;
  /// A replay from `wanted` could not deliver it; `first_kept` is the first
  /// sequence it delivered (nullopt: none).
  using OnReplayIncomplete = std::function<void(std::size_t source, std::uint64_t wanted,
                                                std::optional<std::uint64_t> first_kept)>;

  /// What the subscriber calls; only on_batch is required.
  struct Callbacks {
    OnBatch on_batch;
    OnDecodeError on_decode_error;
    OnReplayIncomplete on_replay_incomplete;
  };

  /// Starts the thread. Throws UsageError without on_batch, with
  /// replay_timeout <= 0 or recv_hwm < 0, or when kvbm was built without ZeroMQ.
  explicit ZmqEventSubscriber(Callbacks callbacks, ZmqEventSubscriberOptions options = {});
  /// Stops the thread and closes every socket.
  ~ZmqEventSubscriber();
  ZmqEventSubscriber(const ZmqEventSubscriber&) = delete;
  ZmqEventSubscriber& operator=(const ZmqEventSubscriber&) = delete;

  /// Connects to a source and returns its id (0, 1, 2, ... never reused).
  /// Throws UsageError for an empty or malformed endpoint.
  std::size_t add_source(EventSource source);
  /// Disconnects a source; see the file comment. An unknown id is ignored.
  void remove_source(std::size_t source);
  /// Asks the source's replay socket for its batches from `from` on; returns
  /// at once (see the file comment). An unknown id is ignored.
  void request_replay(std::size_t source, std::uint64_t from);
  /// Waits until a batch of `source` with a sequence >= `sequence` has been
  /// delivered (its on_batch returned) since the source was added; false
  /// after `timeout`, or for an unknown or removed source.
  bool wait_until(std::size_t source, std::uint64_t sequence, std::chrono::milliseconds timeout);
  /// Returns the counters.
  [[nodiscard]] ZmqEventSubscriberStats stats() const;

  struct Impl;  // defined in src/events/zmq_event_subscriber.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::events
