// Seeded random operations on one BlockManager<G2>, checked against an exact
// reference model after every operation.
//
// Each configuration (eviction policy x duplicate policy) runs its own stream
// of operations: allocate (succeeding or not), stage, register, the whole
// request flow (match a prefix, allocate the rest, stage and register it),
// drops of every handle kind, copies, downgrade / upgrade, match, scan and
// reset_inactive_pool. The model tracks every block's state, reference count,
// generation and the tier's registry table, and the inactive pool's order for
// all three backends (LRU list, multi-level LRU levels from the same frequency
// tracker, lineage's leaf list with parked parents). After every operation the
// pool's counts must equal the model's; every kDeepCheckEvery operations the
// store's audit() must pass and presence, reference counts and hashes of every
// held handle are compared as well.
//
// Environment: KVBM_TEST_SEED fixes the seed (printed as `[random_ops] seed=...`
// and recorded as the `seed` property); KVBM_STRESS_SCALE scales the number of
// operations (sanitizer builds use 0.1).

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/block_registry.h"
#include "kvbm/error.h"
#include "kvbm/eviction/multi_level_lru.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace random_ops_test {

using test::stress_scale;

/// Operations per configuration at scale 1.0 (six configurations).
constexpr std::size_t kOpsPerConfig = 1'000'000;
/// Full audit, presence and per-handle comparison every this many operations.
constexpr std::size_t kDeepCheckEvery = 1000;

