// src/router/kv_indexer.cpp: the cluster's block index fed by KV events
// (kvbm/router/kv_indexer.h). The data structure is src/router/block_index.h;
// this file keeps the instances, their sequence numbers and staleness.

#include "kvbm/router/kv_indexer.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "kvbm/events/event_group.h"
#include "kvbm/groups/group_key.h"
#include "kvbm/groups/hit_rules.h"
#include "kvbm/hashing.h"
#include "router/block_index.h"
#include "router/hybrid_overlap.h"
#include "router/router_metrics.h"

namespace kvbm::router {

namespace {

TierArray<bool> shared_mask(const std::vector<TierId>& tiers) {
  TierArray<bool> out{};
  for (TierId t : tiers) {
    const auto i = static_cast<std::size_t>(t);
    KVBM_CHECK(i >= 1 && i <= kTierCount, "KvIndexerOptions.shared_tiers: tier ", i,
               " is not one of G1..G4");
    out[t] = true;
  }
  return out;
}

std::map<std::string, TierId, std::less<>> mediums_or_default(
    std::map<std::string, TierId, std::less<>> mediums) {
  if (mediums.empty()) {
    mediums = {{"GPU", TierId::kG1},
               {"CPU", TierId::kG2},
               {"DISK", TierId::kG3},
               {"STORAGE", TierId::kG3},
               {"REMOTE", TierId::kG4}};
  }
  for (const auto& [name, tier] : mediums) {
    const auto i = static_cast<std::size_t>(tier);
    KVBM_CHECK(i >= 1 && i <= 4, "KvIndexerOptions.mediums[\"", name, "\"]: tier ", i,
               " is not one of G1..G4");
  }
  return mediums;
}

/// One instance as the indexer keeps it.
struct Instance {
  std::string name;
  bool live = true;
  std::uint32_t lane = 0;
  std::uint64_t next_sequence = 0;
  bool gap = false;         // batches are missing; `held` waits for them
  bool marked = false;      // mark_stale() until the next applied batch
  bool accept_any = false;  // resynced with nothing to resume at: the next batch sets the sequence
  std::map<std::uint64_t, events::KvEventBatch> held;
  Clock::time_point last_seen{};
  // BlockKey::kTokens: the engine's block hash -> the block's key (and chain).
  std::unordered_map<std::uint64_t, SequenceHash> keys;
};

SaltHash lora_salt(std::optional<std::int64_t> lora_id) {
  return lora_id ? SaltBuilder().lora(std::to_string(*lora_id)).build() : kNoSalt;
}

// Appends the chain of `tokens` (whole blocks of `block_size`) after `parent`.
void chain_tokens(std::span<const std::uint32_t> tokens, std::uint32_t block_size, SaltHash salt,
                  std::optional<SequenceHash> parent, std::vector<SequenceHash>& out) {
  for (std::size_t i = 0; i + block_size <= tokens.size(); i += block_size) {
    parent = chain(parent, block_hash(tokens.subspan(i, block_size), salt));
    out.push_back(*parent);
  }
}

}  // namespace

std::vector<std::uint64_t> token_keys(std::span<const std::uint32_t> tokens,
                                      std::uint32_t block_size,
                                      std::optional<std::int64_t> lora_id) {
  KVBM_CHECK(block_size > 0, "token_keys: block_size must be at least 1");
  std::vector<SequenceHash> chain;
  chain.reserve(tokens.size() / block_size);
  chain_tokens(tokens, block_size, lora_salt(lora_id), std::nullopt, chain);
  std::vector<std::uint64_t> out;
  out.reserve(chain.size());
  for (const auto& h : chain) out.push_back(h.value());
  return out;
}

std::vector<std::vector<std::uint64_t>> kvbm_group_keys(std::span<const std::uint64_t> hashes,
                                                        std::span<const KvCacheGroupSpec> groups) {
  validate_groups(groups);
  const std::uint32_t hb = hash_block_size(groups);
  std::vector<std::vector<std::uint64_t>> out(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::uint64_t seed = group_seed(groups[g]);
    const std::size_t k = groups[g].tokens_per_block / hb;
    out[g].reserve(hashes.size() / k);
    // A group block's key derives from the chained value of its last hash block.
    for (std::size_t end = k; end <= hashes.size(); end += k) {
      out[g].push_back(group_key(hashes[end - 1], seed));
    }
  }
  return out;
}

std::vector<std::vector<std::uint64_t>> group_token_keys(std::span<const std::uint32_t> tokens,
                                                         std::span<const KvCacheGroupSpec> groups,
                                                         std::optional<std::int64_t> lora_id) {
  std::vector<std::vector<std::uint64_t>> out;
  out.reserve(groups.size());
  for (const auto& g : groups) out.push_back(token_keys(tokens, g.tokens_per_block, lora_id));
  return out;
}

namespace {

/// A hybrid model's groups as the index uses them; empty for a dense model.
struct GroupTable {
  std::vector<KvCacheGroupSpec> specs;
  std::vector<GroupRule> rules;
  std::vector<std::uint64_t> seeds;  // of the index's own keys: (group, key) -> one u64
  std::uint32_t hash_block = 0;

