// src/events/zmq_event_sink.cpp: the ZeroMQ PUB sink of KV events (kvbm/events/event_sink.h).
//
// The replay ROUTER is served by one detail::Worker job that blocks in
// zmq::poll with no timeout on two sockets: the ROUTER and the receiving end
// of an inproc PAIR. The destructor sends one message on the PAIR's other end
// to wake it, so the thread sleeps until a request or the stop comes; nothing
// polls on a timer.
//
// Without KVBM_HAVE_ZMQ only the stubs at the end are compiled: the
// constructor throws UsageError naming the build option.

#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/events/event_sink.h"

#if KVBM_HAVE_ZMQ

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include <spdlog/spdlog.h>

#include "events/sequence_frame.h"
#include "events/zmq_context.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/logging.h"

namespace kvbm::events {
namespace {

using wire::big_endian;
using wire::from_big_endian;

// vLLM's rule: bind what names a wildcard or a local transport, connect the rest.
bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

}  // namespace

struct ZmqEventSink::Impl {
  explicit Impl(ZmqEventSinkOptions o)
      : options(std::move(o)), pub(context, zmq::socket_type::pub) {
    pub.set(zmq::sockopt::sndhwm, options.send_hwm);
    pub.set(zmq::sockopt::linger, static_cast<int>(options.linger.count()));
    try {
      if (binds(options.endpoint)) {
        pub.bind(options.endpoint);
      } else {
        pub.connect(options.endpoint);
      }
    } catch (const zmq::error_t& e) {
      KVBM_CHECK(false, "ZmqEventSink: cannot open '", options.endpoint, "': ", e.what());
    }
    bound_endpoint = pub.get(zmq::sockopt::last_endpoint);
    if (options.replay_endpoint) {
      KVBM_CHECK(options.replay_buffer_batches > 0,
                 "ZmqEventSink: replay_buffer_batches must be positive with a replay endpoint");
      replay.emplace(context, zmq::socket_type::router);
      replay->set(zmq::sockopt::linger, 0);
      try {
        replay->bind(*options.replay_endpoint);
      } catch (const zmq::error_t& e) {
        KVBM_CHECK(false, "ZmqEventSink: cannot bind replay endpoint '", *options.replay_endpoint,
                   "': ", e.what());
      }
      bound_replay_endpoint = replay->get(zmq::sockopt::last_endpoint);
      open_wake_pair();
      replay_worker = std::make_unique<detail::Worker>("kvbm-zmq-replay");
      (void)replay_worker->post([this] { serve_replay(); });
    }
  }

