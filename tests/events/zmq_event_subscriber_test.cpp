// tests/events/zmq_event_subscriber_test.cpp: ZmqEventSubscriber
// (kvbm/events/zmq_event_subscriber.h) against real publishers.
//
// Every publisher is a KvEventPublisher on a ZmqEventSink bound to an
// ephemeral loopback port, flushed by hand; the subscriber connects real SUB
// and DEALER sockets. Nothing sleeps to wait for work: a test publishes
// probe batches until one arrives (the slow-joiner race), then waits on the
// callbacks themselves. Skipped when kvbm was built without ZeroMQ.

#include "kvbm/events/zmq_event_subscriber.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/events/kv_events.h"
#include "test_util.h"

#if KVBM_HAVE_ZMQ
#include <zmq.hpp>
#endif

#include "skip_or_fail.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::events {
namespace zmq_event_subscriber_test {

using std::chrono::milliseconds;

#if KVBM_HAVE_ZMQ

constexpr auto kPatience = std::chrono::seconds(10);

/// What the callbacks saw, with a wait on any condition of it.
class Collector {
 public:
  struct Batch {
    std::size_t source;
    std::uint64_t sequence;
    KvEventBatch batch;
    bool replayed;
  };
  using Incomplete = std::tuple<std::size_t, std::uint64_t, std::optional<std::uint64_t>>;

  ZmqEventSubscriber::Callbacks callbacks() {
    ZmqEventSubscriber::Callbacks c;
    c.on_batch = [this](std::size_t s, std::uint64_t q, const KvEventBatch& b, bool r) {
      add([&] { batches_.push_back({s, q, b, r}); });
    };
    c.on_decode_error = [this](std::size_t s, std::uint64_t q, const std::string& e) {
      add([&] { errors_.emplace_back(s, q, e); });
    };
    c.on_replay_incomplete = [this](std::size_t s, std::uint64_t w,
                                    std::optional<std::uint64_t> f) {
      add([&] { incompletes_.emplace_back(s, w, f); });
    };
    return c;
  }

  /// Waits (at most `timeout`) until `pred` holds of what was seen; `pred`
  /// runs under the collector's lock and reads its public members.
  bool wait(const std::function<bool(const Collector&)>& pred,
            std::chrono::milliseconds timeout = kPatience) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(*this); });
  }

  /// The batches of `source` among `all`, in delivery order.
  static std::vector<Batch> of(const std::vector<Batch>& all, std::size_t source) {
    std::vector<Batch> out;
    for (const auto& b : all) {
      if (b.source == source) out.push_back(b);
    }
    return out;
  }
  std::vector<Batch> of(std::size_t source) { return of(batches(), source); }
  std::vector<Batch> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }
  std::vector<Incomplete> incompletes() {
    std::lock_guard lock(mu_);
    return incompletes_;
  }

  std::vector<Batch> batches_;
  std::vector<std::tuple<std::size_t, std::uint64_t, std::string>> errors_;
  std::vector<Incomplete> incompletes_;

 private:
  template <class F>
  void add(F&& f) {
    {
      std::lock_guard lock(mu_);
      f();
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
};

/// A publisher on a loopback PUB socket (and replay socket), flushed by hand.
struct Publisher {
  explicit Publisher(bool replay = true, std::size_t keep = 10'000,
                     std::string endpoint = "tcp://127.0.0.1:*") {
    ZmqEventSinkOptions so;
    so.endpoint = std::move(endpoint);
    so.topic = "kv-events";
    if (replay) so.replay_endpoint = "tcp://127.0.0.1:*";
    so.replay_buffer_batches = keep;
    so.linger = milliseconds(0);
    sink = std::make_shared<ZmqEventSink>(so);
    KvEventPublisherOptions o;
    o.background_flush = false;
    pub = std::make_unique<KvEventPublisher>(sink, o);
  }
  EventSource source(const std::string& name) const {
    return {name, sink->endpoint(), "kv-events", sink->replay_endpoint()};
  }
  /// Publishes one batch holding BlockRemoved{hash, std::nullopt, std::nullopt}; returns its
  /// sequence.
  std::uint64_t send(std::uint64_t hash) {
    pub->record(BlockRemoved{{hash}, kMediumGpu, std::nullopt});
    EXPECT_EQ(pub->flush(), 1U);
    return pub->stats().batches_published - 1;
  }

  std::shared_ptr<ZmqEventSink> sink;
  std::unique_ptr<KvEventPublisher> pub;
};

std::uint64_t hash_of(const KvEventBatch& b) {
  return std::get<BlockRemoved>(b.events.at(0)).block_hashes.at(0);
}

constexpr std::uint64_t kProbe = 0xfeed;

/// Defeats the slow-joiner race: publishes probe batches until one reaches
/// the subscriber; returns the sequence of the one that did.
std::uint64_t join(Publisher& p, ZmqEventSubscriber& sub, std::size_t source) {
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t seq = p.send(kProbe);
    if (sub.wait_until(source, seq, milliseconds(10))) return seq;
  }
  ADD_FAILURE() << "no probe reached the subscriber";
  return 0;
}