  explicit GroupTable(const std::vector<KvCacheGroupSpec>& groups) {
    if (groups.empty()) return;
    validate_groups(groups);
    if (groups.size() == 1 && groups[0].kind == AttentionKind::kFull) return;  // dense
    specs = groups;
    for (const auto& g : specs) {
      rules.push_back(GroupRule::of(g));
      seeds.push_back(group_seed(g));
    }
    hash_block = hash_block_size(specs);
  }
  [[nodiscard]] bool hybrid() const noexcept { return !specs.empty(); }
  /// The index's key of group g's block named `key` by its events.
  [[nodiscard]] std::uint64_t key(std::size_t g, std::uint64_t k) const noexcept {
    return group_key(k, seeds[g]);
  }
  /// The group an event names, or nullopt when it names none this table knows
  /// (no group_idx, one out of range, or a kind other than the group's).
  [[nodiscard]] std::optional<std::size_t> group_of(const events::KvEvent& e) const {
    std::optional<std::uint32_t> idx;
    const std::optional<std::string>* kind = nullptr;
    if (const auto* s = std::get_if<events::BlockStored>(&e)) {
      idx = s->group_idx;
      kind = &s->kv_cache_spec_kind;
    } else if (const auto* r = std::get_if<events::BlockRemoved>(&e)) {
      idx = r->group_idx;
    }
    if (!idx || *idx >= specs.size()) return std::nullopt;
    if (kind != nullptr && kind->has_value()) {
      const auto k = events::attention_kind_of(**kind);
      if (k && *k != specs[*idx].kind) return std::nullopt;
    }
    return *idx;
  }
};

}  // namespace

struct KvIndexer::Impl {
  explicit Impl(KvIndexerOptions o)
      : options(std::move(o)),
        mediums(mediums_or_default(options.mediums)),
        clock(options.clock ? options.clock : Clock::steady()),
        groups(options.groups),
        index(shared_mask(options.shared_tiers)) {
    KVBM_CHECK(options.silence_timeout.count() >= 0,
               "KvIndexerOptions.silence_timeout is negative; zero means never silent");
    if (options.metrics_registry) {
      metrics = std::make_unique<impl::IndexerMetrics>(options.metrics_registry);
    }
  }

  const KvIndexerOptions options;
  const std::map<std::string, TierId, std::less<>> mediums;
  const std::shared_ptr<Clock> clock;
  const GroupTable groups;
  std::unique_ptr<impl::IndexerMetrics> metrics;  // its own atomics; touched after mu is released

  mutable detail::SharedMutex mu;
  impl::BlockIndex index KVBM_GUARDED_BY(mu);
  std::vector<Instance> instances KVBM_GUARDED_BY(mu);
  std::map<std::string, InstanceId, std::less<>> names KVBM_GUARDED_BY(mu);  // live ones
  std::set<std::uint32_t> free_lanes KVBM_GUARDED_BY(mu);
  std::uint32_t lanes KVBM_GUARDED_BY(mu) = 0;
  KvIndexerStats stats KVBM_GUARDED_BY(mu);

  /// Gauge values read under the lock, published after it.
  struct Gauges {
    std::size_t stale = 0;
    std::size_t live = 0;
    TierBlockCounts blocks{};
  };

