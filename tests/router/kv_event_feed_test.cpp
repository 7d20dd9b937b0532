// tests/router/kv_event_feed_test.cpp: KvEventFeed (kvbm/router/kv_event_feed.h)
// keeps a KvIndexer right over real ZeroMQ sockets when the network is not:
// a router that starts late, a lost batch (replayed; stale until it comes),
// a loss that cannot be replayed and a batch that does not decode (resynced),
// a publisher that restarts, and one that vanishes (silent, then stale, and
// the router says so in its counters).
//
// Publishers are either kvbm's own (KvEventPublisher on a ZmqEventSink) or a
// hand-written one speaking vLLM's wire protocol (a PUB and a replay ROUTER,
// below), which lets a test lose a batch on the wire but keep it for replay,
// forget one, or send bytes that are not a batch. Skipped without ZeroMQ.

#include "kvbm/router/kv_event_feed.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/events/kv_events.h"
#include "kvbm/groups/group_key.h"
#include "kvbm/router/kv_router.h"
#include "router_test_util.h"
#include "skip_or_fail.h"
#include "test_util.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

#if KVBM_HAVE_ZMQ
#include <zmq.hpp>
#include <zmq_addon.hpp>
#endif

namespace kvbm::router {
namespace kv_event_feed_test {

using namespace std::chrono_literals;
using test::batch;
using test::removed;
using test::stored;

constexpr auto kPatience = std::chrono::seconds(10);
constexpr TierId kG1 = TierId::kG1;

#if KVBM_HAVE_ZMQ

// Returns true once `pred` holds, false after kPatience: for states nothing
// signals (a counter of the hand publisher, an instance's staleness).
bool eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Calls `publish_and_check` every 5 ms until it returns true; false after
// kPatience. The pause is the point: a new PUB socket drops what it sends
// until the subscriber's subscription reaches it (ZeroMQ's slow joiner), and
// nothing tells when that happens, so a test publishes again, at a pace.
bool publish_until(const std::function<bool()>& publish_and_check) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!publish_and_check()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::vector<std::uint8_t> encode(const events::KvEventBatch& b) {
  return events::encode_kv_event_batch(b, events::WireLayout::kMap);
}

zmq::message_t be64(std::int64_t v) {
  std::uint8_t b[8];
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (56 - 8 * i));
  return zmq::message_t(b, 8);
}

// A publisher written from vLLM's protocol: [topic, seq, payload] on a PUB;
// a ROUTER answering [id, "", start] with [id, "", topic, seq, payload] per
// kept batch from start on, then [id, "", "", -1, ""].
class HandPublisher {
 public:
  HandPublisher() : pub_(ctx_, zmq::socket_type::pub), router_(ctx_, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    router_.bind("tcp://127.0.0.1:*");
    source_.name = "hand";
    source_.endpoint = pub_.get(zmq::sockopt::last_endpoint);
    source_.replay_endpoint = router_.get(zmq::sockopt::last_endpoint);
    source_.topic = "kv-events";
    server_ = std::thread([this] { serve(); });
  }
  ~HandPublisher() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      hold_ = false;
    }
    cv_.notify_all();
    server_.join();
  }
  HandPublisher(const HandPublisher&) = delete;
  HandPublisher& operator=(const HandPublisher&) = delete;

  [[nodiscard]] const events::EventSource& source() const { return source_; }

  /// Sends batch `seq` on the PUB (unless !live) and keeps it for replay (unless !keep).
  void publish(std::uint64_t seq, std::vector<std::uint8_t> payload, bool live = true,
               bool keep = true) {
    if (live) {
      pub_.send(zmq::buffer(source_.topic), zmq::send_flags::sndmore);
      pub_.send(be64(static_cast<std::int64_t>(seq)), zmq::send_flags::sndmore);
      pub_.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    if (keep) {
      std::lock_guard lock(mu_);
      kept_[seq] = std::move(payload);
    }
  }
  /// While held, replay requests wait unanswered.
  void hold_replays(bool hold) {
    {
      std::lock_guard lock(mu_);
      hold_ = hold;
    }
    cv_.notify_all();
  }
  [[nodiscard]] int replay_requests() const { return requests_.load(); }
  [[nodiscard]] int replays_answered() const { return answered_.load(); }

 private:
  void serve() {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
      }
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 10ms);
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(router_, std::back_inserter(frames));
      if (frames.size() != 3 || frames[2].size() != 8) continue;
      ++requests_;
      std::uint64_t start = 0;
      for (std::size_t i = 0; i < 8; ++i) start = (start << 8) | frames[2].data<std::uint8_t>()[i];
      std::map<std::uint64_t, std::vector<std::uint8_t>> kept;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !hold_ || stop_; });
        if (stop_) return;
        kept = kept_;
      }
      for (auto it = kept.lower_bound(start); it != kept.end(); ++it) {
        router_.send(zmq::buffer(frames[0].to_string()), zmq::send_flags::sndmore);
        router_.send(zmq::message_t(), zmq::send_flags::sndmore);
        router_.send(zmq::buffer(source_.topic), zmq::send_flags::sndmore);
        router_.send(be64(static_cast<std::int64_t>(it->first)), zmq::send_flags::sndmore);
        router_.send(zmq::buffer(it->second), zmq::send_flags::none);
      }
      router_.send(zmq::buffer(frames[0].to_string()), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::sndmore);
      router_.send(be64(-1), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::none);
      ++answered_;
    }
  }

  zmq::context_t ctx_;
  zmq::socket_t pub_;
  zmq::socket_t router_;  // used by the server thread only, after construction
  events::EventSource source_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool hold_ = false;
  std::map<std::uint64_t, std::vector<std::uint8_t>> kept_;
  std::atomic<int> requests_{0};
  std::atomic<int> answered_{0};
  std::thread server_;
};