TEST(ZmqEventSubscriber, SeveralSourcesAtOnce) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  std::vector<std::unique_ptr<Publisher>> pubs;
  std::vector<std::size_t> ids;
  std::vector<std::uint64_t> joined;
  for (int i = 0; i < 3; ++i) {
    pubs.push_back(std::make_unique<Publisher>(false));
    ids.push_back(sub.add_source(pubs.back()->source("engine-" + std::to_string(i))));
  }
  EXPECT_EQ(ids, (std::vector<std::size_t>{0, 1, 2}));
  for (int i = 0; i < 3; ++i) joined.push_back(join(*pubs[i], sub, ids[i]));
  // Interleaved: each source's batches arrive in its own order, with its own sequences.
  std::vector<std::vector<std::uint64_t>> sent(3);
  for (std::uint64_t k = 1; k <= 5; ++k) {
    for (int i = 0; i < 3; ++i) sent[i].push_back(pubs[i]->send(100 * (i + 1) + k));
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sub.wait_until(ids[i], sent[i].back(), kPatience));
  const auto all = got.batches();
  for (int i = 0; i < 3; ++i) {
    std::vector<std::uint64_t> seqs, hashes;
    for (const auto& b : all) {
      if (b.source != ids[i] || b.sequence <= joined[i]) continue;
      EXPECT_FALSE(b.replayed);
      seqs.push_back(b.sequence);
      hashes.push_back(hash_of(b.batch));
    }
    EXPECT_EQ(seqs, sent[i]) << "source " << i;
    EXPECT_EQ(hashes, (std::vector<std::uint64_t>{100ULL * (i + 1) + 1, 100ULL * (i + 1) + 2,
                                                  100ULL * (i + 1) + 3, 100ULL * (i + 1) + 4,
                                                  100ULL * (i + 1) + 5}));
  }
  const auto st = sub.stats();
  EXPECT_EQ(st.batches, all.size());
  EXPECT_EQ(st.decode_errors, 0U);
}