  [[nodiscard]] bool silence_on() const noexcept { return options.silence_timeout.count() > 0; }
  [[nodiscard]] Clock::time_point now() const {
    return silence_on() ? clock->now() : Clock::time_point{};
  }

  Instance& live_instance(InstanceId id, const char* call) KVBM_REQUIRES(mu) {
    KVBM_CHECK(id < instances.size() && instances[id].live, "KvIndexer::", call,
               ": no live instance ", id,
               " (add_instance() gives the ids; removed ones stay removed)");
    return instances[id];
  }

  [[nodiscard]] StaleReason reason(const Instance& in, Clock::time_point now) const noexcept {
    if (in.gap) return StaleReason::kGap;
    if (in.marked) return StaleReason::kMarked;
    if (silence_on() && now - in.last_seen >= options.silence_timeout) return StaleReason::kSilent;
    return StaleReason::kFresh;
  }

  Gauges gauges(Clock::time_point now) const KVBM_REQUIRES_SHARED(mu) {
    Gauges g;
    for (const Instance& in : instances) {
      if (!in.live) continue;
      ++g.live;
      if (reason(in, now) != StaleReason::kFresh) ++g.stale;
    }
    g.blocks = index.tier_blocks();
    return g;
  }

  void publish(const impl::IndexerDelta& d, const std::optional<Gauges>& g) const noexcept {
    if (!metrics) return;
    metrics->add(d);
    if (g) {
      metrics->set_stale_instances(g->stale);
      metrics->set_instances(g->live);
      metrics->set_indexed_blocks(g->blocks);
    }
  }

  /// Drops the instance's entries (its lane and, keyed by tokens, its keys).
  void clear_instance(Instance& in) KVBM_REQUIRES(mu) {
    index.clear_lane(in.lane);
    in.keys.clear();
  }

  /// The index's key of a block its events name `k`: `k` itself for a dense
  /// model, the (group, k) key for a hybrid one (`group` set).
  [[nodiscard]] std::uint64_t key_of(std::optional<std::size_t> group, std::uint64_t k) const {
    return group ? groups.key(*group, k) : k;
  }

  /// BlockKey::kTokens: the keys of a stored event's blocks, recorded for
  /// their removal; false (nothing recorded) without whole blocks of tokens
  /// or when the parent was never seen. A hybrid model's engine hashes are
  /// recorded per group (vLLM names a block of every group by the same hash).
  bool key_stored(Instance& in, const events::BlockStored& s, std::optional<std::size_t> group,
                  std::vector<std::uint64_t>& keys) const {
    if (s.block_size == 0 || s.token_ids.size() != s.block_hashes.size() * s.block_size) {
      return false;
    }
    std::optional<SequenceHash> parent;
    if (s.parent_block_hash) {
      const auto it = in.keys.find(key_of(group, *s.parent_block_hash));
      if (it == in.keys.end()) return false;
      parent = it->second;
    }
    std::vector<SequenceHash> chain;
    chain.reserve(s.block_hashes.size());
    chain_tokens(s.token_ids, s.block_size, lora_salt(s.lora_id), parent, chain);
    for (std::size_t i = 0; i < chain.size(); ++i) {
      in.keys.insert_or_assign(key_of(group, s.block_hashes[i]), chain[i]);
      keys.push_back(key_of(group, chain[i].value()));
    }
    return true;
  }

  void store(Instance& in, TierId tier, std::span<const std::uint64_t> keys) KVBM_REQUIRES(mu) {
    const bool shared = index.is_shared(tier);
    for (const std::uint64_t k : keys) {
      (void)(shared ? index.store_shared(tier, k) : index.store_local(in.lane, tier, k));
    }
    stats.blocks_stored += keys.size();
  }

