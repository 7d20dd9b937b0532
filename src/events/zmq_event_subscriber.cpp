// src/events/zmq_event_subscriber.cpp: kvbm/events/zmq_event_subscriber.h.
//
// One thread (the one job of a detail::Worker) owns every source's sockets and polls them together
// with the read end of a pipe; the API's calls queue a command and write a byte to the pipe to wake
// it. add_source() creates and connects the sockets on the caller's thread (so that a bad endpoint
// throws there) and hands them over through the command queue, whose mutex is the full memory
// barrier ZeroMQ asks for when a socket changes threads.
//
// Without KVBM_HAVE_ZMQ only the stubs at the end are compiled.

#include "kvbm/events/zmq_event_subscriber.h"

#include "kvbm/config.h"
#include "kvbm/error.h"

#if KVBM_HAVE_ZMQ

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include <spdlog/spdlog.h>

#include "events/sequence_frame.h"
#include "events/zmq_context.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/events/kv_event_decoder.h"
#include "kvbm/logging.h"

namespace kvbm::events {
namespace {

using wire::big_endian;
using wire::from_big_endian;

constexpr std::uint64_t kNoSequence = ~std::uint64_t{0};  // also the replay's end marker (-1)

/// Receives the rest of a multipart message whose first frame is `first`.
std::vector<zmq::message_t> receive_rest(zmq::socket_t& s, zmq::message_t first) {
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(first));
  while (frames.back().more()) {
    frames.emplace_back();
    (void)s.recv(frames.back(), zmq::recv_flags::none);
  }
  return frames;
}

/// A batch received while a replay was under way, delivered after it.
struct Held {
  std::uint64_t sequence;
  KvEventBatch batch;
};

/// A replay under way.
struct Replay {
  std::uint64_t from = 0;
  std::optional<std::uint64_t> first_kept;
  std::uint64_t last_delivered = 0;
  Clock::time_point deadline;
};

}  // namespace

struct ZmqEventSubscriber::Impl {
  /// A source's sockets and state, owned by the thread once handed over.
  struct Source {
    Source(std::size_t i, EventSource c, zmq::socket_t s)
        : id(i), config(std::move(c)), sub(std::move(s)) {}
    std::size_t id = 0;
    EventSource config;
    zmq::socket_t sub;
    bool removed = false;  // erased (sockets closed) at the end of the loop's turn
    std::optional<zmq::socket_t> dealer;
    std::optional<std::uint64_t> max_seen;  // highest sequence received, live or replayed
    std::optional<Replay> replay;
    std::deque<std::uint64_t> pending_replays;
    std::vector<Held> held;
  };

  struct Command {
    enum class Kind { kAdd, kRemove, kReplay } kind;
    std::size_t id = 0;
    std::unique_ptr<Source> source;  // kAdd
    std::uint64_t from = 0;          // kReplay
  };

  Impl(Callbacks c, ZmqEventSubscriberOptions o)
      : callbacks(std::move(c)),
        options(std::move(o)),
        clock(options.clock ? options.clock : Clock::steady()) {
    KVBM_CHECK(callbacks.on_batch != nullptr, "ZmqEventSubscriber: on_batch is required");
    KVBM_CHECK(options.replay_timeout.count() > 0,
               "ZmqEventSubscriber: replay_timeout must be positive");
    KVBM_CHECK(options.recv_hwm >= 0, "ZmqEventSubscriber: recv_hwm must not be negative");
    int fds[2];
    if (::pipe(fds) != 0) {
      throw RuntimeError(error_kind_of_errno(errno), errno,
                         "ZmqEventSubscriber: cannot create its wake-up pipe");
    }
    wake_read = fds[0];
    wake_write = fds[1];
    ::fcntl(wake_read, F_SETFL, ::fcntl(wake_read, F_GETFL) | O_NONBLOCK);
    ::fcntl(wake_write, F_SETFL, ::fcntl(wake_write, F_GETFL) | O_NONBLOCK);
    worker = std::make_unique<detail::Worker>("kvbm-zmq-subscriber");
    (void)worker->post([this] { run(); });
  }

  ~Impl() {
    {
      detail::LockGuard lock(mu);
      stop = true;
    }
    wake();
    worker->stop();
    sources.clear();  // sockets close before the context
    ::close(wake_read);
    ::close(wake_write);
  }