TEST(ZmqEventSubscriber, SlowJoinerGapIsFilledByReplayInOrder) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  Publisher p;
  for (std::uint64_t h = 1; h <= 5; ++h) p.send(h);  // 0..4, before anyone subscribed: lost
  const std::size_t a = sub.add_source(p.source("engine-a"));
  const std::uint64_t first = join(p, sub, a);
  ASSERT_GE(first, 5U);
  {
    const auto live = got.batches();
    ASSERT_FALSE(live.empty());
    EXPECT_GT(live.front().sequence, 0U);  // the caller sees the gap ...
  }
  sub.request_replay(a, 0);               // ... and fills it
  const std::uint64_t after = p.send(6);  // live, possibly held while the replay runs
  ASSERT_TRUE(got.wait([&](const Collector& c) {
    const auto mine = Collector::of(c.batches_, a);
    return std::any_of(mine.begin(), mine.end(),
                       [&](const auto& b) { return b.sequence == after; }) &&
           std::count_if(mine.begin(), mine.end(), [](const auto& b) { return b.replayed; }) >=
               static_cast<std::ptrdiff_t>(first + 1);
  }));
  const auto mine = got.batches();
  std::vector<std::uint64_t> replayed;
  for (const auto& b : mine) {
    if (b.replayed) replayed.push_back(b.sequence);
  }
  // Everything the publisher kept from 0, in order, then the live batch once.
  ASSERT_GE(replayed.size(), first + 1);
  for (std::uint64_t i = 0; i <= first; ++i) EXPECT_EQ(replayed[i], i);
  std::vector<std::uint64_t> replayed_hashes;
  for (const auto& b : mine) {
    if (b.replayed && b.sequence < 5) replayed_hashes.push_back(hash_of(b.batch));
  }
  EXPECT_EQ(replayed_hashes, (std::vector<std::uint64_t>{1, 2, 3, 4, 5}));
  // The live batch: delivered before the replay started (and replayed again:
  // the caller asked for everything from 0), or held while it ran and then
  // delivered only if the replay did not bring it. Never twice live.
  EXPECT_LE(std::count_if(mine.begin(), mine.end(),
                          [&](const auto& b) { return b.sequence == after && !b.replayed; }),
            1);
  for (std::size_t i = 1; i < replayed.size(); ++i) EXPECT_EQ(replayed[i], replayed[i - 1] + 1);
  EXPECT_TRUE(got.incompletes().empty());
  // The end marker may come after the last replayed batch was delivered.
  EXPECT_TRUE(test::eventually([&] { return sub.stats().replays_answered == 1; }));
  const auto st = sub.stats();
  EXPECT_EQ(st.replays_requested, 1U);
  EXPECT_EQ(st.replays_incomplete, 0U);
}

TEST(ZmqEventSubscriber, ReplayOfForgottenBatchesIsIncomplete) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  Publisher p(true, 3);  // keeps the last three batches
  const std::size_t a = sub.add_source(p.source("engine-a"));
  const std::uint64_t joined = join(p, sub, a);
  for (std::uint64_t h = 1; h <= 4; ++h) p.send(h);
  const std::uint64_t last = joined + 4;
  ASSERT_TRUE(sub.wait_until(a, last, kPatience));
  sub.request_replay(a, 0);
  ASSERT_TRUE(got.wait([](const Collector& c) { return !c.incompletes_.empty(); }));
  const auto inc = got.incompletes();
  ASSERT_EQ(inc.size(), 1U);
  EXPECT_EQ(inc[0], (Collector::Incomplete{a, 0, last - 2}));  // the first of the three kept
  std::vector<std::uint64_t> replayed;
  for (const auto& b : got.batches()) {
    if (b.replayed) replayed.push_back(b.sequence);
  }
  EXPECT_EQ(replayed, (std::vector<std::uint64_t>{last - 2, last - 1, last}));

  // A source without a replay socket: incomplete at once, nothing kept.
  Publisher q(false);
  const std::size_t b = sub.add_source(q.source("engine-b"));
  sub.request_replay(b, 7);
  ASSERT_TRUE(got.wait([](const Collector& c) { return c.incompletes_.size() == 2; }));
  EXPECT_EQ(got.incompletes()[1], (Collector::Incomplete{b, 7, std::nullopt}));
  EXPECT_EQ(sub.stats().replays_incomplete, 2U);
}

TEST(ZmqEventSubscriber, ReplayWithNothingNewerIsComplete) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  Publisher p;
  const std::size_t a = sub.add_source(p.source("engine-a"));
  const std::uint64_t joined = join(p, sub, a);
  sub.request_replay(a, joined + 1);  // nothing missed: the answer is the end marker alone
  // The answer is awaited before the next batch is sent: a live batch that overtakes an empty
  // answer is still judged a gap: end_replay does not count the live batches held as covering
  // `from` (a known limitation: the feed then resyncs, safely but needlessly).
  ASSERT_TRUE(test::eventually([&] { return sub.stats().replays_answered == 1; }));
  const std::uint64_t next = p.send(9);
  ASSERT_TRUE(sub.wait_until(a, next, kPatience));
  EXPECT_TRUE(got.incompletes().empty());
}