// kvbm's own publisher on a ZmqEventSink bound to an ephemeral loopback port.
struct KvbmPublisher {
  explicit KvbmPublisher(events::KvEventPublisherOptions po = manual(),
                         std::string endpoint = "tcp://127.0.0.1:*",
                         std::string replay_endpoint = "tcp://127.0.0.1:*") {
    events::ZmqEventSinkOptions zo;
    zo.endpoint = std::move(endpoint);
    zo.replay_endpoint = std::move(replay_endpoint);
    zo.topic = "kv-events";
    zo.linger = 0ms;
    sink = std::make_shared<events::ZmqEventSink>(zo);
    publisher = std::make_unique<events::KvEventPublisher>(sink, std::move(po));
  }
  static events::KvEventPublisherOptions manual() {
    events::KvEventPublisherOptions po;
    po.background_flush = false;
    return po;
  }
  [[nodiscard]] events::EventSource source() const {
    return {"kvbm", sink->endpoint(), "kv-events", sink->replay_endpoint()};
  }
  /// Publishes one batch of `event`; returns its sequence number.
  std::uint64_t publish(events::KvEvent event) {
    publisher->record(std::move(event));
    publisher->flush();
    return sent++;
  }
  std::shared_ptr<events::ZmqEventSink> sink;
  std::unique_ptr<events::KvEventPublisher> publisher;
  std::uint64_t sent = 0;
};

TEST(KvEventFeed, ASourceTheSubscriberRefusesLeavesNoInstanceBehind) {
  KvIndexer index;
  KvEventFeed feed(index);
  EXPECT_THROW((void)feed.add_instance("a", {"a", "not an endpoint", "", ""}), UsageError);
  EXPECT_TRUE(index.instances().empty());
  EXPECT_FALSE(index.find_instance("a").has_value());
  KvbmPublisher pub;  // the name is free again
  const InstanceId a = feed.add_instance("a", pub.source());
  EXPECT_EQ(index.instances(), std::vector<InstanceId>{a});
}

TEST(KvEventFeed, ARouterThatStartsLateGetsWhatThePublisherKept) {
  KvbmPublisher pub;
  for (std::uint64_t h = 1; h <= 5; ++h) pub.publish(stored({h}));  // nobody listens yet
  KvIndexer index;
  KvEventFeed feed(index);
  const InstanceId a = feed.add_instance("a", pub.source());
  ASSERT_TRUE(feed.wait_applied(a, 4, kPatience));
  for (std::uint64_t h = 1; h <= 5; ++h) EXPECT_TRUE(index.holds(a, h, kG1)) << h;
  pub.publish(removed({2}));
  ASSERT_TRUE(feed.wait_applied(a, 5, kPatience));
  EXPECT_FALSE(index.holds(a, 2, kG1));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_EQ(index.state(a).next_sequence, 6U);
  EXPECT_GE(feed.stats().replays_requested, 1U);
  EXPECT_EQ(index.stats().restarts, 0U);  // batch 0 replayed again is no restart
}

