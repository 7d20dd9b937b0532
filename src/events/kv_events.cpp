// src/events/kv_events.cpp: the KV event publisher (kvbm/events/kv_events.h) and the
// callback sink.

#include "kvbm/events/kv_events.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm::events {

CallbackEventSink::CallbackEventSink(Callback callback) : callback_(std::move(callback)) {
  KVBM_CHECK(callback_ != nullptr, "CallbackEventSink: the callback is empty");
}

void CallbackEventSink::publish(std::uint64_t sequence, const KvEventBatch& batch,
                                std::span<const std::uint8_t> payload) {
  callback_(sequence, batch, payload);
}

namespace {

double system_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Blocks an event counts for against max_batch_size.
std::size_t blocks_of(const KvEvent& event) {
  if (const auto* s = std::get_if<BlockStored>(&event)) return s->block_hashes.size();
  if (const auto* r = std::get_if<BlockRemoved>(&event)) return r->block_hashes.size();
  return 1;
}

}  // namespace

struct KvEventPublisher::State {
  State(std::shared_ptr<EventSink> s, KvEventPublisherOptions o)
      : sink(std::move(s)),
        options(std::move(o)),
        clock(options.monotonic_clock ? options.monotonic_clock : Clock::steady()),
        last_published(now()) {}

  Clock::time_point now() const { return clock->now(); }

  const std::shared_ptr<EventSink> sink;
  const KvEventPublisherOptions options;
  const std::shared_ptr<Clock> clock;

  // Collecting: taken under pools' locks (and takes only the flusher's
  // leaf lock, in wake()); held only to append.
  mutable detail::Mutex mu;
  std::vector<KvEvent> pending KVBM_GUARDED_BY(mu);
  std::size_t pending_blocks KVBM_GUARDED_BY(mu) = 0;
  bool wake KVBM_GUARDED_BY(mu) = false;  // max_batch_size blocks wait

  // Publishing: one flush at a time, so sequence numbers reach the sink in order.
  detail::Mutex publish_mu;
  std::uint64_t next_sequence KVBM_GUARDED_BY(publish_mu) = 0;
  // When the last batch went to the sink (construction at first): the heartbeat's clock.
  Clock::time_point last_published KVBM_GUARDED_BY(publish_mu);

  std::atomic<std::uint64_t> batches_published{0};
  std::atomic<std::uint64_t> heartbeats{0};
  std::atomic<std::uint64_t> events_published{0};
  std::atomic<std::uint64_t> failed_batches{0};
  std::atomic<std::uint64_t> dropped_blocks{0};

  // The background flush (options.background_flush), from the constructor
  // on; last: stopped before the members its ticks use go.
  std::unique_ptr<detail::PeriodicWorker> flusher;

  /// Reserves room for `blocks` more pending blocks; false (and counted as
  /// dropped) when the buffer is full. Caller holds mu.
  bool admit(std::size_t blocks) KVBM_REQUIRES(mu) {
    if (pending_blocks + blocks > options.max_pending_blocks) {
      dropped_blocks.fetch_add(blocks, std::memory_order_relaxed);
      return false;
    }
    pending_blocks += blocks;
    if (!wake && pending_blocks >= options.max_batch_size) {
      wake = true;
      if (flusher) flusher->wake();
    }
    return true;
  }

  /// Appends stored blocks, growing the last event when it is a BlockStored
  /// of the same medium and shape whose last block is the new first block's
  /// parent. Caller holds mu.
  void add_stored(BlockStored&& e) KVBM_REQUIRES(mu) {
    if (!admit(e.block_hashes.size())) return;
    if (!pending.empty() && e.parent_block_hash) {
      auto* last = std::get_if<BlockStored>(&pending.back());
      if (last != nullptr && last->medium == e.medium && last->block_size == e.block_size &&
          last->lora_id == e.lora_id && last->token_ids.empty() == e.token_ids.empty() &&
          last->group_idx == e.group_idx && last->kv_cache_spec_kind == e.kv_cache_spec_kind &&
          last->kv_cache_spec_sliding_window == e.kv_cache_spec_sliding_window &&
          last->block_hashes.back() == *e.parent_block_hash &&
          last->block_hashes.size() + e.block_hashes.size() <= options.max_batch_size) {
        last->block_hashes.insert(last->block_hashes.end(), e.block_hashes.begin(),
                                  e.block_hashes.end());
        last->token_ids.insert(last->token_ids.end(), e.token_ids.begin(), e.token_ids.end());
        return;
      }
    }
    pending.emplace_back(std::move(e));
  }

  /// Appends removed blocks, growing a last BlockRemoved of the same medium and group.
  /// Caller holds mu.
  void add_removed(BlockRemoved&& e) KVBM_REQUIRES(mu) {
    if (!admit(e.block_hashes.size())) return;
    if (!pending.empty()) {
      auto* last = std::get_if<BlockRemoved>(&pending.back());
      if (last != nullptr && last->medium == e.medium && last->group_idx == e.group_idx &&
          last->block_hashes.size() + e.block_hashes.size() <= options.max_batch_size) {
        last->block_hashes.insert(last->block_hashes.end(), e.block_hashes.begin(),
                                  e.block_hashes.end());
        return;
      }
    }
    pending.emplace_back(std::move(e));
  }

