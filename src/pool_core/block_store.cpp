#include "kvbm/pool_core/block_store.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"

namespace kvbm::detail {

namespace {

// Reviving an inactive block takes it out of the eviction backend, whose entry
// for it is one more random line: names the inactive blocks among `ids` to the
// backend (prefetch_remove, a hint), a chunk per call, before any is revived,
// so that those misses overlap too. Blocks in use have no entry: left out.
void hint_removals(const EvictionBackend& backend, const Slot* slots,
                   std::span<const BlockId> ids) noexcept {
  constexpr std::size_t kChunk = 64;
  std::array<BlockId, kChunk> inactive;  // filled before it is read: not cleared
  std::size_t n = 0;
  for (const BlockId id : ids) {
    if (slots[id].state != SlotState::kInactive) continue;
    inactive[n++] = id;
    if (n == kChunk) {
      backend.prefetch_remove(std::span(inactive.data(), n));
      n = 0;
    }
  }
  if (n != 0) backend.prefetch_remove(std::span(inactive.data(), n));
}

}  // namespace

BlockStore::BlockStore(Options options)
    : block_size_(options.block_size),
      duplicate_policy_(options.duplicate_policy),
      name_(std::move(options.name)),
      metrics_(std::move(options.metrics)),
      tracker_(std::move(options.tracker)),
      listeners_(std::move(options.listeners)),
      slots_(options.block_count),
      backend_(std::move(options.backend)),
      table_(options.block_count) {
  KVBM_CHECK(options.block_count > 0, "a block pool needs at least one block");
  KVBM_CHECK(backend_ != nullptr, "a block pool needs an eviction backend");
  KVBM_CHECK(metrics_ != nullptr, "a block pool needs its metrics");
  for (const auto& l : listeners_) KVBM_CHECK(l != nullptr, "a pool listener is null");
  // Free stack popped from the back: block 0 is handed out first.
  reset_.resize(options.block_count);
  for (std::uint32_t i = 0; i < options.block_count; ++i) reset_[i] = options.block_count - 1 - i;
  LockGuard lock(mu_);
  metrics_->set_reset_pool_size(reset_.size());
  metrics_->set_inactive_pool_size(0);
  metrics_->set_inflight_mutable(0);
  metrics_->set_inflight_immutable(0);
  published_ = {reset_.size(), 0, 0, 0};
}

BlockStore::~BlockStore() = default;

void BlockStore::publish_gauges_locked() noexcept {
  // Gauge stores are sequentially consistent atomics: skip the unchanged ones.
  const Published now{reset_.size(), backend_->size(), mutable_out_, in_use_ - mutable_out_};
  if (now.reset != published_.reset) metrics_->set_reset_pool_size(now.reset);
  if (now.inactive != published_.inactive) metrics_->set_inactive_pool_size(now.inactive);
  if (now.mutable_out != published_.mutable_out) metrics_->set_inflight_mutable(now.mutable_out);
  if (now.immutable_out != published_.immutable_out) {
    metrics_->set_inflight_immutable(now.immutable_out);
  }
  published_ = now;
}

void BlockStore::touch(std::span<const SequenceHash> hashes, std::size_t n) noexcept {
  if (!tracker_) return;
  for (std::size_t i = 0; i < n && i < hashes.size(); ++i) tracker_->touch(hashes[i].value());
}

std::uint32_t BlockStore::generation(BlockId id) const noexcept {
  LockGuard lock(mu_);
  return slots_[id].generation;
}

bool BlockStore::allocate(std::uint32_t n, BlockId* out) {
  PoolCounterDelta delta;
  std::vector<EvictedBlock> evicted;  // filled only when a listener wants them
  {
    LockGuard lock(mu_);
    if (static_cast<std::size_t>(n) > reset_.size() + backend_->size()) return false;
    const std::size_t from_reset = std::min<std::size_t>(n, reset_.size());
    const std::size_t to_evict = n - from_reset;
    // Free blocks first, then the evicted ones (the order the pools are drawn
    // from, as documented). Evict before touching the reset pool: a backend
    // that protects blocks (lineage) may free fewer than it holds, and then
    // the evictions are undone and nothing has changed.
    BlockId* const victims = out + from_reset;
    if (to_evict > 0 && !evict_locked(to_evict, victims)) return false;
    for (std::size_t i = 0; i < from_reset; ++i) {
      out[i] = reset_.back();
      reset_.pop_back();
    }
    for (std::size_t i = 0; i < n; ++i) slots_[out[i]].state = SlotState::kMutable;
    if (to_evict > 0 && !listeners_.empty()) {
      evicted.reserve(to_evict);
      std::vector<SequenceHash> hashes;
      hashes.reserve(to_evict);
      for (std::size_t i = 0; i < to_evict; ++i) {
        evicted.push_back({victims[i], slots_[victims[i]].hash});
        hashes.push_back(slots_[victims[i]].hash);
      }
      for (const auto& l : listeners_) l->on_removed(hashes);
    }
    in_use_ += n;
    mutable_out_ += n;
    if (orphaned_ && !keepalive_) keepalive_ = shared_from_this();
    publish_gauges_locked();
    delta.allocations = n;
    delta.allocations_from_reset = from_reset;
    delta.evictions = to_evict;
  }
  metrics_->add(delta);
  if (!evicted.empty()) {
    for (const auto& l : listeners_) l->on_evicting(evicted);
  }
  return true;
}

bool BlockStore::allocate_ids(std::span<const BlockId> ids) {
  {
    LockGuard lock(mu_);
    // Every id must be free and named once; nothing changes otherwise.
    std::vector<bool> wanted(slots_.size(), false);
    for (const BlockId id : ids) {
      if (id >= slots_.size() || wanted[id] || slots_[id].state != SlotState::kReset) return false;
      wanted[id] = true;
    }
    std::erase_if(reset_, [&](BlockId id) { return wanted[id]; });
    for (const BlockId id : ids) slots_[id].state = SlotState::kMutable;
    in_use_ += ids.size();
    mutable_out_ += ids.size();
    if (orphaned_ && !keepalive_) keepalive_ = shared_from_this();
    publish_gauges_locked();
  }
  PoolCounterDelta delta;
  delta.allocations = ids.size();
  delta.allocations_from_reset = ids.size();
  metrics_->add(delta);
  return true;
}

bool BlockStore::evict_locked(std::size_t n, BlockId* victims) noexcept {
  // Take the victims out of the backend first. Lineage makes a parent
  // evictable only once its last cached child has left the tier, so each pop
  // is followed by on_unregistered before the next.
  for (std::size_t i = 0; i < n; ++i) {
    const auto victim = backend_->pop_victim();
    if (!victim) {
      // Nothing was erased yet: the popped blocks go back as they were.
      undo_evictions_locked(std::span<const BlockId>(victims, i));
      return false;
    }
    victims[i] = *victim;
    backend_->on_unregistered(slots_[*victim].hash);
  }
  // Then drop their registry entries. Each erase is a random cache line of
  // the index: ask for all of them first so that the misses overlap.
  for (std::size_t i = 0; i < n; ++i) table_.prefetch(slots_[victims[i]].hash.value());
  for (std::size_t i = 0; i < n; ++i) {
    Slot& s = slots_[victims[i]];
    table_.erase(s.hash.value());
    s.state = SlotState::kReset;
    s.generation++;  // weak handles to it now fail
  }
  return true;
}

std::optional<BlockId> BlockStore::evict_one_locked() noexcept {
  const auto victim = backend_->pop_victim();
  if (!victim) return std::nullopt;
  Slot& s = slots_[*victim];
  table_.erase(s.hash.value());
  backend_->on_unregistered(s.hash);
  s.state = SlotState::kReset;
  return victim;
}

void BlockStore::prefetch_next_victim_locked() const noexcept {
  // The next allocation that evicts will erase the current victim's registry
  // entry: start loading that line now, so that its miss overlaps with the
  // caller's own instead of stalling the allocation later. A guess (a match
  // may take the block back first); a wrong one costs one prefetch.
  if (const auto next = backend_->peek_victim()) table_.prefetch(slots_[*next].hash.value());
}

void BlockStore::undo_evictions_locked(std::span<const BlockId> evicted) noexcept {
  // Restore in eviction order. A failed allocation evicted every evictable
  // block, least recent first, each chain's parents right after their last
  // child; re-inserting in that order puts the leaves back at the back of the
  // list in their old order, and a parent is inserted after its re-registered
  // child, so it is parked again. (Reverse order would reverse the leaves'
  // LRU order: the failed allocation would have changed something.)
  for (const BlockId id : evicted) {
    Slot& s = slots_[id];
    (void)table_.try_emplace(s.hash.value(), id);
    backend_->on_registered(s.hash);
    s.state = SlotState::kInactive;
    backend_->insert(id, s.hash);
  }
}

void BlockStore::return_to_reset_locked(BlockId id) noexcept {
  Slot& s = slots_[id];
  s.state = SlotState::kReset;
  s.generation++;
  reset_.push_back(id);
}

void BlockStore::leave_in_use_locked(std::shared_ptr<BlockStore>& keepalive) noexcept {
  --in_use_;
  ++releases_;
  if (release_waiters_ != 0) release_cv_.notify_all();
  if (in_use_ == 0 && keepalive_) keepalive = std::move(keepalive_);
}

std::uint64_t BlockStore::releases() const {
  LockGuard lock(mu_);
  return releases_;
}

bool BlockStore::wait_for_release(std::uint64_t seen,
                                  std::chrono::steady_clock::time_point deadline) const {
  UniqueLock lock(mu_);
  ++release_waiters_;
  const bool released = release_cv_.wait_until(
      lock.native(), deadline, [&]() KVBM_REQUIRES(mu_) { return releases_ != seen; });
  --release_waiters_;
  return released;
}

void BlockStore::release_mutable(BlockId id) noexcept {
  std::shared_ptr<BlockStore> keepalive;  // destroyed after the lock is released
  LockGuard lock(mu_);
  return_to_reset_locked(id);
  --mutable_out_;
  leave_in_use_locked(keepalive);
  publish_gauges_locked();
}

void BlockStore::revive_locked(BlockId id) noexcept {
  Slot& s = slots_[id];
  if (s.state == SlotState::kInactive) {
    backend_->remove(id);
    s.state = SlotState::kActive;
    s.refs.store(1, std::memory_order_relaxed);
    ++in_use_;
    if (orphaned_ && !keepalive_) keepalive_ = shared_from_this();
  } else {
    s.refs.fetch_add(1, std::memory_order_relaxed);
  }
}

void BlockStore::register_locked(Registration& r, PoolCounterDelta& delta,
                                 std::shared_ptr<BlockStore>& keepalive) {
  Slot& s = slots_[r.id];
  const auto [existing_id, inserted] = table_.try_emplace(r.hash.value(), r.id);
  if (inserted) {
    backend_->on_registered(r.hash);
    if (r.tokens.empty()) {
      for (const auto& l : listeners_) l->on_stored(std::span(&r.hash, 1));
    } else {
      for (const auto& l : listeners_)
        l->on_stored_with_tokens(std::span(&r.hash, 1), std::span(&r.tokens, 1));
    }
    s.hash = r.hash;
    s.state = SlotState::kActive;
    s.refs.store(1, std::memory_order_relaxed);
    --mutable_out_;
    ++delta.registrations;
    r.deduplicated = false;
  } else if (duplicate_policy_ == DuplicatePolicy::kAllow) {
    s.hash = r.hash;
    s.state = SlotState::kDuplicate;
    s.refs.store(1, std::memory_order_relaxed);
    --mutable_out_;
    ++delta.registrations;
    ++delta.duplicate_blocks;
    r.deduplicated = false;
  } else {
    const BlockId existing = existing_id;
    revive_locked(existing);
    return_to_reset_locked(r.id);
    --mutable_out_;
    leave_in_use_locked(keepalive);
    r.id = existing;
    r.deduplicated = true;
    ++delta.registration_dedup;
  }
}

RegisterOutcome BlockStore::register_block(BlockId id, const SequenceHash& hash,
                                           std::span<const Token> tokens) {
  Registration r{id, hash, false, tokens};
  register_blocks(std::span(&r, 1));
  return {r.id, r.deduplicated};
}

void BlockStore::register_blocks(std::span<Registration> batch) {
  if (batch.empty()) return;
  PoolCounterDelta delta;
  std::shared_ptr<BlockStore> keepalive;
  {
    LockGuard lock(mu_);
    prefetch_next_victim_locked();
    // Each registration touches a random line of the index and the block's
    // slot: ask for all of them first so that the misses overlap.
    for (const auto& r : batch) {
      table_.prefetch(r.hash.value());
      prefetch_for_write(&slots_[r.id]);
    }
    for (auto& r : batch) register_locked(r, delta, keepalive);
    publish_gauges_locked();
  }
  metrics_->add(delta);
  if (tracker_) {
    for (const auto& r : batch) tracker_->touch(r.hash.value());
  }
}

bool BlockStore::drop_reference_locked(BlockId id,
                                       std::shared_ptr<BlockStore>& keepalive) noexcept {
  Slot& s = slots_[id];
  // Only a holder adds a reference without the lock; when ours is the only
  // one left nobody else can, so a plain store ends it.
  if (s.refs.load(std::memory_order_acquire) == 1) {
    s.refs.store(0, std::memory_order_relaxed);
  } else if (s.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return false;  // revived meanwhile, or copied by another holder
  }
  if (s.state == SlotState::kDuplicate) {
    return_to_reset_locked(id);
  } else {
    s.state = SlotState::kInactive;
    backend_->insert(id, s.hash);
  }
  leave_in_use_locked(keepalive);
  return true;
}

void BlockStore::release_last_reference(BlockId id) noexcept {
  std::shared_ptr<BlockStore> keepalive;
  LockGuard lock(mu_);
  if (drop_reference_locked(id, keepalive)) publish_gauges_locked();
}

void BlockStore::release_immutable_batch(std::span<const BlockId> ids) noexcept {
  std::shared_ptr<BlockStore> keepalive;  // destroyed after the lock is released
  LockGuard lock(mu_);
  bool left_use = false;
  for (const BlockId id : ids) left_use |= drop_reference_locked(id, keepalive);
  // Gauges are levels: one update per call, not per block (STYLE habit 8).
  if (left_use) publish_gauges_locked();
}

std::size_t BlockStore::find_and_revive_locked(std::span<const SequenceHash> hashes,
                                               std::vector<BlockId>& out, bool prefix) {
  // Look every hash up first, then revive: the lookups are independent, so
  // their cache misses overlap; the atomic reference updates of the revives
  // would otherwise stall each lookup behind the previous one.
  // Every lookup is a random line of the index: once the first hash hits,
  // ask for the lines of all the others, so that their misses overlap instead
  // of following one another (a call whose first hash misses asks for none).
  // A scan looks every hash up whatever it finds: it asks for all of them at once.
  const std::size_t first = out.size();
  bool asked = hashes.size() < 2;
  if (!prefix && !asked) {
    for (const auto& h : hashes) table_.prefetch(h.value());
    asked = true;
  }
  for (const auto& h : hashes) {
    const BlockId* it = table_.find(h.value());
    if (!asked && it != nullptr) {
      for (const auto& next : hashes.subspan(1)) table_.prefetch(next.value());
      asked = true;
    }
    if (it == nullptr) {
      if (prefix) break;
      continue;
    }
    if (out.size() == first) out.reserve(first + hashes.size());  // a miss allocates nothing
    prefetch_for_write(&slots_[*it]);
    out.push_back(*it);
  }
  if (out.size() != first) {  // a call that found nothing (a miss) pays nothing for the hint
    hint_removals(*backend_, slots_.data(), std::span(out).subspan(first));
  }
  for (std::size_t i = first; i < out.size(); ++i) revive_locked(out[i]);
  if (out.size() != first) publish_gauges_locked();
  return out.size() - first;
}

std::size_t BlockStore::match(std::span<const SequenceHash> hashes, std::vector<BlockId>& out) {
  std::size_t found = 0;
  {
    LockGuard lock(mu_);
    found = find_and_revive_locked(hashes, out, /*prefix=*/true);
  }
  PoolCounterDelta delta;
  delta.match_hashes_requested = hashes.size();
  delta.match_blocks_returned = found;
  metrics_->add(delta);
  // Feed the frequency tracker with the hits and the first miss.
  touch(hashes, found + 1);
  return found;
}

std::size_t BlockStore::scan(std::span<const SequenceHash> hashes, std::vector<BlockId>& out) {
  std::size_t found = 0;
  {
    LockGuard lock(mu_);
    found = find_and_revive_locked(hashes, out, /*prefix=*/false);
  }
  PoolCounterDelta delta;
  delta.scan_hashes_requested = hashes.size();
  delta.scan_blocks_returned = found;
  metrics_->add(delta);
  return found;
}

void BlockStore::presence(std::span<const SequenceHash> hashes, std::vector<bool>& out) const {
  out.assign(hashes.size(), false);
  LockGuard lock(mu_);
  // An orphaned pool (its manager is gone, blocks still out) holds nothing a
  // caller could match or upgrade, so it answers like an absent tier.
  if (orphaned_) return;
  // Every hash is looked up: ask for all their lines first, so that the misses overlap.
  if (hashes.size() > 1) {
    for (const auto& h : hashes) table_.prefetch(h.value());
  }
  for (std::size_t i = 0; i < hashes.size(); ++i) out[i] = table_.contains(hashes[i].value());
}

std::optional<BlockId> BlockStore::upgrade(BlockId id, std::uint32_t generation,
                                           const SequenceHash& hash) {
  std::optional<BlockId> result;
  {
    LockGuard lock(mu_);
    if (orphaned_) return std::nullopt;
    const Slot& s = slots_[id];
    const bool same =
        s.generation == generation && s.hash == hash &&
        (s.state == SlotState::kActive || s.state == SlotState::kInactive ||
         (s.state == SlotState::kDuplicate && s.refs.load(std::memory_order_relaxed) > 0));
    if (same) {
      revive_locked(id);
      result = id;
    } else if (const BlockId* it = table_.find(hash.value()); it != nullptr) {
      revive_locked(*it);
      result = *it;
    }
    if (result) publish_gauges_locked();
  }
  return result;
}

std::size_t BlockStore::evict_all_inactive() {
  PoolCounterDelta delta;
  {
    LockGuard lock(mu_);
    std::vector<SequenceHash> removed;
    while (const auto id = evict_one_locked()) {
      slots_[*id].generation++;
      reset_.push_back(*id);
      ++delta.evictions;
      if (!listeners_.empty()) removed.push_back(slots_[*id].hash);
    }
    if (!removed.empty()) {
      for (const auto& l : listeners_) l->on_removed(removed);
    }
    publish_gauges_locked();
  }
  metrics_->add(delta);
  return delta.evictions;
}

PoolCounts BlockStore::counts() const {
  LockGuard lock(mu_);
  PoolCounts c;
  c.total = slots_.size();
  c.reset = reset_.size();
  c.inactive = backend_->size();
  c.evictable = backend_->evictable();
  c.in_use = in_use_;
  c.mutable_out = mutable_out_;
  c.immutable_out = in_use_ - mutable_out_;
  return c;
}

std::string BlockStore::audit() const {
  LockGuard lock(mu_);
  std::size_t reset = 0, mut = 0, active = 0, inactive = 0, dup = 0, registered_in_table = 0;
  for (BlockId id = 0; id < slots_.size(); ++id) {
    const Slot& s = slots_[id];
    const auto refs = s.refs.load(std::memory_order_relaxed);
    switch (s.state) {
      case SlotState::kReset:
        ++reset;
        break;
      case SlotState::kMutable:
        ++mut;
        break;
      case SlotState::kActive:
        ++active;
        if (refs == 0) return concat("block ", id, " is in use with no strong reference");
        break;
      case SlotState::kInactive:
        ++inactive;
        if (refs != 0) return concat("inactive block ", id, " has ", refs, " strong references");
        break;
      case SlotState::kDuplicate:
        ++dup;
        break;
    }
    if (s.state == SlotState::kActive || s.state == SlotState::kInactive) {
      const BlockId* it = table_.find(s.hash.value());
      if (it == nullptr || *it != id) {
        return concat("registered block ", id, " is missing from the registry table");
      }
      ++registered_in_table;
    }
  }
  if (registered_in_table != table_.size()) {
    return concat("registry table holds ", table_.size(), " entries but ", registered_in_table,
                  " blocks are registered");
  }
  if (reset != reset_.size())
    return concat("reset pool holds ", reset_.size(), " but ", reset, " blocks are reset");
  if (inactive != backend_->size()) {
    return concat("inactive pool holds ", backend_->size(), " but ", inactive,
                  " blocks are inactive");
  }
  if (mut != mutable_out_) return concat(mut, " mutable blocks but counter says ", mutable_out_);
  if (mut + active + dup != in_use_) {
    return concat(mut + active + dup, " blocks in use but counter says ", in_use_);
  }
  if (reset + inactive + in_use_ != slots_.size()) return "reset + inactive + in use != total";
  return {};
}

void BlockStore::orphan() noexcept {
  LockGuard lock(mu_);
  orphaned_ = true;
  if (in_use_ > 0) keepalive_ = shared_from_this();
}

}  // namespace kvbm::detail