TEST(KvEventFeed, AHybridModelsGroupPoolsFeedTheGroupIndex) {
  // Two instances of a full + sliding-window (W = 64, 4 blocks) model, each
  // with a real pool per group publishing through its group's listener on a
  // real ZeroMQ socket. a holds the full prefix and the window's blocks 0..3,
  // b the full prefix and the window's tail 4..7: only b serves all 8 blocks.
  const auto full = KvCacheGroupSpec::full(GroupId{0}, 16, 4096, {0});
  const auto swa = KvCacheGroupSpec::sliding_window(GroupId{1}, 64, 16, 4096, {1});
  const std::vector<KvCacheGroupSpec> groups{full, swa};
  const auto chain = kvbm::test::chain(8);
  struct Instance {
    KvbmPublisher pub;
    std::vector<BlockManager<G1>> pools;
    std::vector<ImmutableBlock<G1>> held;  // released first: declared last
  };
  auto make = [&](std::ptrdiff_t swa_first) {
    auto in = std::make_unique<Instance>();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      in->pools.push_back(BlockManager<G1>::builder()
                              .block_count(8)
                              .block_size(16)
                              .pool_name(groups[g].namespace_for("G1"))
                              .listener(in->pub.publisher->listener(events::kMediumGpu, groups[g]))
                              .build());
      auto keys = group_hashes(chain, 16, groups[g]);
      if (g == 1) keys = {keys.begin() + swa_first, keys.begin() + swa_first + 4};
      for (auto& blk : kvbm::test::make_registered(in->pools.back(), keys)) {
        in->held.push_back(std::move(blk));
      }
    }
    EXPECT_EQ(in->pub.publisher->flush(), 1U);
    return in;
  };
  auto inst_a = make(0);
  auto inst_b = make(4);
  KvIndexerOptions o;
  o.groups = groups;
  KvIndexer index(o);
  KvEventFeed feed(index);
  const InstanceId a = feed.add_instance("a", inst_a->pub.source());
  const InstanceId b = feed.add_instance("b", inst_b->pub.source());
  ASSERT_TRUE(feed.wait_applied(a, 0, kPatience));
  ASSERT_TRUE(feed.wait_applied(b, 0, kPatience));
  std::vector<std::uint64_t> hashes;
  for (const auto& h : chain) hashes.push_back(h.value());
  const OverlapScores s = index.overlaps(hashes);
  ASSERT_EQ(s.instances.size(), 2U);
  EXPECT_EQ(s.instances[0].prefix_blocks, 4U);
  EXPECT_EQ(s.instances[1].prefix_blocks, 8U);
  EXPECT_EQ(index.stats().group_mismatch_events, 0U);
  EXPECT_EQ(index.stats().blocks_stored, 24U);
  KvRouterOptions ro;
  ro.block_size = 16;
  ro.load_weight = 0;
  KvRouter router(index, ro);
  EXPECT_EQ(router.route(hashes, 128).instance, b);
  for (auto* in : {inst_a.get(), inst_b.get()}) {
    in->held.clear();
    for (auto& pool : in->pools) kvbm::test::expect_balanced(pool);
  }
}