std::uint64_t master_seed() {
  static const std::uint64_t seed = [] {
    if (const auto env = test::env_test_seed()) return *env;
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

struct Config {
  EvictionPolicy eviction;
  DuplicatePolicy duplicates;
  int index;
};

std::string config_name(const Config& c) {
  return std::string(to_string(c.eviction)) +
         (c.duplicates == DuplicatePolicy::kAllow ? "_allow" : "_reject");
}

void PrintTo(const Config& c, std::ostream* os) { *os << config_name(c); }

// ---------------------------------------------------------------------------
// The universe of hashes: a few chained sequences sharing prefixes, so that
// matches hit, registrations collide (duplicates) and lineage has parents.

struct Universe {
  std::vector<std::vector<SequenceHash>> sequences;
  std::vector<SequenceHash> all;  // every distinct hash
};

Universe make_universe(std::mt19937_64& rng) {
  Universe u;
  std::unordered_set<std::uint64_t> used;
  auto fresh = [&] {
    for (;;) {
      const std::uint64_t v = rng();
      if (used.insert(v).second) return v;
    }
  };
  std::vector<SequenceHash> roots;
  for (int i = 0; i < 3; ++i) roots.emplace_back(fresh(), std::nullopt, 0);
  const std::size_t n_seq = 12 + rng() % 16;
  for (std::size_t s = 0; s < n_seq; ++s) {
    std::vector<SequenceHash> seq;
    if (!u.sequences.empty() && rng() % 10 < 7) {
      const auto& base = u.sequences[rng() % u.sequences.size()];
      const std::size_t keep = 1 + rng() % base.size();
      seq.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
    } else {
      seq.push_back(roots[rng() % roots.size()]);
    }
    const std::size_t len = 2 + rng() % 13;
    while (seq.size() < len) {
      const SequenceHash& parent = seq.back();
      seq.emplace_back(fresh(), parent.value(), parent.position() + 1);
    }
    u.sequences.push_back(std::move(seq));
  }
  std::unordered_set<std::uint64_t> seen;
  for (const auto& seq : u.sequences) {
    for (const auto& h : seq) {
      if (seen.insert(h.value()).second) u.all.push_back(h);
    }
  }
  return u;
}

// ---------------------------------------------------------------------------
// Reference model of one pool.

enum class St : std::uint8_t { kReset, kMutable, kActive, kInactive, kDuplicate };

struct ModelBlock {
  St st = St::kReset;
  SequenceHash hash;
  std::uint32_t refs = 0;
  std::uint32_t gen = 0;
};

class Model {
 public:
  Model(std::size_t n, EvictionPolicy eviction, DuplicatePolicy duplicates,
        const FrequencyTracker* tracker)
      : blocks(n),
        eviction_(eviction),
        duplicates_(duplicates),
        tracker_(tracker),
        lists_(eviction == EvictionPolicy::kMultiLevelLru ? MultiLevelLruBackend::kLevels : 1) {
    reset = n;
  }

  std::vector<ModelBlock> blocks;
  std::unordered_map<std::uint64_t, BlockId> primary;  // the registry table
  std::size_t reset = 0, mut = 0, active = 0, inactive = 0, dup = 0;

  [[nodiscard]] std::size_t in_use() const { return mut + active + dup; }
  [[nodiscard]] std::size_t evictable() const {
    return eviction_ == EvictionPolicy::kLineage ? lists_[0].size() : inactive;
  }
  [[nodiscard]] std::optional<BlockId> primary_of(const SequenceHash& h) const {
    const auto it = primary.find(h.value());
    if (it == primary.end()) return std::nullopt;
    return it->second;
  }

  // The block the backend gives up next. Precondition: evictable() > 0.
  [[nodiscard]] BlockId next_victim() const {
    for (const auto& l : lists_) {
      if (!l.empty()) return l.front();
    }
    return ~BlockId{0};
  }

  // Takes `id` out of the reset pool for an allocation (also a block that
  // evict_to_reset() has just evicted).
  void take_reset(BlockId id) {
    blocks[id].st = St::kMutable;
    --reset;
    ++mut;
  }

  // Evicts the next victim into the reset pool (reset_inactive_pool).
  BlockId evict_to_reset() {
    const BlockId id = next_victim();
    evict(id);
    return id;
  }

  void drop_mutable(BlockId id) {
    ModelBlock& b = blocks[id];
    b.st = St::kReset;
    ++b.gen;
    --mut;
    ++reset;
  }

  // Registers mutable `id` under `h`; returns the block the caller holds.
  BlockId register_block(BlockId id, const SequenceHash& h) {
    ModelBlock& b = blocks[id];
    if (const auto existing = primary_of(h)) {
      if (duplicates_ == DuplicatePolicy::kAllow) {
        b.st = St::kDuplicate;
        b.hash = h;
        b.refs = 1;
        --mut;
        ++dup;
        return id;
      }
      revive(*existing);
      drop_mutable(id);
      return *existing;
    }
    primary.emplace(h.value(), id);
    on_registered(h);
    b.st = St::kActive;
    b.hash = h;
    b.refs = 1;
    --mut;
    ++active;
    return id;
  }

  // A match, scan, upgrade or Reject registration takes a strong reference.
  void revive(BlockId id) {
    ModelBlock& b = blocks[id];
    if (b.st == St::kInactive) {
      remove_from_lists(id);
      b.st = St::kActive;
      b.refs = 1;
      --inactive;
      ++active;
    } else {
      ++b.refs;
    }
  }

  void copy_ref(BlockId id) { ++blocks[id].refs; }

  void release_ref(BlockId id) {
    ModelBlock& b = blocks[id];
    if (--b.refs != 0) return;
    if (b.st == St::kDuplicate) {
      b.st = St::kReset;
      ++b.gen;
      --dup;
      ++reset;
      return;
    }
    b.st = St::kInactive;
    --active;
    ++inactive;
    insert_inactive(id);
  }

  // Expected result of WeakBlock::upgrade for a reference taken at `gen`.
  [[nodiscard]] std::optional<BlockId> expected_upgrade(BlockId id, std::uint32_t gen,
                                                        const SequenceHash& h) const {
    if (blocks[id].gen == gen) return id;
    return primary_of(h);
  }

  // Recounts the model from its blocks; returns "" when consistent.
  [[nodiscard]] std::string self_check() const {
    std::size_t r = 0, m = 0, a = 0, i = 0, d = 0;
    for (BlockId id = 0; id < blocks.size(); ++id) {
      const auto& b = blocks[id];
      switch (b.st) {
        case St::kReset:
          ++r;
          break;
        case St::kMutable:
          ++m;
          break;
        case St::kActive:
          ++a;
          break;
        case St::kInactive:
          ++i;
          break;
        case St::kDuplicate:
          ++d;
          break;
      }
      const bool registered = b.st == St::kActive || b.st == St::kInactive;
      if (registered && primary_of(b.hash) != id) return "model: registered block not primary";
      if ((b.st == St::kActive || b.st == St::kDuplicate) && b.refs == 0) {
        return "model: held block with no refs";
      }
    }
    if (r != reset || m != mut || a != active || i != inactive || d != dup) {
      return "model: counters drifted";
    }
    std::size_t listed = 0;
    for (const auto& l : lists_) listed += l.size();
    if (eviction_ != EvictionPolicy::kLineage && listed != inactive) {
      return "model: lists do not hold every inactive block";
    }
    return {};
  }

 private:
  [[nodiscard]] std::size_t level_for(const SequenceHash& h) const {
    const std::uint32_t estimate = tracker_->estimate(h.value());
    std::size_t level = 0;
    const auto& t = MultiLevelLruBackend::kDefaultThresholds;
    while (level < t.size() && estimate >= t[level]) ++level;
    return level;
  }

  [[nodiscard]] bool has_children(std::uint64_t value) const {
    const auto it = children_.find(value);
    return it != children_.end() && it->second > 0;
  }

  void insert_inactive(BlockId id) {
    const SequenceHash& h = blocks[id].hash;
    switch (eviction_) {
      case EvictionPolicy::kLru:
        lists_[0].push_back(id);
        break;
      case EvictionPolicy::kMultiLevelLru:
        lists_[level_for(h)].push_back(id);
        break;
      case EvictionPolicy::kLineage:
        if (!has_children(h.value())) lists_[0].push_back(id);  // else parked
        break;
    }
  }

  // Removes from whichever list holds it; returns false when in none (parked).
  bool remove_from_lists(BlockId id) {
    for (auto& l : lists_) {
      if (const auto it = std::find(l.begin(), l.end(), id); it != l.end()) {
        l.erase(it);
        return true;
      }
    }
    return false;
  }

  void evict(BlockId id) {
    ModelBlock& b = blocks[id];
    remove_from_lists(id);
    primary.erase(b.hash.value());
    on_unregistered(b.hash);
    b.st = St::kReset;
    ++b.gen;
    --inactive;
    ++reset;
  }

  void on_registered(const SequenceHash& h) {
    if (!h.has_parent()) return;
    if (++children_[h.parent()] != 1 || eviction_ != EvictionPolicy::kLineage) return;
    if (const auto it = primary.find(h.parent());
        it != primary.end() && blocks[it->second].st == St::kInactive) {
      remove_from_lists(it->second);  // parked
    }
  }

  void on_unregistered(const SequenceHash& h) {
    if (!h.has_parent()) return;
    const auto c = children_.find(h.parent());
    if (--c->second != 0) return;
    children_.erase(c);
    if (eviction_ != EvictionPolicy::kLineage) return;
    if (const auto it = primary.find(h.parent());
        it != primary.end() && blocks[it->second].st == St::kInactive) {
      lists_[0].insert(lists_[0].begin(), it->second);  // unparked: next victim
    }
  }

  EvictionPolicy eviction_;
  DuplicatePolicy duplicates_;
  const FrequencyTracker* tracker_;
  std::vector<std::vector<BlockId>> lists_;                    // least recent first
  std::unordered_map<std::uint64_t, std::uint32_t> children_;  // registered children per parent
};

// ---------------------------------------------------------------------------
// The runner: one manager, the handles the test holds, the model.

struct HeldWeak {
  WeakBlock<G2> weak;
  std::uint32_t gen;  // the block's generation when downgraded (per the model)
};

template <class V>
auto take_at(V& v, std::size_t i) {
  auto x = std::move(v[i]);
  if (i + 1 != v.size()) v[i] = std::move(v.back());
  v.pop_back();
  return x;
}

class Runner {
 public:
  Runner(const Config& config, std::uint64_t seed)
      : config_(config),
        seed_(seed),
        rng_(splitmix(seed ^ (0x5EED0000ULL + static_cast<std::uint64_t>(config.index)))),
        universe_(make_universe(rng_)),
        tracker_(std::make_shared<FrequencyTracker>(256)),
        manager_(BlockManager<G2>::builder()
                     .block_count(64 + rng_() % 193)
                     .block_size(16)
                     .eviction(config.eviction)
                     .duplicate_policy(config.duplicates)
                     .registry(BlockRegistry::builder().frequency_tracker(tracker_).build())
                     .build()),
        n_(manager_.total_blocks()),
        model_(n_, config.eviction, config.duplicates, tracker_.get()),
        stamp_(n_, 0),
        was_reset_(n_, 0) {}

  void run(std::size_t ops) {
    std::cout << "[random_ops] config=" << config_name(config_) << " blocks=" << n_
              << " hashes=" << universe_.all.size() << " ops=" << ops << std::endl;
    ASSERT_NO_FATAL_FAILURE(check_counts());
    for (op_ = 0; op_ < ops; ++op_) {
      step();
      if (::testing::Test::HasFailure()) return;
      check_counts();
      if (::testing::Test::HasFailure()) return;
      if (op_ % kDeepCheckEvery == kDeepCheckEvery - 1) {
        deep_check();
        if (::testing::Test::HasFailure()) return;
      }
    }
    op_name_ = "final drop";
    deep_check();
    // Drop everything: every block must end reset or inactive.
    while (!imms_.empty()) drop_immutable(imms_.size() - 1);
    while (!completes_.empty()) drop_complete(completes_.size() - 1);
    while (!mutables_.empty()) drop_mutable(mutables_.size() - 1);
    weaks_.clear();
    check_counts();
    deep_check();
    const auto c = manager_.pool_counts();
    EXPECT_EQ(c.in_use, 0u) << ctx();
    EXPECT_EQ(c.reset + c.inactive, n_) << ctx();
    EXPECT_EQ(manager_.reset_inactive_pool(), c.inactive) << ctx();
    EXPECT_EQ(manager_.pool_counts().reset, n_) << ctx();
    EXPECT_EQ(manager_.audit(), "") << ctx();
    std::cout << "[random_ops] config=" << config_name(config_) << " allocations=" << allocs_ok_
              << " failed=" << allocs_failed_ << " evictions=" << evictions_
              << " match_hits=" << match_hits_ << " duplicates=" << dup_registrations_
              << " dedups=" << dedups_ << " upgrades=" << upgrades_ok_ << "/" << upgrades_
              << std::endl;
    EXPECT_GT(allocs_failed_, 0u) << "the run never exhausted the pool; " << ctx();
    EXPECT_GT(evictions_, 0u) << "the run never evicted; " << ctx();
    EXPECT_GT(match_hits_, 0u) << ctx();
  }

 private:
  std::string ctx() const {
    std::ostringstream o;
    o << "[seed=" << seed_ << " (rerun with KVBM_TEST_SEED=" << seed_
      << ") config=" << config_name(config_) << " op#" << op_ << " " << op_name_ << "]";
    return o.str();
  }

  std::size_t uniform(std::size_t lo, std::size_t hi) {  // inclusive
    return lo + static_cast<std::size_t>(rng_() % (hi - lo + 1));
  }
  bool chance(unsigned percent) { return rng_() % 100 < percent; }
  const SequenceHash& any_hash() { return universe_.all[rng_() % universe_.all.size()]; }
  std::span<const SequenceHash> random_prefix() {
    const auto& seq = universe_.sequences[rng_() % universe_.sequences.size()];
    return {seq.data(), uniform(1, seq.size())};
  }
  [[nodiscard]] std::size_t held() const {
    return mutables_.size() + completes_.size() + imms_.size();
  }

  void step() {
    // Keep the pool under pressure without letting the test hold everything.
    if (held() > n_ * 3 / 4 && chance(70)) {
      op_name_ = "drop (pressure)";
      const auto r = rng_() % 4;
      if (r == 0 && !mutables_.empty()) return drop_mutable(rng_() % mutables_.size());
      if (r == 1 && !completes_.empty()) return drop_complete(rng_() % completes_.size());
      if (!imms_.empty()) return drop_immutable_batch(uniform(1, 8));
    }
    const auto r = rng_() % 1000;
    if (r < 110) return allocate(uniform(1, 8));
    if (r < 130) return allocate(uniform(1, n_));
    if (r < 132) return allocate_misuse();
    if (r < 220) return stage(true);
    if (r < 230) return stage(false);
    if (r < 320) return register_one();
    if (r < 340) return reset_to_mutable();
    if (r < 460) return request();
    if (r < 510) return mutables_.empty() ? void() : drop_mutable(rng_() % mutables_.size());
    if (r < 540) return completes_.empty() ? void() : drop_complete(rng_() % completes_.size());
    if (r < 680) return imms_.empty() ? void() : drop_immutable(rng_() % imms_.size());
    if (r < 720) return drop_immutable_batch(uniform(1, 8));
    if (r < 770) return copy_immutable();
    if (r < 790) return assign_immutable(true);
    if (r < 800) return assign_immutable(false);
    if (r < 840) return downgrade();
    if (r < 900) return upgrade();
    if (r < 910) return weaks_.empty() ? void() : (void)take_at(weaks_, rng_() % weaks_.size());
    if (r < 960) return match(random_prefix());
    if (r < 975) return match_scattered();
    if (r < 997) return scan();
    return reset_inactive();
  }

  // ---- checks -------------------------------------------------------------

  void check_counts() {
    const PoolCounts c = manager_.pool_counts();
    ASSERT_TRUE(c.balanced()) << ctx();
    ASSERT_EQ(c.total, n_) << ctx();
    ASSERT_EQ(c.reset, model_.reset) << ctx();
    ASSERT_EQ(c.inactive, model_.inactive) << ctx();
    ASSERT_EQ(c.evictable, model_.evictable()) << ctx();
    ASSERT_EQ(c.in_use, model_.in_use()) << ctx();
    ASSERT_EQ(c.mutable_out, model_.mut) << ctx();
    ASSERT_EQ(c.immutable_out, model_.active + model_.dup) << ctx();
    // What the test holds, counted from its handles alone.
    ++stamp_epoch_;
    std::size_t distinct = 0;
    for (const auto& b : imms_) {
      auto& s = stamp_[b.block_id()];
      if (s != stamp_epoch_) {
        s = stamp_epoch_;
        ++distinct;
      }
    }
    ASSERT_EQ(c.mutable_out, mutables_.size() + completes_.size()) << ctx();
    ASSERT_EQ(c.in_use, mutables_.size() + completes_.size() + distinct) << ctx();
    ASSERT_EQ(manager_.available_blocks(), c.reset + c.evictable) << ctx();
    if (!imms_.empty()) {  // one random handle in full
      const auto& b = imms_[rng_() % imms_.size()];
      const auto& mb = model_.blocks[b.block_id()];
      ASSERT_TRUE(mb.st == St::kActive || mb.st == St::kDuplicate) << ctx();
      ASSERT_EQ(b.sequence_hash(), mb.hash) << ctx();
      ASSERT_EQ(b.use_count(), mb.refs) << ctx();
    }
  }

  void check_presence() {
    const auto present = manager_.registry()->presence<G2>(universe_.all);
    for (std::size_t i = 0; i < universe_.all.size(); ++i) {
      ASSERT_EQ(present[i], model_.primary_of(universe_.all[i]).has_value())
          << "presence of hash " << universe_.all[i].value() << " " << ctx();
    }
  }

  void deep_check() {
    ASSERT_EQ(manager_.audit(), "") << ctx();
    ASSERT_EQ(model_.self_check(), "") << ctx();
    check_presence();
    if (::testing::Test::HasFailure()) return;
    std::unordered_map<BlockId, std::uint32_t> handles;
    for (const auto& b : imms_) {
      ++handles[b.block_id()];
      ASSERT_EQ(b.sequence_hash(), model_.blocks[b.block_id()].hash) << ctx();
    }
    for (const auto& [id, count] : handles) {
      ASSERT_EQ(model_.blocks[id].refs, count) << "block " << id << " " << ctx();
    }
    for (const auto& m : mutables_)
      ASSERT_EQ(model_.blocks[m.block_id()].st, St::kMutable) << ctx();
    for (const auto& c : completes_) {
      ASSERT_EQ(model_.blocks[c.block_id()].st, St::kMutable) << ctx();
    }
  }

  // ---- operations ---------------------------------------------------------

  // Allocates k blocks, checking success, the ids and the evictions against the
  // model; returns the blocks (also on failure: nullopt). The model evicts
  // first, in its backend's order; under lineage an eviction can make a parent
  // evictable, and when the chain runs dry before k blocks are found the
  // allocation fails and must change nothing, eviction order included.
  std::optional<std::vector<MutableBlock<G2>>> allocate_checked(std::size_t k) {
    const PoolCounts before = manager_.pool_counts();
    for (BlockId id = 0; id < n_; ++id) was_reset_[id] = model_.blocks[id].st == St::kReset;
    const std::size_t from_reset = std::min(k, model_.reset);
    const std::size_t to_evict = k - from_reset;
    std::optional<Model> saved;
    if (to_evict > model_.evictable()) saved = model_;  // the chain may fall short
    std::vector<BlockId> victims;
    bool expect_ok = true;
    for (std::size_t i = 0; i < to_evict; ++i) {
      if (model_.evictable() == 0) {
        expect_ok = false;
        break;
      }
      victims.push_back(model_.evict_to_reset());
    }
    if (!expect_ok) model_ = std::move(*saved);

    // One block at a time goes through allocate_block() half the time: it
    // must take exactly the block allocate_blocks(1) would.
    std::optional<std::vector<MutableBlock<G2>>> got;
    if (k == 1 && chance(50)) {
      if (auto one = manager_.allocate_block()) {
        got.emplace();
        got->push_back(std::move(*one));
      }
    } else {
      got = manager_.allocate_blocks(k);
    }
    EXPECT_EQ(got.has_value(), expect_ok)
        << "allocate(" << k << ") with reset=" << before.reset << " inactive=" << before.inactive
        << " evictable=" << before.evictable << " " << ctx();
    if (!got || !expect_ok) {
      ++allocs_failed_;
      const PoolCounts after = manager_.pool_counts();
      EXPECT_EQ(after.reset, before.reset) << ctx();
      EXPECT_EQ(after.inactive, before.inactive) << ctx();
      EXPECT_EQ(after.evictable, before.evictable) << ctx();
      EXPECT_EQ(after.in_use, before.in_use) << ctx();
      if (before.inactive != 0) check_presence();
      return got;
    }
    ++allocs_ok_;
    evictions_ += victims.size();
    EXPECT_EQ(got->size(), k) << ctx();
    // Free blocks and victims may come in either order; the victims must be
    // exactly the model's, in the model's eviction order.
    std::size_t v = 0;
    for (std::size_t i = 0; i < got->size(); ++i) {
      const BlockId id = (*got)[i].block_id();
      if (v < victims.size() && id == victims[v]) {
        ++v;
      } else {
        EXPECT_TRUE(was_reset_[id] && model_.blocks[id].st == St::kReset)
            << "allocate(" << k << ") returned block " << id << " at " << i
            << ": neither free nor the next victim "
            << (v < victims.size() ? std::to_string(victims[v]) : std::string("(none left)")) << " "
            << ctx();
        if (::testing::Test::HasFailure()) return got;
      }
      model_.take_reset(id);  // victims are reset in the model until taken
    }
    EXPECT_EQ(v, victims.size()) << "allocate(" << k << ") evicted other blocks than the model "
                                 << ctx();
    return got;
  }

  void allocate(std::size_t k) {
    op_name_ = "allocate";
    auto got = allocate_checked(k);
    if (!got || ::testing::Test::HasFailure()) return;
    for (auto& b : *got) mutables_.push_back(std::move(b));
  }

  void allocate_misuse() {
    op_name_ = "allocate misuse";
    const PoolCounts before = manager_.pool_counts();
    const auto none = manager_.allocate_blocks(0);
    EXPECT_TRUE(none.has_value() && none->empty()) << ctx();
    EXPECT_THROW((void)manager_.allocate_blocks(n_ + 1), UsageError) << ctx();
    const PoolCounts after = manager_.pool_counts();
    EXPECT_EQ(after.reset, before.reset) << ctx();
    EXPECT_EQ(after.in_use, before.in_use) << ctx();
  }

  void stage(bool valid_size) {
    op_name_ = valid_size ? "stage" : "stage (bad size)";
    if (mutables_.empty()) return;
    auto m = take_at(mutables_, rng_() % mutables_.size());
    const BlockId id = m.block_id();
    const SequenceHash h = any_hash();
    auto r =
        std::move(m).stage(h, valid_size ? 16u : 15u + 2 * static_cast<std::uint32_t>(rng_() % 2));
    ASSERT_EQ(r.ok(), valid_size) << ctx();
    if (!r.ok()) {
      auto err = std::move(r).error();
      ASSERT_TRUE(err.block.valid()) << ctx();
      ASSERT_EQ(err.block.block_id(), id) << ctx();
      ASSERT_FALSE(err.reason.empty()) << ctx();
      mutables_.push_back(std::move(err.block));
      return;
    }
    auto c = std::move(r).value();
    ASSERT_EQ(c.block_id(), id) << ctx();
    ASSERT_EQ(c.sequence_hash(), h) << ctx();
    completes_.push_back(std::move(c));
  }

  // Registers a complete block, checking the outcome against the model.
  void register_checked(CompleteBlock<G2> c) {
    const BlockId id = c.block_id();
    const SequenceHash h = c.sequence_hash();
    const bool was_present = model_.primary_of(h).has_value();
    const BlockId expected = model_.register_block(id, h);
    ImmutableBlock<G2> b = manager_.register_block(std::move(c));
    EXPECT_FALSE(c.valid()) << ctx();  // NOLINT(bugprone-use-after-move)
    ASSERT_EQ(b.block_id(), expected) << "register of hash " << h.value() << " " << ctx();
    ASSERT_EQ(b.sequence_hash(), h) << ctx();
    if (was_present) {
      (config_.duplicates == DuplicatePolicy::kAllow ? dup_registrations_ : dedups_)++;
    }
    imms_.push_back(std::move(b));
  }

  void register_one() {
    op_name_ = "register";
    if (completes_.empty()) return;
    register_checked(take_at(completes_, rng_() % completes_.size()));
  }

  void reset_to_mutable() {
    op_name_ = "reset_to_mutable";
    if (completes_.empty()) return;
    auto c = take_at(completes_, rng_() % completes_.size());
    const BlockId id = c.block_id();
    auto m = std::move(c).reset_to_mutable();
    ASSERT_FALSE(c.valid()) << ctx();  // NOLINT(bugprone-use-after-move)
    ASSERT_EQ(m.block_id(), id) << ctx();
    mutables_.push_back(std::move(m));
  }

  // Match `hashes`, comparing with the model; appends the handles to imms_.
  std::size_t match_checked(std::span<const SequenceHash> hashes) {
    std::vector<BlockId> expected;
    for (const auto& h : hashes) {
      const auto p = model_.primary_of(h);
      if (!p) break;
      expected.push_back(*p);
    }
    auto got = manager_.match_blocks(hashes);
    for (const BlockId id : expected) model_.revive(id);
    EXPECT_EQ(got.size(), expected.size()) << "match of " << hashes.size() << " hashes " << ctx();
    for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i) {
      EXPECT_EQ(got[i].block_id(), expected[i]) << "match position " << i << " " << ctx();
      EXPECT_EQ(got[i].sequence_hash(), hashes[i]) << "match position " << i << " " << ctx();
    }
    match_hits_ += got.size();
    for (auto& b : got) imms_.push_back(std::move(b));
    return expected.size();
  }

  void match(std::span<const SequenceHash> hashes) {
    op_name_ = "match";
    match_checked(hashes);
  }

  void match_scattered() {
    op_name_ = "match (not a chain)";
    std::vector<SequenceHash> hashes(uniform(1, 6));
    for (auto& h : hashes) h = any_hash();
    match_checked(hashes);
  }

  void scan() {
    op_name_ = "scan";
    std::vector<SequenceHash> hashes(uniform(1, 10));
    for (auto& h : hashes) h = any_hash();
    std::vector<std::pair<BlockId, SequenceHash>> expected;
    for (const auto& h : hashes) {
      if (const auto p = model_.primary_of(h)) expected.emplace_back(*p, h);
    }
    auto got = manager_.scan_matches(hashes);
    for (const auto& e : expected) model_.revive(e.first);
    ASSERT_EQ(got.size(), expected.size()) << ctx();
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].block_id(), expected[i].first) << ctx();
      ASSERT_EQ(got[i].sequence_hash(), expected[i].second) << ctx();
    }
    for (auto& b : got) imms_.push_back(std::move(b));
  }

  // A request: match a prefix, allocate what is missing, stage and register it.
  void request() {
    op_name_ = "request";
    const auto prefix = random_prefix();
    const std::size_t hits = match_checked(prefix);
    if (::testing::Test::HasFailure() || hits == prefix.size()) return;
    op_name_ = "request (allocate)";
    auto blocks = allocate_checked(prefix.size() - hits);
    if (!blocks || ::testing::Test::HasFailure()) return;
    op_name_ = "request (register)";
    std::vector<CompleteBlock<G2>> staged;
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      auto r = std::move((*blocks)[i]).stage(prefix[hits + i], manager_.block_size());
      ASSERT_TRUE(r.ok()) << ctx();
      staged.push_back(std::move(r).value());
    }
    if (chance(50)) {
      for (auto& c : staged) {
        register_checked(std::move(c));
        if (::testing::Test::HasFatalFailure()) return;
      }
      return;
    }
    // The batch form: registers in order, like the loop above.
    std::vector<BlockId> expected;
    for (const auto& c : staged) {
      const bool was_present = model_.primary_of(c.sequence_hash()).has_value();
      expected.push_back(model_.register_block(c.block_id(), c.sequence_hash()));
      if (was_present)
        (config_.duplicates == DuplicatePolicy::kAllow ? dup_registrations_ : dedups_)++;
    }
    auto got = manager_.register_blocks(std::move(staged));
    ASSERT_EQ(got.size(), expected.size()) << ctx();
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].block_id(), expected[i]) << ctx();
      ASSERT_EQ(got[i].sequence_hash(), prefix[hits + i]) << ctx();
      imms_.push_back(std::move(got[i]));
    }
  }

  void drop_mutable(std::size_t i) {
    op_name_ = "drop mutable";
    auto m = take_at(mutables_, i);
    model_.drop_mutable(m.block_id());
  }

  void drop_complete(std::size_t i) {
    op_name_ = "drop complete";
    auto c = take_at(completes_, i);
    model_.drop_mutable(c.block_id());
  }

  void drop_immutable(std::size_t i) {
    op_name_ = "drop immutable";
    auto b = take_at(imms_, i);
    const BlockId id = b.block_id();
    { auto gone = std::move(b); }
    EXPECT_FALSE(b.valid()) << ctx();  // NOLINT(bugprone-use-after-move)
    model_.release_ref(id);
  }

  // Drops up to k handles taken from the back, oldest first (the order a
  // request releases its prefix).
  void drop_immutable_batch(std::size_t k) {
    op_name_ = "drop immutable batch";
    k = std::min(k, imms_.size());
    const std::size_t start = imms_.size() - k;
    for (std::size_t i = start; i < imms_.size(); ++i) {
      const BlockId id = imms_[i].block_id();
      { auto gone = std::move(imms_[i]); }
      model_.release_ref(id);
    }
    imms_.erase(imms_.begin() + static_cast<std::ptrdiff_t>(start), imms_.end());
  }

  void copy_immutable() {
    op_name_ = "copy immutable";
    if (imms_.empty() || imms_.size() > 3 * n_) return;
    const std::size_t i = rng_() % imms_.size();
    ImmutableBlock<G2> copy = imms_[i];
    model_.copy_ref(copy.block_id());
    ASSERT_TRUE(copy == imms_[i]) << ctx();
    ASSERT_EQ(copy.use_count(), model_.blocks[copy.block_id()].refs) << ctx();
    imms_.push_back(std::move(copy));
  }

  // imms_[a] = imms_[b], by copy or by move.
  void assign_immutable(bool by_copy) {
    op_name_ = by_copy ? "copy-assign immutable" : "move-assign immutable";
    if (imms_.size() < 2) return;
    const std::size_t a = rng_() % imms_.size();
    const std::size_t b = rng_() % imms_.size();
    const BlockId old_a = imms_[a].block_id();
    const BlockId id_b = imms_[b].block_id();
    if (by_copy) {
      imms_[a] = imms_[b];
      if (a != b) {
        model_.copy_ref(id_b);
        model_.release_ref(old_a);
      }
      ASSERT_EQ(imms_[a].block_id(), id_b) << ctx();
      return;
    }
    if (a == b) return;
    imms_[a] = std::move(imms_[b]);
    model_.release_ref(old_a);
    ASSERT_FALSE(imms_[b].valid()) << ctx();
    ASSERT_EQ(imms_[a].block_id(), id_b) << ctx();
    (void)take_at(imms_, b);  // the moved-from handle: dropping it does nothing
  }

  void downgrade() {
    op_name_ = "downgrade";
    if (imms_.empty()) return;
    const auto& b = imms_[rng_() % imms_.size()];
    HeldWeak w{b.downgrade(), model_.blocks[b.block_id()].gen};
    ASSERT_EQ(w.weak.block_id(), b.block_id()) << ctx();
    ASSERT_EQ(w.weak.sequence_hash(), b.sequence_hash()) << ctx();
    if (weaks_.size() < 64) {
      weaks_.push_back(std::move(w));
    } else {
      weaks_[rng_() % weaks_.size()] = std::move(w);
    }
  }

  void upgrade() {
    op_name_ = "upgrade";
    if (weaks_.empty()) return;
    const HeldWeak& w = weaks_[rng_() % weaks_.size()];
    const auto expected = model_.expected_upgrade(w.weak.block_id(), w.gen, w.weak.sequence_hash());
    auto got = w.weak.upgrade();
    ++upgrades_;
    ASSERT_EQ(got.has_value(), expected.has_value())
        << "upgrade of block " << w.weak.block_id() << " " << ctx();
    if (!got) return;
    ++upgrades_ok_;
    model_.revive(*expected);
    ASSERT_EQ(got->block_id(), *expected) << ctx();
    ASSERT_EQ(got->sequence_hash(), w.weak.sequence_hash()) << ctx();
    imms_.push_back(std::move(*got));
  }

  void reset_inactive() {
    op_name_ = "reset_inactive_pool";
    std::size_t expected = 0;
    while (model_.evictable() > 0) {
      (void)model_.evict_to_reset();
      ++expected;
    }
    ASSERT_EQ(manager_.reset_inactive_pool(), expected) << ctx();
    evictions_ += expected;
  }

  Config config_;
  std::uint64_t seed_;
  std::mt19937_64 rng_;
  Universe universe_;
  std::shared_ptr<FrequencyTracker> tracker_;
  BlockManager<G2> manager_;
  std::size_t n_;
  Model model_;

  std::vector<MutableBlock<G2>> mutables_;
  std::vector<CompleteBlock<G2>> completes_;
  std::vector<ImmutableBlock<G2>> imms_;
  std::vector<HeldWeak> weaks_;

  std::vector<std::uint64_t> stamp_;
  std::vector<std::uint8_t> was_reset_;  // per block: free before the current allocation
  std::uint64_t stamp_epoch_ = 0;
  std::size_t op_ = 0;
  const char* op_name_ = "start";
  std::size_t allocs_ok_ = 0, allocs_failed_ = 0, evictions_ = 0, match_hits_ = 0;
  std::size_t dup_registrations_ = 0, dedups_ = 0, upgrades_ = 0, upgrades_ok_ = 0;
};