  void wake() noexcept {
    const char byte = 1;
    // A full pipe already wakes the thread: the lost byte does not matter.
    [[maybe_unused]] const auto n = ::write(wake_write, &byte, 1);
  }

  /// Queues a command; returns its ticket.
  std::uint64_t submit(Command c) {
    std::uint64_t ticket = 0;
    {
      detail::LockGuard lock(mu);
      commands.push_back(std::move(c));
      ticket = ++submitted;
    }
    wake();
    return ticket;
  }

  std::size_t add(EventSource config) {
    KVBM_CHECK(!config.endpoint.empty(), "ZmqEventSubscriber::add_source: the endpoint is empty");
    auto s = std::make_unique<Source>(0, std::move(config),
                                      zmq::socket_t(context, zmq::socket_type::sub));
    s->sub.set(zmq::sockopt::linger, 0);
    s->sub.set(zmq::sockopt::rcvhwm, options.recv_hwm);
    s->sub.set(zmq::sockopt::subscribe, s->config.topic);
    try {
      s->sub.connect(s->config.endpoint);
      if (!s->config.replay_endpoint.empty()) s->dealer = connect_dealer(s->config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      KVBM_CHECK(false, "ZmqEventSubscriber::add_source: cannot connect source '", s->config.name,
                 "' (", s->config.endpoint, " / replay '", s->config.replay_endpoint,
                 "'): ", e.what());
    }
    const std::size_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    s->id = id;
    {
      detail::LockGuard lock(mu);
      max_delivered.emplace(id, std::nullopt);
    }
    submit(Command{Command::Kind::kAdd, id, std::move(s), 0});
    return id;
  }

  zmq::socket_t connect_dealer(const std::string& endpoint) {
    zmq::socket_t d(context, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    d.connect(endpoint);
    return d;
  }

  void remove(std::size_t id) {
    if (running_here == this) {  // from a callback, on run()'s thread: at once
      if (Source* s = find(id)) s->removed = true;
      forget(id);
      return;
    }
    const std::uint64_t ticket = submit(Command{Command::Kind::kRemove, id, nullptr, 0});
    detail::UniqueLock lock(mu);
    done_cv.wait(lock.native(), [&]() KVBM_REQUIRES(mu) { return processed >= ticket || stop; });
  }

  void forget(std::size_t id) {
    {
      detail::LockGuard lock(mu);
      max_delivered.erase(id);
    }
    delivered_cv.notify_all();
  }

  bool wait_until(std::size_t id, std::uint64_t sequence, std::chrono::milliseconds timeout) {
    detail::UniqueLock lock(mu);
    bool known = true;
    const bool reached = delivered_cv.wait_for(lock.native(), timeout, [&]() KVBM_REQUIRES(mu) {
      const auto it = max_delivered.find(id);
      if (it == max_delivered.end()) {
        known = false;
        return true;
      }
      return it->second.has_value() && *it->second >= sequence;
    });
    return reached && known;
  }

  // --- The thread ---------------------------------------------------------

  void run() noexcept {
    running_here = this;
    std::vector<zmq::pollitem_t> items;
    std::vector<std::pair<Source*, bool>> owners;  // per item after the pipe: source, is_dealer
    for (;;) {
      try {
        if (!take_commands()) return;
        items.clear();
        owners.clear();
        items.push_back({nullptr, wake_read, ZMQ_POLLIN, 0});
        auto now = clock->now();
        auto timeout = std::chrono::milliseconds(-1);
        for (auto& [id, s] : sources) {
          items.push_back({s->sub.handle(), 0, ZMQ_POLLIN, 0});
          owners.emplace_back(s.get(), false);
          if (s->dealer) {
            items.push_back({s->dealer->handle(), 0, ZMQ_POLLIN, 0});
            owners.emplace_back(s.get(), true);
          }
          if (s->replay) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(s->replay->deadline - now);
            const auto wait = std::max(left, std::chrono::milliseconds(0));
            timeout = timeout.count() < 0 ? wait : std::min(timeout, wait);
          }
        }
        zmq::poll(items.data(), items.size(), timeout);
        if ((items[0].revents & ZMQ_POLLIN) != 0) drain_pipe();
        for (std::size_t i = 1; i < items.size(); ++i) {
          if ((items[i].revents & ZMQ_POLLIN) == 0) continue;
          Source* s = owners[i - 1].first;
          if (s->removed) continue;
          if (owners[i - 1].second) {
            read_replay(*s);
          } else {
            read_live(*s);
          }
        }
        now = clock->now();
        for (auto& [id, s] : sources) {
          if (!s->removed && s->replay && now >= s->replay->deadline) {
            end_replay(*s, /*answered=*/false);
          }
        }
        std::erase_if(sources, [](const auto& kv) { return kv.second->removed; });
      } catch (const std::exception& e) {  // a socket error: logged, the loop goes on
        logger()->warn("KV event subscriber: {}", e.what());
      }
    }
  }

  void drain_pipe() noexcept {
    char buf[256];
    while (::read(wake_read, buf, sizeof buf) > 0) {
    }
  }

  /// Runs the queued commands; false once stopped.
  bool take_commands() {
    std::deque<Command> todo;
    std::uint64_t tickets = 0;
    {
      detail::LockGuard lock(mu);
      if (stop) return false;
      todo.swap(commands);
      tickets = submitted;
    }
    for (auto& c : todo) {
      switch (c.kind) {
        case Command::Kind::kAdd:
          sources[c.id] = std::move(c.source);
          break;
        case Command::Kind::kRemove: {
          if (Source* s = find(c.id)) s->removed = true;
          forget(c.id);
          break;
        }
        case Command::Kind::kReplay:
          start_or_queue_replay(c.id, c.from);
          break;
      }
    }
    {
      detail::LockGuard lock(mu);
      processed = tickets;
    }
    done_cv.notify_all();
    return true;
  }

  Source* find(std::size_t id) {
    const auto it = sources.find(id);
    return it == sources.end() || it->second->removed ? nullptr : it->second.get();
  }

  void start_or_queue_replay(std::size_t id, std::uint64_t from) {
    Source* s = find(id);
    if (s == nullptr) return;
    if (!s->dealer) {
      incomplete(*s, from, std::nullopt);
      return;
    }
    if (s->replay) {
      s->pending_replays.push_back(from);
      return;
    }
    const auto start = big_endian(from);
    s->dealer->send(zmq::message_t(), zmq::send_flags::sndmore);  // the REQ-style delimiter
    s->dealer->send(zmq::buffer(start), zmq::send_flags::none);
    s->replay = Replay{from, std::nullopt, 0, clock->now() + options.replay_timeout};
  }

  void read_live(Source& s) {
    for (int budget = 1024; budget > 0 && !s.removed; --budget) {
      zmq::message_t first;
      if (!s.sub.recv(first, zmq::recv_flags::dontwait)) return;
      auto frames = receive_rest(s.sub, std::move(first));
      if (frames.size() != 3 || frames[1].size() != 8) {
        decode_error(s, kNoSequence,
                     "a message of " + std::to_string(frames.size()) +
                         " frames; a batch is [topic, 8-byte sequence, payload]");
        continue;
      }
      const std::uint64_t seq = from_big_endian(frames[1]);
      auto batch = decode(s, seq, frames[2]);
      if (!batch) continue;
      note_seen(s, seq);
      if (s.replay) {
        s.held.push_back({seq, std::move(*batch)});
      } else {
        deliver(s, seq, *batch, false);
      }
    }
  }

  void read_replay(Source& s) {
    for (int budget = 1024; budget > 0 && !s.removed && s.dealer; --budget) {
      zmq::message_t first;
      if (!s.dealer->recv(first, zmq::recv_flags::dontwait)) return;
      auto frames = receive_rest(*s.dealer, std::move(first));
      if (!s.replay) continue;  // an answer to nothing we wait for
      // ["", topic, seq, payload] (vLLM since 0.26, kvbm) or ["", seq, payload] (before).
      const std::size_t n = frames.size();
      if ((n != 4 && n != 3) || frames[0].size() != 0 || frames[n - 2].size() != 8) {
        decode_error(s, kNoSequence,
                     "a replay answer of " + std::to_string(n) +
                         " frames; expected [\"\", topic, 8-byte sequence, payload]");
        continue;
      }
      s.replay->deadline = clock->now() + options.replay_timeout;
      const std::uint64_t seq = from_big_endian(frames[n - 2]);
      if (seq == kNoSequence && frames[n - 1].size() == 0) {
        end_replay(s, /*answered=*/true);
        continue;
      }
      auto batch = decode(s, seq, frames[n - 1]);
      if (!batch) continue;
      note_seen(s, seq);
      if (!s.replay->first_kept) s.replay->first_kept = seq;
      s.replay->last_delivered = seq;
      deliver(s, seq, *batch, true);
    }
  }

  void end_replay(Source& s, bool answered) {
    const Replay r = *s.replay;
    s.replay.reset();
    if (answered) {
      replays_answered.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Late answers to this request would be taken for the next one's.
      s.dealer.reset();
      try {
        s.dealer = connect_dealer(s.config.replay_endpoint);
      } catch (const zmq::error_t& e) {
        logger()->warn("KV event subscriber: source '{}': cannot reconnect its replay socket: {}",
                       s.config.name, e.what());
      }
    }
    // Incomplete: no end marker in time, or the first batch kept is later than
    // asked, or nothing kept though the source has sent `from` or later.
    const bool gap = !answered || (r.first_kept ? *r.first_kept > r.from
                                                : (s.max_seen && r.from <= *s.max_seen));
    if (gap) incomplete(s, r.from, r.first_kept);
    if (s.removed) return;
    // The live batches held meanwhile, less those the replay delivered.
    std::vector<Held> held;
    held.swap(s.held);
    for (auto& h : held) {
      if (r.first_kept && h.sequence >= *r.first_kept && h.sequence <= r.last_delivered) continue;
      deliver(s, h.sequence, h.batch, false);
      if (s.removed) return;
    }
    if (!s.pending_replays.empty()) {
      const std::uint64_t next = s.pending_replays.front();
      s.pending_replays.pop_front();
      start_or_queue_replay(s.id, next);
    }
  }

  void note_seen(Source& s, std::uint64_t seq) {
    if (!s.max_seen || seq > *s.max_seen) s.max_seen = seq;
  }

  std::optional<KvEventBatch> decode(Source& s, std::uint64_t seq, const zmq::message_t& payload) {
    KvEventDecodeStats st;
    try {
      auto batch = decode_kv_event_batch(
          {static_cast<const std::uint8_t*>(payload.data()), payload.size()}, st);
      skipped_events.fetch_add(st.skipped_events, std::memory_order_relaxed);
      return batch;
    } catch (const DecodeError& e) {
      decode_error(s, seq, e.what());
      return std::nullopt;
    }
  }

  void decode_error(Source& s, std::uint64_t seq, const std::string& what) {
    const std::uint64_t n = decode_errors.fetch_add(1, std::memory_order_relaxed) + 1;
    if ((n & (n - 1)) == 0) {  // the 1st, 2nd, 4th, ...: no flood
      logger()->warn("KV event subscriber: source '{}' sent an undecodable message ({} so far): {}",
                     s.config.name, n, what);
    }
    if (callbacks.on_decode_error) invoke([&] { callbacks.on_decode_error(s.id, seq, what); });
  }

  void incomplete(Source& s, std::uint64_t from, std::optional<std::uint64_t> first_kept) {
    replays_incomplete.fetch_add(1, std::memory_order_relaxed);
    if (callbacks.on_replay_incomplete) {
      invoke([&] { callbacks.on_replay_incomplete(s.id, from, first_kept); });
    }
  }

  void deliver(Source& s, std::uint64_t seq, const KvEventBatch& batch, bool replayed) {
    const std::size_t id = s.id;
    invoke([&] { callbacks.on_batch(id, seq, batch, replayed); });
    batches.fetch_add(1, std::memory_order_relaxed);
    if (replayed) replayed_batches.fetch_add(1, std::memory_order_relaxed);
    {
      detail::LockGuard lock(mu);
      if (auto it = max_delivered.find(id); it != max_delivered.end()) {
        if (!it->second || seq > *it->second) it->second = seq;
      }
    }
    delivered_cv.notify_all();
  }

  /// Runs a callback; what it throws is logged, never let out of the thread.
  template <class F>
  void invoke(F&& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      logger()->warn("KV event subscriber: a callback threw: {}", e.what());
    } catch (...) {
      logger()->warn("KV event subscriber: a callback threw a non-standard exception");
    }
  }