  ~Impl() {
    if (!replay_worker) return;
    stop.store(true, std::memory_order_relaxed);
    try {
      wake_send->send(zmq::message_t(), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {  // cannot happen on a connected inproc PAIR; logged
      logger()->error("KV events: cannot wake the replay thread: {}", e.what());
    }
    replay_worker->stop();
  }

  // The PAIR that wakes serve_replay(): bound (receiving end) before it is connected, as inproc
  // needs with libzmq before 4.2; named after this sink, so two sinks never share one.
  void open_wake_pair() {
    const std::string name =
        "inproc://kvbm-zmq-sink-wake-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
    wake_recv.emplace(context, zmq::socket_type::pair);
    wake_recv->set(zmq::sockopt::linger, 0);
    wake_recv->bind(name);
    wake_send.emplace(context, zmq::socket_type::pair);
    wake_send->set(zmq::sockopt::linger, 0);
    wake_send->connect(name);
  }

  void publish(std::uint64_t sequence, std::span<const std::uint8_t> payload) {
    const auto seq = big_endian(sequence);
    pub.send(zmq::buffer(options.topic), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
    if (replay) {
      detail::LockGuard lock(buffer_mu);
      buffer.emplace_back(sequence, std::vector<std::uint8_t>(payload.begin(), payload.end()));
      while (buffer.size() > options.replay_buffer_batches) buffer.pop_front();
    }
  }

  // A request is [identity, "", start sequence as 8 bytes big endian]; the
  // answer is one [identity, "", topic, sequence, payload] per kept batch from
  // there (the frames of the PUB socket behind the envelope), then
  // [identity, "", "", -1 as 8 bytes, ""], as vLLM answers since 0.26. Runs as
  // the one job of its worker, whose thread alone touches the ROUTER socket and
  // the PAIR's receiving end; it sleeps in poll until a request or the wake.
  void serve_replay() noexcept {
    while (!stop.load(std::memory_order_relaxed)) {
      try {
        std::array<zmq::pollitem_t, 2> items{
            {{replay->handle(), 0, ZMQ_POLLIN, 0}, {wake_recv->handle(), 0, ZMQ_POLLIN, 0}}};
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
        if ((items[1].revents & ZMQ_POLLIN) != 0) return;  // the destructor's wake
        if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
        std::vector<zmq::message_t> frames;
        do {
          frames.emplace_back();
          (void)replay->recv(frames.back(), zmq::recv_flags::none);
        } while (frames.back().more());
        if (frames.size() != 3) {
          logger()->warn("KV events: ignoring a replay request of {} frames (expected 3)",
                         frames.size());
          continue;
        }
        const std::uint64_t start = from_big_endian(frames[2]);
        std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> due;
        {
          detail::LockGuard lock(buffer_mu);
          for (const auto& entry : buffer) {
            if (entry.first >= start) due.push_back(entry);
          }
        }
        const std::string identity = frames[0].to_string();
        for (const auto& [seq, payload] : due) {
          const auto seq_bytes = big_endian(seq);
          replay->send(zmq::buffer(identity), zmq::send_flags::sndmore);
          replay->send(zmq::message_t(), zmq::send_flags::sndmore);
          replay->send(zmq::buffer(options.topic), zmq::send_flags::sndmore);
          replay->send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
          replay->send(zmq::buffer(payload), zmq::send_flags::none);
        }
        const auto end = big_endian(~std::uint64_t{0});
        replay->send(zmq::buffer(identity), zmq::send_flags::sndmore);
        replay->send(zmq::message_t(), zmq::send_flags::sndmore);
        replay->send(zmq::message_t(), zmq::send_flags::sndmore);  // no topic on the end marker
        replay->send(zmq::buffer(end), zmq::send_flags::sndmore);
        replay->send(zmq::message_t(), zmq::send_flags::none);
      } catch (const std::exception& e) {
        logger()->warn("KV events: replay request failed: {}", e.what());
      }
    }
  }

  const ZmqEventSinkOptions options;
  zmq::context_t context = make_zmq_context();
  zmq::socket_t pub;
  std::optional<zmq::socket_t> replay;
  std::optional<zmq::socket_t> wake_recv;  // the replay thread's
  std::optional<zmq::socket_t> wake_send;  // the destructor's
  // Read once at construction: a socket must not be queried while another
  // thread sends on it.
  std::string bound_endpoint;
  std::string bound_replay_endpoint;
  std::atomic<bool> stop{false};
  detail::Mutex buffer_mu;
  std::deque<std::pair<std::uint64_t, std::vector<std::uint8_t>>> buffer KVBM_GUARDED_BY(buffer_mu);
  std::unique_ptr<detail::Worker> replay_worker;  // last: started once everything above exists
};

ZmqEventSink::ZmqEventSink(ZmqEventSinkOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

ZmqEventSink::~ZmqEventSink() = default;

std::string ZmqEventSink::endpoint() const { return impl_->pub.get(zmq::sockopt::last_endpoint); }

std::string ZmqEventSink::replay_endpoint() const { return impl_->bound_replay_endpoint; }

void ZmqEventSink::publish(std::uint64_t sequence, const KvEventBatch& /*batch*/,
                           std::span<const std::uint8_t> payload) {
  impl_->publish(sequence, payload);
}

}  // namespace kvbm::events

#else  // !KVBM_HAVE_ZMQ

namespace kvbm::events {

struct ZmqEventSink::Impl {};

ZmqEventSink::ZmqEventSink(ZmqEventSinkOptions /*options*/) {
  KVBM_CHECK(false,
             "ZmqEventSink: this kvbm was built without ZeroMQ (KVBM_HAVE_ZMQ is 0); "
             "install libzmq3-dev and cppzmq-dev and configure with "
             "-DKVBM_ENABLE_EVENTS_ZMQ=ON, or use a CallbackEventSink");
}

ZmqEventSink::~ZmqEventSink() = default;

std::string ZmqEventSink::endpoint() const { return {}; }

std::string ZmqEventSink::replay_endpoint() const { return {}; }

void ZmqEventSink::publish(std::uint64_t /*sequence*/, const KvEventBatch& /*batch*/,
                           std::span<const std::uint8_t> /*payload*/) {}

}  // namespace kvbm::events

#endif  // KVBM_HAVE_ZMQ