  void add(KvEvent&& event) {
    detail::LockGuard lock(mu);
    if (auto* s = std::get_if<BlockStored>(&event)) {
      add_stored(std::move(*s));
    } else if (auto* r = std::get_if<BlockRemoved>(&event)) {
      add_removed(std::move(*r));
    } else if (admit(1)) {
      pending.emplace_back(std::move(event));
    }
  }

  void publish_one(KvEventBatch& batch) KVBM_REQUIRES(publish_mu) {
    batch.ts = options.clock ? options.clock() : system_seconds();
    batch.data_parallel_rank = options.data_parallel_rank;
    const std::uint64_t sequence = next_sequence++;
    last_published = now();
    try {
      const std::vector<std::uint8_t> payload = encode_kv_event_batch(batch, options.layout);
      sink->publish(sequence, batch, payload);
      batches_published.fetch_add(1, std::memory_order_relaxed);
      events_published.fetch_add(batch.events.size(), std::memory_order_relaxed);
      if (batch.events.empty()) heartbeats.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      const std::uint64_t failed = failed_batches.fetch_add(1, std::memory_order_relaxed) + 1;
      if (std::has_single_bit(failed)) {  // the 1st, 2nd, 4th, ... failure: no flood
        logger()->warn("KV events: the sink failed on batch {} ({} failed so far): {}", sequence,
                       failed, e.what());
      }
    } catch (...) {  // the sink is the application's code and may throw anything: counted, logged
      failed_batches.fetch_add(1, std::memory_order_relaxed);
      logger()->warn("KV events: the sink failed on batch {} with a non-standard exception",
                     sequence);
    }
  }

  std::size_t flush() {
    detail::LockGuard publishing(publish_mu);
    std::vector<KvEvent> taken;
    {
      detail::LockGuard lock(mu);
      taken.swap(pending);
      pending_blocks = 0;
      wake = false;
    }
    std::size_t batches = 0;
    KvEventBatch batch;
    std::size_t batch_blocks = 0;
    for (KvEvent& event : taken) {
      const std::size_t blocks = blocks_of(event);
      if (!batch.events.empty() && batch_blocks + blocks > options.max_batch_size) {
        publish_one(batch);
        ++batches;
        batch.events.clear();
        batch_blocks = 0;
      }
      batch.events.push_back(std::move(event));
      batch_blocks += blocks;
    }
    if (!batch.events.empty()) {
      publish_one(batch);
      ++batches;
    }
    if (batches == 0 && options.heartbeat_interval.count() > 0 &&
        now() - last_published >= options.heartbeat_interval) {
      publish_one(batch);  // empty: the heartbeat
      ++batches;
    }
    return batches;
  }

  // The flusher's tick: every flush_interval (the heartbeat_interval when
  // shorter), or once max_batch_size blocks wait.
  void start_flusher() {
    const auto period = options.heartbeat_interval.count() > 0
                            ? std::min(options.flush_interval, options.heartbeat_interval)
                            : options.flush_interval;
    flusher = std::make_unique<detail::PeriodicWorker>("KV event flusher", clock, period,
                                                       [this] { flush(); });
  }
};

namespace {

/// Turns one pool's stored and removed hashes into events; holds the
/// publisher weakly (see the header's Lifetime paragraph).
class PublisherListener final : public PoolListener {
 public:
  PublisherListener(std::weak_ptr<KvEventPublisher::State> state, std::string medium,
                    std::uint32_t block_size, std::optional<EventGroup> group)
      : state_(std::move(state)),
        medium_(std::move(medium)),
        block_size_(block_size),
        group_(std::move(group)) {}

  void on_stored(std::span<const SequenceHash> hashes) noexcept override { stored(hashes, {}); }

  void on_stored_with_tokens(std::span<const SequenceHash> hashes,
                             std::span<const std::span<const Token>> tokens) noexcept override {
    stored(hashes, tokens);
  }

  void on_removed(std::span<const SequenceHash> hashes) noexcept override {
    const auto state = state_.lock();
    if (!state || hashes.empty()) return;
    try {
      BlockRemoved e;
      e.block_hashes.reserve(hashes.size());
      for (const SequenceHash& h : hashes) e.block_hashes.push_back(h.value());
      e.medium = medium_;
      if (group_) e.group_idx = group_->group_idx;
      detail::LockGuard lock(state->mu);
      state->add_removed(std::move(e));
    } catch (const std::exception&) {  // as in stored(): dropped and counted
      state->dropped_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
    }
  }