  const Callbacks callbacks;
  const ZmqEventSubscriberOptions options;
  const std::shared_ptr<Clock> clock;
  zmq::context_t context = make_zmq_context();
  int wake_read = -1;
  int wake_write = -1;
  std::atomic<std::size_t> next_id{0};

  detail::Mutex mu;
  std::condition_variable done_cv;       // commands processed
  std::condition_variable delivered_cv;  // a batch delivered, or a source removed
  std::deque<Command> commands KVBM_GUARDED_BY(mu);
  std::uint64_t submitted KVBM_GUARDED_BY(mu) = 0;
  std::uint64_t processed KVBM_GUARDED_BY(mu) = 0;
  bool stop KVBM_GUARDED_BY(mu) = false;
  std::map<std::size_t, std::optional<std::uint64_t>> max_delivered KVBM_GUARDED_BY(mu);

  // The thread's own: no lock.
  std::map<std::size_t, std::unique_ptr<Source>> sources;

  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> replayed_batches{0};
  std::atomic<std::uint64_t> decode_errors{0};
  std::atomic<std::uint64_t> skipped_events{0};
  std::atomic<std::uint64_t> replays_requested{0};
  std::atomic<std::uint64_t> replays_answered{0};
  std::atomic<std::uint64_t> replays_incomplete{0};

