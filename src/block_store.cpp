#include "kvbm/detail/block_store.h"

#include <algorithm>
#include <numeric>

#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"

namespace kvbm::detail {

namespace {
// Asks for the cache line of a slot that is about to be written.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__GNUC__)
  __builtin_prefetch(p, 1);
#else
  (void)p;
#endif
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
      table_(options.block_count),
      backend_(std::move(options.backend)) {
  KVBM_CHECK(options.block_count > 0, "a block pool needs at least one block");
  KVBM_CHECK(backend_ != nullptr, "a block pool needs an eviction backend");
  KVBM_CHECK(metrics_ != nullptr, "a block pool needs its metrics");
  for (const auto& l : listeners_) KVBM_CHECK(l != nullptr, "a pool listener is null");
  // Free stack popped from the back: block 0 is handed out first.
  reset_.resize(options.block_count);
  for (std::uint32_t i = 0; i < options.block_count; ++i) reset_[i] = options.block_count - 1 - i;
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  return slots_[id].generation;
}

bool BlockStore::allocate(std::uint32_t n, std::vector<BlockId>& out) {
  PoolCounterDelta delta;
  std::vector<EvictedBlock> evicted;  // filled only when a listener wants them
  {
    std::lock_guard lock(mu_);
    if (static_cast<std::size_t>(n) > reset_.size() + backend_->size()) return false;
    const std::size_t from_reset = std::min<std::size_t>(n, reset_.size());
    const std::size_t to_evict = n - from_reset;
    const std::size_t first_evicted = out.size();
    out.reserve(out.size() + n);
    // Evict first: a backend that protects blocks (lineage) may free fewer
    // than it holds; then the evictions are undone and nothing has changed.
    for (std::size_t i = 0; i < to_evict; ++i) {
      const auto victim = evict_one_locked();
      if (!victim) {
        undo_evictions_locked(std::span(out).subspan(first_evicted));
        out.resize(first_evicted);
        return false;
      }
      out.push_back(*victim);
    }
    for (std::size_t i = 0; i < from_reset; ++i) {
      out.push_back(reset_.back());
      reset_.pop_back();
    }
    // Hand out the free blocks first, then the evicted ones (the order the
    // pools were drawn from, as documented).
    std::rotate(out.begin() + static_cast<std::ptrdiff_t>(first_evicted),
                out.begin() + static_cast<std::ptrdiff_t>(first_evicted + to_evict), out.end());
    for (std::size_t i = first_evicted; i < out.size(); ++i) {
      Slot& s = slots_[out[i]];
      s.state = SlotState::kMutable;
      if (i >= first_evicted + from_reset) s.generation++;  // weak handles to it now fail
    }
    if (to_evict > 0 && !listeners_.empty()) {
      evicted.reserve(to_evict);
      std::vector<SequenceHash> hashes;
      hashes.reserve(to_evict);
      for (std::size_t i = first_evicted + from_reset; i < out.size(); ++i) {
        evicted.push_back({out[i], slots_[out[i]].hash});
        hashes.push_back(slots_[out[i]].hash);
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

std::optional<BlockId> BlockStore::evict_one_locked() noexcept {
  const auto victim = backend_->pop_victim();
  if (!victim) return std::nullopt;
  Slot& s = slots_[*victim];
  table_.erase(s.hash.value());
  backend_->on_unregistered(s.hash);
  s.state = SlotState::kReset;
  return victim;
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
  if (in_use_ == 0 && keepalive_) keepalive = std::move(keepalive_);
}

void BlockStore::release_mutable(BlockId id) noexcept {
  std::shared_ptr<BlockStore> keepalive;  // destroyed after the lock is released
  std::lock_guard lock(mu_);
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

RegisterOutcome BlockStore::register_block(BlockId id, const SequenceHash& hash) {
  PoolCounterDelta delta;
  RegisterOutcome outcome{id, false};
  std::shared_ptr<BlockStore> keepalive;
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[id];
    const auto [existing_id, inserted] = table_.try_emplace(hash.value(), id);
    if (inserted) {
      backend_->on_registered(hash);
      for (const auto& l : listeners_) l->on_stored(std::span(&hash, 1));
      s.hash = hash;
      s.state = SlotState::kActive;
      s.refs.store(1, std::memory_order_relaxed);
      --mutable_out_;
      delta.registrations = 1;
    } else if (duplicate_policy_ == DuplicatePolicy::kAllow) {
      s.hash = hash;
      s.state = SlotState::kDuplicate;
      s.refs.store(1, std::memory_order_relaxed);
      --mutable_out_;
      delta.registrations = 1;
      delta.duplicate_blocks = 1;
    } else {
      const BlockId existing = existing_id;
      revive_locked(existing);
      return_to_reset_locked(id);
      --mutable_out_;
      leave_in_use_locked(keepalive);
      outcome = {existing, true};
      delta.registration_dedup = 1;
    }
    publish_gauges_locked();
  }
  metrics_->add(delta);
  if (tracker_) tracker_->touch(hash.value());
  return outcome;
}

void BlockStore::release_last_reference(BlockId id) noexcept {
  std::shared_ptr<BlockStore> keepalive;
  std::lock_guard lock(mu_);
  Slot& s = slots_[id];
  if (s.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;  // revived meanwhile
  if (s.state == SlotState::kDuplicate) {
    return_to_reset_locked(id);
  } else {
    s.state = SlotState::kInactive;
    backend_->insert(id, s.hash);
  }
  leave_in_use_locked(keepalive);
  publish_gauges_locked();
}

std::size_t BlockStore::match(std::span<const SequenceHash> hashes, std::vector<BlockId>& out) {
  std::size_t found = 0;
  {
    std::lock_guard lock(mu_);
    // Look every hash up first, then revive: the lookups are independent, so
    // their cache misses overlap; the atomic reference updates of the revives
    // would otherwise stall each lookup behind the previous one.
    const std::size_t first = out.size();
    for (const auto& h : hashes) {
      const BlockId* it = table_.find(h.value());
      if (it == nullptr) break;
      if (found == 0) out.reserve(out.size() + hashes.size());  // a miss allocates nothing
      prefetch_for_write(&slots_[*it]);
      out.push_back(*it);
      ++found;
    }
    for (std::size_t i = first; i < out.size(); ++i) revive_locked(out[i]);
    if (found != 0) publish_gauges_locked();
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
    std::lock_guard lock(mu_);
    const std::size_t first = out.size();  // lookups first, as in match()
    for (const auto& h : hashes) {
      const BlockId* it = table_.find(h.value());
      if (it == nullptr) continue;
      prefetch_for_write(&slots_[*it]);
      out.push_back(*it);
      ++found;
    }
    for (std::size_t i = first; i < out.size(); ++i) revive_locked(out[i]);
    if (found != 0) publish_gauges_locked();
  }
  PoolCounterDelta delta;
  delta.scan_hashes_requested = hashes.size();
  delta.scan_blocks_returned = found;
  metrics_->add(delta);
  return found;
}

void BlockStore::presence(std::span<const SequenceHash> hashes, std::vector<bool>& out) const {
  out.assign(hashes.size(), false);
  std::lock_guard lock(mu_);
  // An orphaned pool (its manager is gone, blocks still out) holds nothing a
  // caller could match or upgrade, so it answers like an absent tier.
  if (orphaned_) return;
  for (std::size_t i = 0; i < hashes.size(); ++i) out[i] = table_.contains(hashes[i].value());
}

std::optional<BlockId> BlockStore::upgrade(BlockId id, std::uint32_t generation,
                                           const SequenceHash& hash) {
  std::optional<BlockId> result;
  {
    std::lock_guard lock(mu_);
    if (orphaned_) return std::nullopt;
    const Slot& s = slots_[id];
    const bool same = s.generation == generation && s.hash == hash &&
                      (s.state == SlotState::kActive || s.state == SlotState::kInactive ||
                       (s.state == SlotState::kDuplicate &&
                        s.refs.load(std::memory_order_relaxed) > 0));
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
    std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  std::size_t reset = 0, mut = 0, active = 0, inactive = 0, dup = 0, registered_in_table = 0;
  for (BlockId id = 0; id < slots_.size(); ++id) {
    const Slot& s = slots_[id];
    const auto refs = s.refs.load(std::memory_order_relaxed);
    switch (s.state) {
      case SlotState::kReset: ++reset; break;
      case SlotState::kMutable: ++mut; break;
      case SlotState::kActive:
        ++active;
        if (refs == 0) return concat("block ", id, " is in use with no strong reference");
        break;
      case SlotState::kInactive:
        ++inactive;
        if (refs != 0) return concat("inactive block ", id, " has ", refs, " strong references");
        break;
      case SlotState::kDuplicate: ++dup; break;
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
  if (reset != reset_.size()) return concat("reset pool holds ", reset_.size(), " but ", reset, " blocks are reset");
  if (inactive != backend_->size()) {
    return concat("inactive pool holds ", backend_->size(), " but ", inactive, " blocks are inactive");
  }
  if (mut != mutable_out_) return concat(mut, " mutable blocks but counter says ", mutable_out_);
  if (mut + active + dup != in_use_) {
    return concat(mut + active + dup, " blocks in use but counter says ", in_use_);
  }
  if (reset + inactive + in_use_ != slots_.size()) return "reset + inactive + in use != total";
  return {};
}

void BlockStore::orphan() noexcept {
  std::lock_guard lock(mu_);
  orphaned_ = true;
  if (in_use_ > 0) keepalive_ = shared_from_this();
}

}  // namespace kvbm::detail