  // Keyed by tokens, a removal names the engine's hashes: each is looked up,
  // and forgotten once the instance holds its block in no local tier.
  void remove(Instance& in, TierId tier, std::span<const std::uint64_t> hashes,
              std::optional<std::size_t> group, impl::IndexerDelta& d) KVBM_REQUIRES(mu) {
    const bool shared = index.is_shared(tier);
    const bool by_tokens = options.key == BlockKey::kTokens;
    for (const std::uint64_t h : hashes) {
      const auto it = by_tokens ? in.keys.find(key_of(group, h)) : in.keys.end();
      if (by_tokens && it == in.keys.end()) {
        ++d.removed_unknown_blocks;
        continue;
      }
      const std::uint64_t k = key_of(group, by_tokens ? it->second.value() : h);
      const bool was = shared ? index.remove_shared(tier, k) : index.remove_local(in.lane, tier, k);
      if (!was) ++d.removed_unknown_blocks;
      if (by_tokens && !held_locally(in, k)) in.keys.erase(it);
    }
    stats.blocks_removed += hashes.size();
  }

  bool held_locally(const Instance& in, std::uint64_t key) const KVBM_REQUIRES_SHARED(mu) {
    for (const TierId tier : kTierIds) {
      if (!index.is_shared(tier) && index.holds(in.lane, key, tier)) return true;
    }
    return false;
  }

  /// Applies one batch's events to the index.
  void apply_events(Instance& in, const events::KvEventBatch& batch, impl::IndexerDelta& d)
      KVBM_REQUIRES(mu) {
    std::vector<std::uint64_t> keys;
    for (const events::KvEvent& event : batch.events) {
      if (std::holds_alternative<events::AllBlocksCleared>(event)) {
        // The wire form has no medium, so the medium of an in-process event is
        // ignored too: both transports mean "every local tier" (of every group).
        clear_instance(in);
        ++stats.clears;
        ++d.events_applied;
        continue;
      }
      const auto* stored = std::get_if<events::BlockStored>(&event);
      const std::string& medium =
          stored != nullptr ? stored->medium : std::get<events::BlockRemoved>(event).medium;
      const auto it = mediums.find(medium);
      if (it == mediums.end()) {
        ++d.unknown_medium_events;
        continue;
      }
      std::optional<std::size_t> group;
      if (groups.hybrid()) {
        group = groups.group_of(event);
        if (!group) {
          ++d.group_mismatch_events;
          continue;
        }
      }
      if (stored == nullptr) {
        remove(in, it->second, std::get<events::BlockRemoved>(event).block_hashes, group, d);
      } else {
        keys.clear();
        if (options.key == BlockKey::kEngineHash && !group) {
          store(in, it->second, stored->block_hashes);  // a dense model: the hashes are the keys
        } else if (options.key == BlockKey::kEngineHash) {
          for (const std::uint64_t h : stored->block_hashes) keys.push_back(key_of(group, h));
          store(in, it->second, keys);
        } else if (key_stored(in, *stored, group, keys)) {
          store(in, it->second, keys);
        } else {
          ++d.unkeyed_events;
          continue;
        }
      }
      ++d.events_applied;
    }
  }

  /// Applies a batch that is next in sequence and whatever held batches follow it.
  std::size_t apply_in_order(Instance& in, const events::KvEventBatch& batch, impl::IndexerDelta& d)
      KVBM_REQUIRES(mu) {
    apply_events(in, batch, d);
    ++in.next_sequence;
    std::size_t applied = 1;
    while (!in.held.empty() && in.held.begin()->first <= in.next_sequence) {
      auto node = in.held.extract(in.held.begin());
      if (node.key() == in.next_sequence) {
        apply_events(in, node.mapped(), d);
        ++in.next_sequence;
        ++applied;
      }
    }
    if (in.held.empty()) in.gap = false;
    in.marked = false;
    return applied;
  }

  /// Drops the instance's entries and applies its held batches from the lowest.
  std::size_t resync(Instance& in, impl::IndexerDelta& d,
                     std::optional<std::uint64_t> resume_at = std::nullopt) KVBM_REQUIRES(mu) {
    clear_instance(in);
    std::size_t applied = 0;
    bool resumed = false;
    if (resume_at) {
      in.next_sequence = *resume_at;
      resumed = true;
    }
    for (auto& [seq, batch] : in.held) {
      if (resume_at && seq < *resume_at) continue;
      apply_events(in, batch, d);
      in.next_sequence = seq + 1;
      resumed = true;
      ++applied;
    }
    in.accept_any = !resumed;
    in.held.clear();
    in.gap = false;
    in.marked = false;
    ++stats.resyncs;
    ++d.resyncs;
    return applied;
  }