TEST(ZmqEventSubscriber, ARestartedPublisherIsDeliveredAsSuch) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  auto old_pub = std::make_unique<Publisher>(false);
  // The port "*" resolved to; "*" again so that the new sink binds it (vLLM's
  // rule binds only a wildcard address).
  std::string endpoint = old_pub->sink->endpoint();
  endpoint = "tcp://*" + endpoint.substr(endpoint.rfind(':'));
  const std::size_t a = sub.add_source(old_pub->source("engine-a"));
  join(*old_pub, sub, a);
  std::uint64_t old_last = 0;
  for (int i = 0; i < 1000; ++i) old_last = old_pub->send(1);
  ASSERT_TRUE(sub.wait_until(a, old_last, kPatience));
  old_pub.reset();  // the engine dies ...

  Publisher fresh(false, 10'000, endpoint);  // ... and comes back on the same address
  constexpr std::uint64_t kNew = 0xbeef;
  std::optional<std::uint64_t> seen_seq;
  for (int i = 0; i < 900 && !seen_seq; ++i) {
    fresh.send(kNew);
    got.wait(
        [&](const Collector& c) {
          for (const auto& b : c.batches_) {
            if (hash_of(b.batch) == kNew) seen_seq = b.sequence;
          }
          return seen_seq.has_value();
        },
        milliseconds(10));
  }
  ASSERT_TRUE(seen_seq.has_value()) << "the restarted publisher never reached the subscriber";
  // Its own sequence numbers, from 0 again: lower than the old publisher's last.
  EXPECT_LT(*seen_seq, old_last);
  const auto all = got.batches();
  const auto it =
      std::find_if(all.begin(), all.end(), [](const auto& b) { return hash_of(b.batch) == kNew; });
  ASSERT_NE(it, all.begin());
  EXPECT_EQ(std::prev(it)->sequence, old_last);  // the caller sees the drop
  EXPECT_FALSE(it->replayed);
}

TEST(ZmqEventSubscriber, RemoveSourceStopsDelivery) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  Publisher p(false), q(false);
  const std::size_t a = sub.add_source(p.source("engine-a"));
  const std::size_t b = sub.add_source(q.source("engine-b"));
  join(p, sub, a);
  join(q, sub, b);
  sub.remove_source(a);  // returns once no callback of `a` will run
  const std::size_t before = got.of(a).size();
  for (int i = 0; i < 20; ++i) p.send(2);
  const std::uint64_t marker = q.send(3);
  ASSERT_TRUE(sub.wait_until(b, marker, kPatience));
  EXPECT_EQ(got.of(a).size(), before);
  EXPECT_FALSE(sub.wait_until(a, 0, milliseconds(0)));  // removed
  sub.remove_source(a);                                 // twice: ignored
  sub.remove_source(99);                                // unknown: ignored
  EXPECT_FALSE(sub.wait_until(99, 0, milliseconds(0)));
}

TEST(ZmqEventSubscriber, CallbacksMayRemoveTheirSource) {
  Collector got;
  std::unique_ptr<ZmqEventSubscriber> sub;
  ZmqEventSubscriber::Callbacks c = got.callbacks();
  auto record = c.on_batch;
  c.on_batch = [&](std::size_t s, std::uint64_t q, const KvEventBatch& b, bool r) {
    record(s, q, b, r);
    sub->remove_source(s);  // from its own callback: at once, no deadlock
  };
  sub = std::make_unique<ZmqEventSubscriber>(c);
  Publisher p(false);
  const std::size_t a = sub->add_source(p.source("engine-a"));
  for (int i = 0; i < 1000; ++i) {
    p.send(kProbe);
    if (got.wait([](const Collector& x) { return !x.batches_.empty(); }, milliseconds(10))) break;
  }
  // Forgotten by then (wait_until answers false for a removed source at once).
  EXPECT_FALSE(sub->wait_until(a, ~std::uint64_t{0}, kPatience));
  for (int i = 0; i < 5; ++i) p.send(kProbe);
  // Another source still delivers; `a` never again.
  Publisher q(false);
  const std::size_t b = sub->add_source(q.source("engine-b"));
  for (int i = 0; i < 1000; ++i) {
    q.send(kProbe);
    if (got.wait([&](const Collector& x) { return !Collector::of(x.batches_, b).empty(); },
                 milliseconds(10))) {
      break;
    }
  }
  EXPECT_EQ(got.of(a).size(), 1U);  // removed by its first callback
  EXPECT_EQ(got.of(b).size(), 1U);
}

