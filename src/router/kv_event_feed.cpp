#include "kvbm/router/kv_event_feed.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm::router {

namespace {

// What the feed knows of one instance (the next batch it expects is the
// index's: KvIndexer::state().next_sequence).
struct Subscription {
  std::size_t source = 0;
  bool replay_pending = false;  // a replay was asked for and has not ended
};

}  // namespace

struct KvEventFeed::Impl {
  KvIndexer& index;
  KvEventFeedOptions options;
  const std::shared_ptr<Clock> clock;
  mutable detail::Mutex mu;
  std::condition_variable applied;
  Clock::Subscription clock_wakes;  // a ManualClock's advance() wakes wait_applied()
  std::map<InstanceId, Subscription> by_id KVBM_GUARDED_BY(mu);
  std::map<std::size_t, InstanceId> by_source KVBM_GUARDED_BY(mu);
  KvEventFeedStats stats KVBM_GUARDED_BY(mu);
  // Last: its thread calls back into the members above, and stops first.
  std::unique_ptr<events::ZmqEventSubscriber> subscriber;

  Impl(KvIndexer& i, KvEventFeedOptions o)
      : index(i), options(std::move(o)), clock(options.clock ? options.clock : Clock::steady()) {
    KVBM_CHECK(options.retry_interval.count() > 0, "KvEventFeedOptions.retry_interval must be > 0");
    if (!options.subscriber.clock) options.subscriber.clock = clock;
    clock_wakes = clock->subscribe(mu.native(), applied);
    events::ZmqEventSubscriber::Callbacks cb;
    cb.on_batch = [this](std::size_t source, std::uint64_t seq, const events::KvEventBatch& b,
                         bool replayed) { on_batch(source, seq, b, replayed); };
    cb.on_decode_error = [this](std::size_t source, std::uint64_t seq, const std::string& error) {
      on_decode_error(source, seq, error);
    };
    cb.on_replay_incomplete = [this](std::size_t source, std::uint64_t wanted,
                                     std::optional<std::uint64_t> first_kept) {
      on_replay_incomplete(source, wanted, first_kept);
    };
    subscriber = std::make_unique<events::ZmqEventSubscriber>(std::move(cb), options.subscriber);
  }

  // The instance a source feeds, if it is still subscribed.
  std::optional<InstanceId> instance_of(std::size_t source) {
    detail::LockGuard lock(mu);
    const auto it = by_source.find(source);
    if (it == by_source.end()) return std::nullopt;
    return it->second;
  }

  void on_batch(std::size_t source, std::uint64_t seq, const events::KvEventBatch& batch,
                bool replayed) {
    const auto id = instance_of(source);
    if (!id) return;
    {
      detail::LockGuard lock(mu);
      ++stats.batches_received;
      if (!by_id.contains(*id)) return;
    }
    // A replayed batch the index already has is a duplicate, batch 0
    // included. A live one can only be below the next expected when the
    // publisher restarted: a PUB stream never goes back.
    const InstanceState st = index.state(*id);
    if (seq < st.next_sequence) {
      if (replayed) return;
      {
        detail::LockGuard lock(mu);
        ++stats.restarts;
      }
      logger()->info(
          "KvEventFeed: instance {} restarted (batch {} after {}); its entries are "
          "dropped and its new run read from batch 0",
          st.name, seq, st.next_sequence);
      index.restart(*id);
    }
    const ApplyResult r = index.apply(*id, seq, batch);
    bool ask = false;
    std::uint64_t from = 0;
    {
      detail::LockGuard lock(mu);
      auto it = by_id.find(*id);
      if (it == by_id.end()) return;
      Subscription& s = it->second;
      if (r.status == ApplyStatus::kGap && !s.replay_pending) {
        s.replay_pending = true;
        ++stats.replays_requested;
        ask = true;
        from = r.expected;
      } else if (r.status != ApplyStatus::kGap && index.state(*id).stale != StaleReason::kGap) {
        s.replay_pending = false;
      }
    }
    applied.notify_all();
    if (ask) subscriber->request_replay(source, from);
  }

  void on_decode_error(std::size_t source, std::uint64_t seq, const std::string& error) {
    const auto id = instance_of(source);
    {
      detail::LockGuard lock(mu);
      ++stats.decode_errors;
    }
    if (!id) return;
    if (seq == ~std::uint64_t{0}) {  // not even a sequence number: something is lost
      index.mark_stale(*id);
      return;
    }
    // A batch the index went past already (resynced over it) is no news.
    if (seq < index.state(*id).next_sequence) return;
    logger()->warn(
        "KvEventFeed: batch {} of instance {} does not decode ({}); its entries are "
        "dropped and rebuilt from the batches after it",
        seq, index.state(*id).name, error);
    // What that batch changed is unknown: the instance's entries cannot be trusted.
    index.resync(*id, seq + 1);
    notify_applied();
  }