  void finish_counts(const impl::IndexerDelta& d, std::size_t applied_batches) KVBM_REQUIRES(mu) {
    stats.batches_applied += applied_batches;
    stats.events_applied += d.events_applied;
    stats.unknown_medium_events += d.unknown_medium_events;
    stats.removed_unknown_blocks += d.removed_unknown_blocks;
    stats.unkeyed_events += d.unkeyed_events;
    stats.group_mismatch_events += d.group_mismatch_events;
  }
};

KvIndexer::KvIndexer(KvIndexerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->publish({}, Impl::Gauges{});
}

KvIndexer::~KvIndexer() = default;

InstanceId KvIndexer::add_instance(std::string name) {
  auto& m = *impl_;
  std::optional<Impl::Gauges> g;
  InstanceId id = 0;
  {
    detail::WriterLock lock(m.mu);
    KVBM_CHECK(!name.empty(), "KvIndexer::add_instance: the name is empty");
    KVBM_CHECK(!m.names.contains(name), "KvIndexer::add_instance: an instance named \"", name,
               "\" is already live; remove_instance() it first or pick another name");
    std::uint32_t lane = m.lanes;
    if (!m.free_lanes.empty()) {
      lane = *m.free_lanes.begin();
      m.free_lanes.erase(m.free_lanes.begin());
    } else {
      ++m.lanes;
    }
    m.index.reserve_lanes(m.lanes);
    id = static_cast<InstanceId>(m.instances.size());
    Instance in;
    in.name = name;
    in.lane = lane;
    in.last_seen = m.now();
    m.instances.push_back(std::move(in));
    m.names.emplace(std::move(name), id);
    g = m.gauges(m.now());
  }
  m.publish({}, g);
  return id;
}

void KvIndexer::remove_instance(InstanceId id) {
  auto& m = *impl_;
  std::optional<Impl::Gauges> g;
  {
    detail::WriterLock lock(m.mu);
    Instance& in = m.live_instance(id, "remove_instance");
    m.clear_instance(in);
    m.free_lanes.insert(in.lane);
    m.names.erase(in.name);
    in.live = false;
    in.held.clear();
    in.gap = false;
    g = m.gauges(m.now());
  }
  m.publish({}, g);
}

std::optional<InstanceId> KvIndexer::find_instance(std::string_view name) const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  const auto it = m.names.find(name);
  if (it == m.names.end()) return std::nullopt;
  return it->second;
}

ApplyResult KvIndexer::apply(InstanceId id, std::uint64_t sequence,
                             const events::KvEventBatch& batch) {
  auto& m = *impl_;
  impl::IndexerDelta d;
  std::optional<Impl::Gauges> g;
  ApplyResult r;
  {
    detail::WriterLock lock(m.mu);
    Instance& in = m.live_instance(id, "apply");
    const auto now = m.now();
    in.last_seen = now;
    if (in.accept_any) {  // resynced with nothing to resume at: go on from this batch
      in.accept_any = false;
      in.next_sequence = sequence;
    }
    if (sequence == in.next_sequence) {
      r.status = ApplyStatus::kApplied;
      r.applied_batches = m.apply_in_order(in, batch, d);
    } else if (sequence == 0) {  // and next_sequence > 0: the publisher restarted
      r.status = ApplyStatus::kRestart;
      m.clear_instance(in);
      in.held.clear();
      in.gap = false;
      in.next_sequence = 0;
      ++m.stats.restarts;
      r.applied_batches = m.apply_in_order(in, batch, d);
    } else if (sequence < in.next_sequence) {
      r.status = ApplyStatus::kDuplicate;
      ++m.stats.duplicate_batches;
    } else {
      r.status = ApplyStatus::kGap;
      if (!in.gap) ++m.stats.gaps;
      in.gap = true;
      in.held.try_emplace(sequence, batch);
      if (in.held.size() > m.options.max_held_batches) r.applied_batches = m.resync(in, d);
    }
    r.expected = in.next_sequence;
    ++d.batches[static_cast<std::size_t>(r.status)];
    m.finish_counts(d, r.applied_batches);
    if (m.metrics) g = m.gauges(now);
  }
  m.publish(d, g);
  return r;
}