TEST(ZmqEventSubscriber, DecodeErrorsAreReportedAndCounted) {
  Collector got;
  ZmqEventSubscriber sub(got.callbacks());
  zmq::context_t ctx;
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::size_t a = sub.add_source({"raw", pub.get(zmq::sockopt::last_endpoint), "", ""});
  const std::array<std::uint8_t, 8> seq{0, 0, 0, 0, 0, 0, 0, 7};
  const std::array<std::uint8_t, 1> junk{0xc1};
  for (int i = 0; i < 1000; ++i) {
    pub.send(zmq::str_buffer("kv-events"), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(junk), zmq::send_flags::none);
    if (got.wait([](const Collector& c) { return !c.errors_.empty(); }, milliseconds(10))) break;
  }
  ASSERT_TRUE(got.wait([](const Collector& c) { return !c.errors_.empty(); }));
  pub.send(zmq::str_buffer("kv-events"), zmq::send_flags::none);  // one frame: not a batch
  ASSERT_TRUE(got.wait([](const Collector& c) {
    return std::any_of(c.errors_.begin(), c.errors_.end(),
                       [](const auto& e) { return std::get<1>(e) == ~std::uint64_t{0}; });
  }));
  const auto& first = got.errors_.front();
  EXPECT_EQ(std::get<0>(first), a);
  EXPECT_EQ(std::get<1>(first), 7U);
  EXPECT_NE(std::get<2>(first).find("not valid msgpack"), std::string::npos) << std::get<2>(first);
  EXPECT_TRUE(got.batches().empty());
  EXPECT_GE(sub.stats().decode_errors, 2U);
}

TEST(ZmqEventSubscriber, DestructionWithSourcesConnectedAndReplaysUnderWay) {
  Collector got;
  Publisher p, q;
  {
    ZmqEventSubscriber sub(got.callbacks());
    const std::size_t a = sub.add_source(p.source("engine-a"));
    sub.add_source(q.source("engine-b"));
    join(p, sub, a);
    sub.request_replay(a, 0);
    sub.request_replay(a, 1);
  }           // stops the thread, closes every socket
  p.send(1);  // the publishers live on
  SUCCEED();
}

TEST(ZmqEventSubscriber, RejectsMisuse) {
  EXPECT_THROW(ZmqEventSubscriber(ZmqEventSubscriber::Callbacks{}), UsageError);
  Collector got;
  ZmqEventSubscriberOptions o;
  o.replay_timeout = milliseconds(0);
  EXPECT_THROW(ZmqEventSubscriber(got.callbacks(), o), UsageError);
  ZmqEventSubscriber sub(got.callbacks());
  EXPECT_THROW((void)sub.add_source({"x", "", "", ""}), UsageError);
  EXPECT_THROW((void)sub.add_source({"x", "bogus://nowhere", "", ""}), UsageError);
  sub.request_replay(42, 0);  // unknown: ignored
}

#else

TEST(ZmqEventSubscriber, NotBuilt) {
  EXPECT_THROW(ZmqEventSubscriber({[](std::size_t, std::uint64_t, const KvEventBatch&, bool) {}}),
               UsageError);
  KVBM_SKIP_OR_FAIL(
      "kvbm built without ZeroMQ: install libzmq3-dev and cppzmq-dev (bash scripts/deps.sh)");
}

#endif  // KVBM_HAVE_ZMQ

}  // namespace zmq_event_subscriber_test
}  // namespace kvbm::events