// The case the random run found: a lineage allocation that evicts leaves and
// then runs out of evictable blocks must put them back in their old order.
TEST(RandomOpsRegression, FailedLineageAllocationKeepsEvictionOrder) {
  auto m = BlockManager<G2>::builder().block_count(4).block_size(16).with_lineage_backend().build();
  const SequenceHash x(101, std::nullopt, 0), y(102, std::nullopt, 0);
  const SequenceHash a(103, std::nullopt, 0), b(104, 103, 1);
  auto reg = [&](const SequenceHash& h, MutableBlock<G2> blk) {
    return m.register_block(std::move(blk).stage(h, 16).value());
  };
  auto blocks = m.allocate_blocks(4).value();
  ImmutableBlock<G2> bx = reg(x, std::move(blocks[0]));
  ImmutableBlock<G2> by = reg(y, std::move(blocks[1]));
  ImmutableBlock<G2> ba = reg(a, std::move(blocks[2]));
  const ImmutableBlock<G2> held_b = reg(b, std::move(blocks[3]));  // pins a
  { auto gone = std::move(bx); }  // x least recent, then y; a is parked behind b
  { auto gone = std::move(by); }
  { auto gone = std::move(ba); }
  ASSERT_EQ(m.pool_counts().inactive, 3u);
  ASSERT_EQ(m.pool_counts().evictable, 2u);
  EXPECT_FALSE(m.allocate_blocks(3).has_value());  // evicts x and y, then runs dry
  EXPECT_EQ(m.pool_counts().evictable, 2u);
  EXPECT_EQ(m.audit(), "");
  auto one = m.allocate_blocks(1);  // must still take the least recent leaf: x
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(m.registry()->is_present<G2>(x));
  EXPECT_TRUE(m.registry()->is_present<G2>(y));
  EXPECT_TRUE(m.registry()->is_present<G2>(a));
}