TEST(KvEventFeed, ALostBatchIsReplayedAndTheInstanceIsStaleUntilItArrives) {
  HandPublisher pub;
  KvIndexer index;
  KvRouterOptions ro;
  ro.block_size = 16;
  KvRouter router(index, ro);
  KvEventFeed feed(index);
  const InstanceId a = feed.add_instance("a", pub.source());
  const InstanceId b = index.add_instance("b");  // fed in process, holds nothing
  // A subscription takes a moment to reach the PUB (ZeroMQ's slow joiner):
  // publish until a batch arrives live (with no replay asked for it), so that
  // the next ones go out live too.
  std::uint64_t seq = 0;
  for (;;) {
    const int asked = pub.replay_requests();
    pub.publish(seq, encode(batch({stored({10, 11})})));
    const bool arrived = feed.wait_applied(a, seq++, 20ms);
    if (arrived && asked >= 1 && pub.replay_requests() == asked) break;
  }
  // Every replay asked so far is answered: none is under way (the subscriber
  // holds live batches back behind one).
  ASSERT_TRUE(eventually(
      [&] { return pub.replays_answered() == static_cast<int>(feed.stats().replays_requested); }));

  pub.hold_replays(true);
  pub.publish(seq, encode(batch({stored({12}), removed({10})})),
              /*live=*/false);  // lost on the wire
  pub.publish(seq + 1, encode(batch({stored({13})})));
  ASSERT_TRUE(eventually([&] { return index.state(a).stale == StaleReason::kGap; }));
  EXPECT_TRUE(index.holds(a, 10, kG1));   // what batch 1 removed: stale, and said so
  EXPECT_FALSE(index.holds(a, 13, kG1));  // batch 2 waits behind the gap
  const std::vector<std::uint64_t> request = {10, 11};
  const RouteDecision d = router.route(request, 32);
  EXPECT_EQ(d.overlap.prefix_blocks, 0U);  // stale entries are not routed by
  EXPECT_FALSE(d.used_stale);
  router.finish(d);
  EXPECT_EQ(router.stats().decisions_while_stale, 1U);

  pub.hold_replays(false);
  ASSERT_TRUE(feed.wait_applied(a, seq + 1, kPatience));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_FALSE(index.holds(a, 10, kG1));
  EXPECT_TRUE(index.holds(a, 11, kG1) && index.holds(a, 12, kG1) && index.holds(a, 13, kG1));
  EXPECT_GE(index.stats().gaps, 1U);
  EXPECT_EQ(index.stats().resyncs, 0U);
  (void)b;
}

TEST(KvEventFeed, ALossThePublisherCannotReplayResyncsTheInstance) {
  HandPublisher pub;
  KvIndexer index;
  KvEventFeed feed(index);
  const InstanceId a = feed.add_instance("a", pub.source());
  pub.publish(0, encode(batch({stored({20, 21})})));
  ASSERT_TRUE(feed.wait_applied(a, 0, kPatience));
  pub.publish(1, encode(batch({removed({20})})), /*live=*/false, /*keep=*/false);  // gone for good
  pub.publish(2, encode(batch({stored({22})})));
  ASSERT_TRUE(feed.wait_applied(a, 2, kPatience));
  // What batch 1 did is unknown: the old entries went, what followed is there.
  EXPECT_FALSE(index.holds(a, 20, kG1));
  EXPECT_FALSE(index.holds(a, 21, kG1));
  EXPECT_TRUE(index.holds(a, 22, kG1));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_EQ(feed.stats().replays_incomplete, 1U);
  EXPECT_EQ(index.stats().resyncs, 1U);
  pub.publish(3, encode(batch({stored({23})})));
  ASSERT_TRUE(feed.wait_applied(a, 3, kPatience));
  EXPECT_TRUE(index.holds(a, 23, kG1));
}

TEST(KvEventFeed, ABatchThatDoesNotDecodeResyncsAfterIt) {
  HandPublisher pub;
  KvIndexer index;
  KvEventFeed feed(index);
  const InstanceId a = feed.add_instance("a", pub.source());
  pub.publish(0, encode(batch({stored({30})})));
  ASSERT_TRUE(feed.wait_applied(a, 0, kPatience));
  pub.publish(1, {0xc1, 0x00, 0xff});  // 0xc1 is never used in msgpack
  pub.publish(2, encode(batch({stored({32})})));
  ASSERT_TRUE(feed.wait_applied(a, 2, kPatience));
  EXPECT_FALSE(index.holds(a, 30, kG1));
  EXPECT_TRUE(index.holds(a, 32, kG1));
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);
  EXPECT_GE(feed.stats().decode_errors, 1U);
}