  // The subscriber whose run() this thread is running (null on every other thread).
  static thread_local const Impl* running_here;
  std::unique_ptr<detail::Worker> worker;  // last: started once everything above exists
};

thread_local const ZmqEventSubscriber::Impl* ZmqEventSubscriber::Impl::running_here = nullptr;

ZmqEventSubscriber::ZmqEventSubscriber(Callbacks callbacks, ZmqEventSubscriberOptions options)
    : impl_(std::make_unique<Impl>(std::move(callbacks), std::move(options))) {}

ZmqEventSubscriber::~ZmqEventSubscriber() = default;

std::size_t ZmqEventSubscriber::add_source(EventSource source) {
  return impl_->add(std::move(source));
}

void ZmqEventSubscriber::remove_source(std::size_t source) { impl_->remove(source); }

void ZmqEventSubscriber::request_replay(std::size_t source, std::uint64_t from) {
  impl_->replays_requested.fetch_add(1, std::memory_order_relaxed);
  impl_->submit(Impl::Command{Impl::Command::Kind::kReplay, source, nullptr, from});
}

bool ZmqEventSubscriber::wait_until(std::size_t source, std::uint64_t sequence,
                                    std::chrono::milliseconds timeout) {
  return impl_->wait_until(source, sequence, timeout);
}