 private:
  // One BlockStored per hash (coalesced by add_stored), with tokens[i] as the
  // token ids of hashes[i] when tokens are given (tokens empty otherwise).
  void stored(std::span<const SequenceHash> hashes,
              std::span<const std::span<const Token>> tokens) noexcept {
    const auto state = state_.lock();
    if (!state || hashes.empty()) return;
    try {
      detail::LockGuard lock(state->mu);
      for (std::size_t i = 0; i < hashes.size(); ++i) {
        const SequenceHash& h = hashes[i];
        BlockStored e;
        e.block_hashes.push_back(h.value());
        if (h.has_parent()) e.parent_block_hash = h.parent();
        if (i < tokens.size()) e.token_ids.assign(tokens[i].begin(), tokens[i].end());
        e.block_size = block_size_;
        e.medium = medium_;
        if (group_) {
          e.group_idx = group_->group_idx;
          e.kv_cache_spec_kind = group_->kind;
          e.kv_cache_spec_sliding_window = group_->sliding_window;
        }
        state->add_stored(std::move(e));
      }
    } catch (const std::exception&) {
      // bad_alloc (or the mutex's system_error), maybe under a pool's lock,
      // where nothing may log: dropped and counted (stats().dropped_blocks).
      state->dropped_blocks.fetch_add(hashes.size(), std::memory_order_relaxed);
    }
  }

  const std::weak_ptr<KvEventPublisher::State> state_;
  const std::string medium_;
  const std::uint32_t block_size_;
  const std::optional<EventGroup> group_;  // a hybrid model's pool: the group its events name
};

}  // namespace

KvEventPublisher::KvEventPublisher(std::shared_ptr<EventSink> sink,
                                   KvEventPublisherOptions options) {
  KVBM_CHECK(sink != nullptr, "KvEventPublisher: the sink is null");
  KVBM_CHECK(options.max_batch_size > 0, "KvEventPublisher: max_batch_size must be positive");
  KVBM_CHECK(options.max_pending_blocks >= options.max_batch_size,
             "KvEventPublisher: max_pending_blocks (", options.max_pending_blocks,
             ") must be at least max_batch_size (", options.max_batch_size, ")");
  KVBM_CHECK(!options.background_flush || options.flush_interval.count() > 0,
             "KvEventPublisher: flush_interval must be positive with background_flush; "
             "set background_flush = false to publish only on flush()");
  KVBM_CHECK(options.heartbeat_interval.count() >= 0,
             "KvEventPublisher: heartbeat_interval must not be negative (zero turns it off)");
  state_ = std::make_shared<State>(std::move(sink), std::move(options));
  if (state_->options.background_flush) state_->start_flusher();
}

KvEventPublisher::~KvEventPublisher() {
  if (state_->flusher) state_->flusher->stop();
  try {
    state_->flush();
  } catch (const std::exception& e) {
    logger()->warn("KV events: the final flush failed: {}", e.what());
  }
}

std::shared_ptr<PoolListener> KvEventPublisher::listener(std::string medium,
                                                         std::uint32_t block_size) {
  KVBM_CHECK(!medium.empty(),
             "KvEventPublisher::listener: name the medium (kMediumGpu \"GPU\", kMediumCpu "
             "\"CPU\", kMediumDisk \"STORAGE\", kMediumRemote \"REMOTE\")");
  KVBM_CHECK(block_size > 0, "KvEventPublisher::listener: block_size must be positive");
  return std::make_shared<PublisherListener>(state_, std::move(medium), block_size, std::nullopt);
}

std::shared_ptr<PoolListener> KvEventPublisher::listener(std::string medium,
                                                         const KvCacheGroupSpec& group) {
  KVBM_CHECK(!medium.empty(),
             "KvEventPublisher::listener: name the medium (kMediumGpu \"GPU\", kMediumCpu "
             "\"CPU\", kMediumDisk \"STORAGE\", kMediumRemote \"REMOTE\")");
  group.validate();
  return std::make_shared<PublisherListener>(state_, std::move(medium), group.tokens_per_block,
                                             event_group(group));
}

void KvEventPublisher::record(KvEvent event) {
  if (const auto* s = std::get_if<BlockStored>(&event)) {
    KVBM_CHECK(!s->block_hashes.empty(), "KvEventPublisher::record: a BlockStored without hashes");
    KVBM_CHECK(!s->medium.empty(), "KvEventPublisher::record: a BlockStored without a medium");
  } else if (const auto* r = std::get_if<BlockRemoved>(&event)) {
    KVBM_CHECK(!r->block_hashes.empty(), "KvEventPublisher::record: a BlockRemoved without hashes");
    KVBM_CHECK(!r->medium.empty(), "KvEventPublisher::record: a BlockRemoved without a medium");
  }
  state_->add(std::move(event));
}

void KvEventPublisher::clear_all(std::string medium) {
  state_->add(AllBlocksCleared{std::move(medium)});
}

std::size_t KvEventPublisher::flush() { return state_->flush(); }

std::size_t KvEventPublisher::pending_events() const {
  detail::LockGuard lock(state_->mu);
  return state_->pending.size();
}

KvEventPublisherStats KvEventPublisher::stats() const {
  KvEventPublisherStats s;
  s.batches_published = state_->batches_published.load(std::memory_order_relaxed);
  s.heartbeats = state_->heartbeats.load(std::memory_order_relaxed);
  s.events_published = state_->events_published.load(std::memory_order_relaxed);
  s.failed_batches = state_->failed_batches.load(std::memory_order_relaxed);
  s.dropped_blocks = state_->dropped_blocks.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvbm::events