void KvIndexer::resync(InstanceId id, std::optional<std::uint64_t> resume_at) {
  auto& m = *impl_;
  impl::IndexerDelta d;
  std::optional<Impl::Gauges> g;
  {
    detail::WriterLock lock(m.mu);
    Instance& in = m.live_instance(id, "resync");
    const std::size_t applied = m.resync(in, d, resume_at);
    m.finish_counts(d, applied);
    if (m.metrics) g = m.gauges(m.now());
  }
  m.publish(d, g);
}

void KvIndexer::restart(InstanceId id) {
  auto& m = *impl_;
  impl::IndexerDelta d;
  std::optional<Impl::Gauges> g;
  {
    detail::WriterLock lock(m.mu);
    Instance& in = m.live_instance(id, "restart");
    m.clear_instance(in);
    in.held.clear();
    in.gap = false;
    in.marked = false;
    in.accept_any = false;
    in.next_sequence = 0;
    ++m.stats.restarts;
    ++d.batches[static_cast<std::size_t>(ApplyStatus::kRestart)];
    m.finish_counts(d, 0);
    if (m.metrics) g = m.gauges(m.now());
  }
  m.publish(d, g);
}

void KvIndexer::mark_stale(InstanceId id) {
  auto& m = *impl_;
  std::optional<Impl::Gauges> g;
  {
    detail::WriterLock lock(m.mu);
    m.live_instance(id, "mark_stale").marked = true;
    if (m.metrics) g = m.gauges(m.now());
  }
  m.publish({}, g);
}

OverlapScores KvIndexer::overlaps(std::span<const std::uint64_t> hashes) const {
  auto& m = *impl_;
  if (m.groups.hybrid()) {
    const auto keys = kvbm_group_keys(hashes, m.groups.specs);
    return group_overlaps(keys, hashes.size() * std::size_t{m.groups.hash_block});
  }
  OverlapScores out;
  out.request_blocks = hashes.size();
  std::size_t stale = 0;
  {
    detail::ReaderLock lock(m.mu);
    const auto now = m.now();
    std::vector<std::uint64_t> alive(m.index.words(), 0);
    for (const Instance& in : m.instances) {
      if (in.live) alive[in.lane / 64] |= std::uint64_t{1} << (in.lane % 64);
    }
    impl::WalkCounters counters;
    m.index.walk(hashes, alive, counters);
    out.instances.reserve(m.names.size());
    for (InstanceId id = 0; id < m.instances.size(); ++id) {
      const Instance& in = m.instances[id];
      if (!in.live) continue;
      // Filled in place: a local copied in would cost a store-forwarding stall per field.
      InstanceOverlap& o = out.instances.emplace_back();
      o.instance = id;
      o.per_tier = counters.counts(in.lane);
      o.prefix_blocks = total(o.per_tier);
      o.stale = m.reason(in, now) != StaleReason::kFresh;
      stale += o.stale ? 1 : 0;
    }
  }
  if (m.metrics) m.metrics->set_stale_instances(stale);  // silence is seen when asked
  return out;
}

namespace {

/// The fastest tier that holds `key` for `lane`: a local one, else a shared one.
std::optional<TierId> held_tier(const impl::BlockIndex& index, std::uint32_t lane,
                                std::uint64_t key) {
  for (const bool shared : {false, true}) {
    for (const TierId t : kTierIds) {
      if (index.is_shared(t) == shared && index.holds(lane, key, t)) return t;
    }
  }
  return std::nullopt;
}

/// One lane's presence answers for hybrid_overlap(). Made and called while the
/// caller holds the index's lock (a lambda would be checked by clang's
/// thread-safety analysis apart from the scope that holds it).
struct LaneHeld {
  const impl::BlockIndex* index;
  std::uint32_t lane;
  const GroupTable* groups;
  std::span<const std::vector<std::uint64_t>> keys;
  std::optional<TierId> operator()(std::size_t g, std::size_t j) const {
    return held_tier(*index, lane, groups->key(g, keys[g][j]));
  }
};

}  // namespace