  void on_replay_incomplete(std::size_t source, std::uint64_t wanted,
                            std::optional<std::uint64_t> first_kept) {
    const auto id = instance_of(source);
    if (!id) return;
    {
      detail::LockGuard lock(mu);
      ++stats.replays_incomplete;
      if (auto it = by_id.find(*id); it != by_id.end()) it->second.replay_pending = false;
    }
    // Batches [wanted, first_kept) are gone. Only those the index still
    // lacks matter: a replay asked for at subscription (from 0) of a
    // publisher that has moved on, or one overtaken by a resync, loses nothing.
    const InstanceState st = index.state(*id);
    const bool lost = first_kept ? st.next_sequence < *first_kept : st.stale == StaleReason::kGap;
    if (!lost) return;
    logger()->warn(
        "KvEventFeed: instance {} no longer keeps batch {}; its entries are dropped "
        "and rebuilt from what follows",
        st.name, std::max(wanted, st.next_sequence));
    index.resync(*id, first_kept);
    notify_applied();
  }

  // Wakes wait_applied() after the index moved. The waiters read the index
  // under `mu`; taking it here, after the index changed, means a waiter has
  // either seen the change or is waiting when the notification comes.
  void notify_applied() {
    { detail::LockGuard lock(mu); }
    applied.notify_all();
  }
};

KvEventFeed::KvEventFeed(KvIndexer& index, KvEventFeedOptions options)
    : impl_(std::make_unique<Impl>(index, std::move(options))) {}

KvEventFeed::~KvEventFeed() {
  // Stop the subscriber's thread before the members its callbacks use go.
  impl_->subscriber.reset();
}

InstanceId KvEventFeed::add_instance(std::string name, events::EventSource source) {
  Impl& m = *impl_;
  const InstanceId id = m.index.add_instance(name);
  if (source.name.empty()) source.name = std::move(name);
  // Batches that arrive before the instance is registered below are dropped;
  // the replay from 0 asked for next brings them back. A source the
  // subscriber refuses (a malformed endpoint) leaves no instance behind.
  std::size_t src = 0;
  try {
    src = m.subscriber->add_source(std::move(source));
  } catch (...) {
    m.index.remove_instance(id);
    throw;
  }
  {
    detail::LockGuard lock(m.mu);
    m.by_id[id] = Subscription{src, true};
    m.by_source[src] = id;
    ++m.stats.replays_requested;
  }
  // A router that starts late asks for everything the publisher kept.
  m.subscriber->request_replay(src, 0);
  return id;
}

void KvEventFeed::remove_instance(InstanceId id) {
  Impl& m = *impl_;
  std::optional<std::size_t> src;
  {
    detail::LockGuard lock(m.mu);
    if (auto it = m.by_id.find(id); it != m.by_id.end()) {
      src = it->second.source;
      m.by_source.erase(it->second.source);
      m.by_id.erase(it);
    }
  }
  if (src) m.subscriber->remove_source(*src);
  m.index.remove_instance(id);
  m.applied.notify_all();
}

bool KvEventFeed::wait_applied(InstanceId id, std::uint64_t sequence,
                               std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const Clock::time_point deadline = m.clock->now() + timeout;
  for (;;) {
    std::size_t source = 0;
    std::uint64_t from = 0;
    {
      detail::UniqueLock lock(m.mu);
      const Clock::time_point slice = std::min(deadline, m.clock->now() + m.options.retry_interval);
      // by_id loses the instance before the index does (remove_instance), so
      // the index knows every instance by_id still holds.
      auto next = [&]() KVBM_REQUIRES(m.mu) { return m.index.state(id).next_sequence; };
      auto done = [&]() KVBM_REQUIRES(m.mu) { return !m.by_id.contains(id) || next() > sequence; };
      while (!done() && m.clock->now() < slice)
        m.clock->wait_until(lock.native(), m.applied, slice);
      const auto it = m.by_id.find(id);
      if (it == m.by_id.end()) return false;
      from = next();
      if (from > sequence) return true;
      if (m.clock->now() >= deadline) return false;
      // Nothing revealed the loss (it was the tail of the stream): ask again.
      source = it->second.source;
      it->second.replay_pending = true;
      ++m.stats.replays_requested;
    }
    m.subscriber->request_replay(source, from);
  }
}

KvEventFeedStats KvEventFeed::stats() const {
  detail::LockGuard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kvbm::router