TEST(KvEventFeed, ARestartedPublisherReplacesWhatTheOldOneReported) {
  KvIndexer index;
  KvEventFeed feed(index);
  std::string port, replay_endpoint;
  InstanceId a = 0;
  {
    KvbmPublisher old;
    const std::string endpoint = old.sink->endpoint();
    port = endpoint.substr(endpoint.rfind(':') + 1);
    replay_endpoint = old.sink->replay_endpoint();
    a = feed.add_instance("a", old.source());
    std::uint64_t last = 0;
    for (std::uint64_t h = 100; h < 150; ++h) last = old.publish(stored({h}));
    ASSERT_TRUE(feed.wait_applied(a, last, kPatience));
    EXPECT_TRUE(index.holds(a, 100, kG1));
  }
  // The engine comes back on the same address with a new publisher (its
  // sequence starts at 0 again) and none of the old blocks. ("tcp://*:port"
  // binds; an address without a wildcard would be connected to, as vLLM does.)
  KvbmPublisher fresh(KvbmPublisher::manual(), "tcp://*:" + port, replay_endpoint);
  ASSERT_TRUE(publish_until([&] {
    fresh.publish(stored({500 + fresh.sent}));
    return index.holds(a, 500, kG1);
  }));
  EXPECT_FALSE(index.holds(a, 100, kG1));
  EXPECT_FALSE(index.holds(a, 149, kG1));
  EXPECT_EQ(feed.stats().restarts, 1U);
  ASSERT_TRUE(feed.wait_applied(a, fresh.sent - 1, kPatience));
  for (std::uint64_t s = 0; s < fresh.sent; ++s) EXPECT_TRUE(index.holds(a, 500 + s, kG1)) << s;
}

TEST(KvEventFeed, AnInstanceThatVanishesTurnsStaleAndTheRouterSaysSo) {
  // The index's silence and the publisher's flushes and heartbeats run on one
  // clock that the test moves.
  auto clock = std::make_shared<ManualClock>();
  KvIndexerOptions io;
  io.silence_timeout = 400ms;
  io.clock = clock;
  KvIndexer index(io);
  KvEventFeed feed(index);
  events::KvEventPublisherOptions po;
  po.flush_interval = 10ms;
  po.heartbeat_interval = 20ms;  // an idle engine still says it is there
  po.monotonic_clock = clock;
  auto pub = std::make_unique<KvbmPublisher>(po);
  const InstanceId a = feed.add_instance("a", pub->source());
  const InstanceId b = index.add_instance("b");
  pub->publisher->record(stored({40, 41}));
  clock->advance(10ms);  // the flush
  ASSERT_TRUE(feed.wait_applied(a, 0, kPatience));
  EXPECT_TRUE(index.holds(a, 41, kG1));
  // Idle for twice the silence timeout: each 20 ms brings one heartbeat.
  for (auto idle = 0ms; idle < 2 * io.silence_timeout; idle += po.heartbeat_interval) {
    const std::uint64_t next = index.state(a).next_sequence;
    clock->advance(po.heartbeat_interval);
    ASSERT_TRUE(feed.wait_applied(a, next, kPatience)) << "no heartbeat after " << idle.count();
  }
  EXPECT_EQ(index.state(a).stale, StaleReason::kFresh);

  KvRouter router(index, {});
  const std::vector<std::uint64_t> request = {40, 41};
  RouteDecision d = router.route(request, 32);
  EXPECT_EQ(d.instance, a);
  EXPECT_EQ(d.overlap.prefix_blocks, 2U);
  router.finish(d);

  pub.reset();  // the engine is gone
  clock->advance(io.silence_timeout);
  ASSERT_EQ(index.state(a).stale, StaleReason::kSilent);
  d = router.route(request, 32);
  EXPECT_EQ(d.overlap.prefix_blocks, 0U);
  EXPECT_FALSE(d.used_stale);
  router.finish(d);
  EXPECT_GE(router.stats().decisions_while_stale, 1U);
  EXPECT_EQ(router.stats().stale_decisions, 0U);

  feed.remove_instance(a);
  EXPECT_EQ(index.instances(), std::vector<InstanceId>{b});
  EXPECT_EQ(router.route(request, 32).instance, b);
}

#else

TEST(KvEventFeed, NeedsZeroMq) {
  KvIndexer index;
  EXPECT_THROW(KvEventFeed feed(index), UsageError);
  KVBM_SKIP_OR_FAIL(
      "kvbm built without ZeroMQ: install libzmq3-dev and cppzmq-dev (bash scripts/deps.sh)");
}

#endif

}  // namespace kv_event_feed_test
}  // namespace kvbm::router