OverlapScores KvIndexer::group_overlaps(std::span<const std::vector<std::uint64_t>> group_keys,
                                        std::size_t max_tokens) const {
  auto& m = *impl_;
  const GroupTable& t = m.groups;
  KVBM_CHECK(t.hybrid(),
             "KvIndexer::group_overlaps: the index is dense (KvIndexerOptions::groups names no "
             "hybrid model); use overlaps(hashes)");
  KVBM_CHECK(group_keys.size() == t.specs.size(), "KvIndexer::group_overlaps: ", group_keys.size(),
             " key lists for ", t.specs.size(), " groups; give one per group, in id order");
  for (std::size_t g = 0; g < group_keys.size(); ++g) {
    max_tokens = std::min(max_tokens, group_keys[g].size() * t.specs[g].tokens_per_block);
  }
  OverlapScores out;
  out.request_blocks = max_tokens / t.hash_block;
  std::size_t stale = 0;
  {
    detail::ReaderLock lock(m.mu);
    const auto now = m.now();
    out.instances.reserve(m.names.size());
    for (InstanceId id = 0; id < m.instances.size(); ++id) {
      const Instance& in = m.instances[id];
      if (!in.live) continue;
      InstanceOverlap& o = out.instances.emplace_back();
      o.instance = id;
      const impl::HeldTier held = LaneHeld{&m.index, in.lane, &t, group_keys};
      impl::hybrid_overlap(t.rules, t.hash_block, max_tokens, held, o);
      o.stale = m.reason(in, now) != StaleReason::kFresh;
      stale += o.stale ? 1 : 0;
    }
  }
  if (m.metrics) m.metrics->set_stale_instances(stale);
  return out;
}

bool KvIndexer::holds(InstanceId id, std::uint64_t hash, TierId tier) const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  KVBM_CHECK(id < m.instances.size(), "KvIndexer::holds: no instance ", id);
  const Instance& in = m.instances[id];
  if (!in.live) return false;
  return m.index.holds(in.lane, hash, tier);
}

InstanceState KvIndexer::state(InstanceId id) const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  KVBM_CHECK(id < m.instances.size(), "KvIndexer::state: no instance ", id,
             " (add_instance() gives the ids)");
  const Instance& in = m.instances[id];
  InstanceState s;
  s.name = in.name;
  s.next_sequence = in.next_sequence;
  s.held_batches = in.held.size();
  if (in.live) {
    s.stale = m.reason(in, m.now());
    s.blocks = m.index.lane_blocks(in.lane);
  }
  return s;
}

std::vector<InstanceId> KvIndexer::instances() const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  std::vector<InstanceId> out;
  for (InstanceId id = 0; id < m.instances.size(); ++id) {
    if (m.instances[id].live) out.push_back(id);
  }
  return out;
}

std::size_t KvIndexer::shared_blocks(TierId tier) const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  return m.index.is_shared(tier) ? m.index.tier_blocks()[tier] : 0;
}

const char* to_string(BlockKey k) noexcept { return k == BlockKey::kTokens ? "tokens" : "hashes"; }

BlockKey parse_block_key(std::string_view s) {
  for (auto k : {BlockKey::kEngineHash, BlockKey::kTokens}) {
    if (s == to_string(k)) return k;
  }
  KVBM_CHECK(false, "unknown block key \"", s, "\": use hashes or tokens");
  return BlockKey::kEngineHash;
}

const char* to_string(StaleReason r) noexcept {
  switch (r) {
    case StaleReason::kFresh:
      return "fresh";
    case StaleReason::kGap:
      return "gap";
    case StaleReason::kSilent:
      return "silent";
    case StaleReason::kMarked:
      return "marked";
  }
  return "unknown";
}

BlockKey KvIndexer::key() const noexcept { return impl_->options.key; }

bool KvIndexer::hybrid() const noexcept { return impl_->groups.hybrid(); }

std::span<const KvCacheGroupSpec> KvIndexer::groups() const noexcept {
  return impl_->options.groups;
}

KvIndexerStats KvIndexer::stats() const {
  auto& m = *impl_;
  detail::ReaderLock lock(m.mu);
  KvIndexerStats s = m.stats;
  s.distinct_blocks = m.index.size();
  s.index_bytes = m.index.bytes();
  return s;
}

}  // namespace kvbm::router