ZmqEventSubscriberStats ZmqEventSubscriber::stats() const {
  ZmqEventSubscriberStats s;
  s.batches = impl_->batches.load(std::memory_order_relaxed);
  s.replayed_batches = impl_->replayed_batches.load(std::memory_order_relaxed);
  s.decode_errors = impl_->decode_errors.load(std::memory_order_relaxed);
  s.skipped_events = impl_->skipped_events.load(std::memory_order_relaxed);
  s.replays_requested = impl_->replays_requested.load(std::memory_order_relaxed);
  s.replays_answered = impl_->replays_answered.load(std::memory_order_relaxed);
  s.replays_incomplete = impl_->replays_incomplete.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvbm::events

#else  // !KVBM_HAVE_ZMQ

namespace kvbm::events {

struct ZmqEventSubscriber::Impl {};

ZmqEventSubscriber::ZmqEventSubscriber(Callbacks /*callbacks*/,
                                       ZmqEventSubscriberOptions /*options*/) {
  KVBM_CHECK(false,
             "ZmqEventSubscriber: this kvbm was built without ZeroMQ (KVBM_HAVE_ZMQ is 0); "
             "install libzmq3-dev and cppzmq-dev and configure with -DKVBM_ENABLE_EVENTS_ZMQ=ON");
}

ZmqEventSubscriber::~ZmqEventSubscriber() = default;

std::size_t ZmqEventSubscriber::add_source(EventSource /*source*/) { return 0; }

void ZmqEventSubscriber::remove_source(std::size_t /*source*/) {}

void ZmqEventSubscriber::request_replay(std::size_t /*source*/, std::uint64_t /*from*/) {}

bool ZmqEventSubscriber::wait_until(std::size_t /*source*/, std::uint64_t /*sequence*/,
                                    std::chrono::milliseconds /*timeout*/) {
  return false;
}

ZmqEventSubscriberStats ZmqEventSubscriber::stats() const { return {}; }

}  // namespace kvbm::events

#endif  // KVBM_HAVE_ZMQ
