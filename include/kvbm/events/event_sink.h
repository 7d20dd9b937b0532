// kvbm/events/event_sink.h: where published KV event batches go.
//
// The KvEventPublisher (kvbm/events/kv_events.h) hands each batch to one
// EventSink together with its sequence number and its msgpack encoding:
//
//   CallbackEventSink  calls a function; always built (tests, in-process use,
//                      or a transport of your own)
//   ZmqEventSink       a ZeroMQ PUB socket sending what vLLM's publisher sends:
//                      the multipart message [topic, sequence as 8 bytes big
//                      endian, payload]; optionally a ROUTER socket that
//                      replays recent batches to a subscriber that missed
//                      some, each as [topic, sequence, payload] behind the
//                      envelope, then an end marker [topic "", -1, ""]
//                      (vLLM's replay frames; docs/events.md). Built when kvbm has KVBM_HAVE_ZMQ
//                      (kvbm/config.h); otherwise its constructor throws UsageError.
//
// Thread-safety: the publisher calls publish() from one thread at a time, in
// increasing sequence order; a sink needs no locking of its own for that.
// publish() may throw; the publisher logs the failure and goes on with the
// next batch (the subscriber sees a gap in the sequence numbers).

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kvbm/events/kv_event.h"

namespace kvbm::events {

/// Receives published batches; see the file comment.
class EventSink {
 public:
  virtual ~EventSink() = default;
  /// Publishes one batch: `payload` is `batch` encoded in the publisher's layout.
  virtual void publish(std::uint64_t sequence, const KvEventBatch& batch,
                       std::span<const std::uint8_t> payload) = 0;
};

/// An EventSink that calls a function for every batch.
class CallbackEventSink final : public EventSink {
 public:
  using Callback = std::function<void(std::uint64_t sequence, const KvEventBatch& batch,
                                      std::span<const std::uint8_t> payload)>;
  /// Precondition: `callback` is not empty.
  explicit CallbackEventSink(Callback callback);
  void publish(std::uint64_t sequence, const KvEventBatch& batch,
               std::span<const std::uint8_t> payload) override;

 private:
  Callback callback_;
};

/// Configuration of a ZmqEventSink; the defaults are vLLM's.
struct ZmqEventSinkOptions {
  /// PUB address. Bound when it contains "*" or "::" or is ipc:// or
  /// inproc://, otherwise connected (vLLM's rule). "tcp://127.0.0.1:*" binds
  /// an ephemeral port; endpoint() tells which.
  std::string endpoint = "tcp://*:5557";
  /// First frame of every message; subscribers filter on its prefix. vLLM's
  /// default is empty; its example subscriber uses "kv-events".
  std::string topic;
  /// ROUTER address for replay requests, always bound; none by default.
  std::optional<std::string> replay_endpoint;
  /// Batches kept for replay.
  std::size_t replay_buffer_batches = 10'000;
  /// ZMQ send high-water mark of the PUB socket (messages queued per subscriber).
  int send_hwm = 100'000;
  /// How long closing waits for queued messages to leave.
  std::chrono::milliseconds linger{1000};
};

/// An EventSink on a ZeroMQ PUB socket; see the file comment.
class ZmqEventSink final : public EventSink {
 public:
  /// Creates and binds (or connects) the sockets. Throws UsageError when kvbm
  /// was built without ZeroMQ, or when the endpoint cannot be bound.
  explicit ZmqEventSink(ZmqEventSinkOptions options);
  ~ZmqEventSink() override;
  ZmqEventSink(const ZmqEventSink&) = delete;
  ZmqEventSink& operator=(const ZmqEventSink&) = delete;

  /// Returns the PUB socket's actual endpoint (the port a "*" resolved to).
  [[nodiscard]] std::string endpoint() const;
  /// Returns the replay socket's actual endpoint, or "" when there is none.
  [[nodiscard]] std::string replay_endpoint() const;

  void publish(std::uint64_t sequence, const KvEventBatch& batch,
               std::span<const std::uint8_t> payload) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::events