class RandomOps : public ::testing::TestWithParam<Config> {};

TEST_P(RandomOps, MatchesReferenceModel) {
  const std::uint64_t seed = master_seed();
  std::cout << "[random_ops] seed=" << seed << std::endl;
  RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE("seed=" + std::to_string(seed) +
               " (rerun with KVBM_TEST_SEED=" + std::to_string(seed) + ")");
  const auto ops = std::max<std::size_t>(
      2 * kDeepCheckEvery,
      static_cast<std::size_t>(static_cast<double>(kOpsPerConfig) * stress_scale()));
  Runner runner(GetParam(), seed);
  runner.run(ops);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, RandomOps,
    ::testing::Values(Config{EvictionPolicy::kLru, DuplicatePolicy::kAllow, 0},
                      Config{EvictionPolicy::kLru, DuplicatePolicy::kReject, 1},
                      Config{EvictionPolicy::kMultiLevelLru, DuplicatePolicy::kAllow, 2},
                      Config{EvictionPolicy::kMultiLevelLru, DuplicatePolicy::kReject, 3},
                      Config{EvictionPolicy::kLineage, DuplicatePolicy::kAllow, 4},
                      Config{EvictionPolicy::kLineage, DuplicatePolicy::kReject, 5}),
    [](const ::testing::TestParamInfo<Config>& p) { return config_name(p.param); });

}  // namespace random_ops_test
}  // namespace kvbm
