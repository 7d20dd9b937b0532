// Multi-threaded stress of one shared BlockManager<G2>.
//
// MixedOps: four workers allocate, stage, register, match, scan, upgrade and
// drop on one small pool. Request handles travel between the workers through
// a mutex-protected queue, so most blocks are dropped (and some registered)
// on another thread than the one that allocated them. Weak references go into
// a shared pool and are upgraded while other workers' allocations evict.
// A fifth thread reads pool_counts() without pause and checks that the counts
// balance (and audits now and then). At the end everything is dropped: the
// audit must pass and every block must be reset or inactive.
//
// WeakUpgradesRaceWithEvictions: registrations, evicting allocations and
// upgrades of the same small set of hashes at full speed; an upgraded block
// must carry the hash it was asked for, however often its slot was reused.
//
// ManagerDestroyedWhileOtherThreadsHoldBlocks: the manager goes away (by
// destruction or by move-assignment) while two threads still hold, copy,
// stage, downgrade and drop its blocks; the store must live exactly until the
// last block is back, and upgrades after the manager is gone must fail.
//
// KVBM_STRESS_SCALE scales the operation counts (sanitizer builds use 0.1);
// KVBM_TEST_SEED fixes the seed (printed as `[stress] seed=...`).

#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "kvbm/block_manager.h"
#include "kvbm/block_registry.h"
#include "kvbm/frequency_tracker.h"
#include "test_util.h"

namespace kvbm {
namespace stress_test {

using test::scaled;
using test::stress_scale;

constexpr std::size_t kWorkers = 4;
constexpr std::size_t kOpsPerWorker = 100'000;  // at scale 1.0
constexpr std::uint32_t kBlockSize = 16;

std::uint64_t master_seed() {
  static const std::uint64_t seed = [] {
    if (const auto env = test::env_test_seed()) return *env;
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

std::string seed_note() {
  return "seed=" + std::to_string(master_seed()) +
         " (rerun with KVBM_TEST_SEED=" + std::to_string(master_seed()) + ")";
}

void announce_seed() {
  std::cout << "[stress] seed=" << master_seed() << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(master_seed()));
}

// Chained sequences sharing prefixes (see random_ops_test.cpp).
std::vector<std::vector<SequenceHash>> make_sequences(std::mt19937_64& rng, std::size_t count) {
  std::vector<std::vector<SequenceHash>> out;
  std::unordered_set<std::uint64_t> used;
  auto fresh = [&] {
    for (;;) {
      const std::uint64_t v = rng();
      if (used.insert(v).second) return v;
    }
  };
  const SequenceHash roots[] = {{fresh(), std::nullopt, 0}, {fresh(), std::nullopt, 0}};
  for (std::size_t s = 0; s < count; ++s) {
    std::vector<SequenceHash> seq;
    if (!out.empty() && rng() % 10 < 7) {
      const auto& base = out[rng() % out.size()];
      seq.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(1 + rng() % base.size()));
    } else {
      seq.push_back(roots[rng() % 2]);
    }
    const std::size_t len = 2 + rng() % 11;
    while (seq.size() < len) {
      const SequenceHash& parent = seq.back();
      seq.emplace_back(fresh(), parent.value(), parent.position() + 1);
    }
    out.push_back(std::move(seq));
  }
  return out;
}

std::shared_ptr<BlockRegistry> make_registry() {
  return BlockRegistry::builder()
      .frequency_tracker(std::make_shared<FrequencyTracker>(512))
      .build();
}

/// The handles of one request, in flight between threads.
struct Bundle {
  std::vector<ImmutableBlock<G2>> imms;
  std::vector<SequenceHash> imm_hashes;  // what imms[i] must carry
  std::vector<CompleteBlock<G2>> completes;
  std::vector<MutableBlock<G2>> mutables;
  std::thread::id from;
  [[nodiscard]] bool empty() const { return imms.empty() && completes.empty() && mutables.empty(); }
};

/// A bounded, mutex-protected queue of bundles.
class Exchange {
 public:
  explicit Exchange(std::size_t cap = 3) : cap_(cap) {}
  /// Returns false (leaving `b` with the caller) when full.
  bool push(Bundle& b) {
    std::lock_guard lock(mu_);
    if (q_.size() >= cap_) return false;
    q_.push_back(std::move(b));
    return true;
  }
  std::optional<Bundle> pop() {
    std::lock_guard lock(mu_);
    if (q_.empty()) return std::nullopt;
    Bundle b = std::move(q_.front());
    q_.pop_front();
    return b;
  }
  void clear() {
    std::deque<Bundle> gone;
    {
      std::lock_guard lock(mu_);
      gone.swap(q_);
    }
    // Dropped here, outside the lock, front to back.
    while (!gone.empty()) gone.pop_front();
  }

 private:
  std::mutex mu_;
  std::deque<Bundle> q_;
  std::size_t cap_;
};

/// A bounded pool of weak references, striped so that adding and picking
/// threads seldom meet on one lock.
class WeakPool {
 public:
  void add(WeakBlock<G2> w, std::uint64_t r) {
    Stripe& s = stripes_[r % kStripes];
    std::lock_guard lock(s.mu);
    if (s.v.size() < 16) {
      s.v.push_back(std::move(w));
    } else {
      s.v[(r / kStripes) % s.v.size()] = std::move(w);
    }
  }
  std::optional<WeakBlock<G2>> pick(std::uint64_t r) {
    Stripe& s = stripes_[r % kStripes];
    std::lock_guard lock(s.mu);
    if (s.v.empty()) return std::nullopt;
    return s.v[(r / kStripes) % s.v.size()];
  }
  void clear() {
    for (auto& s : stripes_) {
      std::lock_guard lock(s.mu);
      s.v.clear();
    }
  }

 private:
  static constexpr std::size_t kStripes = 16;
  struct Stripe {
    std::mutex mu;
    std::vector<WeakBlock<G2>> v;
  };
  Stripe stripes_[kStripes];
};

/// Reads pool_counts() until stopped; every count must balance.
class CountWatcher {
 public:
  CountWatcher(BlockManager<G2>& m, std::size_t total) : m_(m), total_(total) {
    thread_ = std::thread([this] { loop(); });
  }
  CountWatcher(const CountWatcher&) = delete;
  CountWatcher& operator=(const CountWatcher&) = delete;
  ~CountWatcher() { stop(); }
  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] std::size_t reads() const { return reads_.load(); }

 private:
  void loop() {
    std::size_t i = 0;
    // Keep reading until stopped, and at least a few hundred times.
    while (!stop_.load(std::memory_order_relaxed) || i < 200) {
      const PoolCounts c = m_.pool_counts();
      const bool ok = c.balanced() && c.total == total_ && c.evictable <= c.inactive &&
                      c.mutable_out <= c.in_use && c.immutable_out == c.in_use - c.mutable_out;
      if (!ok) {
        ADD_FAILURE() << "unbalanced counts: reset " << c.reset << " inactive " << c.inactive
                      << " evictable " << c.evictable << " in_use " << c.in_use << " mutable "
                      << c.mutable_out << " total " << c.total << "; " << seed_note();
        break;
      }
      if (++i % 64 == 0) {
        const std::string a = m_.audit();
        if (!a.empty()) {
          ADD_FAILURE() << "audit during the run: " << a << "; " << seed_note();
          break;
        }
      }
      reads_.store(i, std::memory_order_relaxed);
      if (i % 16 == 0) std::this_thread::yield();  // let the workers have the lock too
    }
  }

  BlockManager<G2>& m_;
  std::size_t total_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> reads_{0};
  std::thread thread_;
};

struct Stats {
  std::atomic<std::size_t> allocations{0}, allocation_failures{0}, registrations{0};
  std::atomic<std::size_t> cross_thread_drops{0}, cross_thread_registrations{0};
  std::atomic<std::size_t> upgrades{0}, upgrades_ok{0}, match_hits{0}, resets{0};
  std::atomic<bool> failed{false};
};

#define STRESS_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ADD_FAILURE() << "check failed: " #cond " " << __VA_ARGS__ << "; " << seed_note(); \
      stats.failed.store(true);                                                          \
      return;                                                                            \
    }                                                                                    \
  } while (false)

struct MixedConfig {
  EvictionPolicy eviction;
  DuplicatePolicy duplicates;
};

std::string mixed_name(const MixedConfig& c) {
  return std::string(to_string(c.eviction)) +
         (c.duplicates == DuplicatePolicy::kAllow ? "_allow" : "_reject");
}
void PrintTo(const MixedConfig& c, std::ostream* os) { *os << mixed_name(c); }

class StressMixedOps : public ::testing::TestWithParam<MixedConfig> {};

// Drops a bundle on this thread: registers its completes, copies and checks
// its immutables, then releases everything front to back.
void finish_bundle(BlockManager<G2>& m, Bundle& b, std::mt19937_64& rng, Stats& stats) {
  const bool foreign = b.from != std::this_thread::get_id();
  for (auto& c : b.completes) {
    if (rng() % 2 == 0) {
      const SequenceHash h = c.sequence_hash();
      b.imms.push_back(m.register_block(std::move(c)));
      b.imm_hashes.push_back(h);
      stats.registrations.fetch_add(1, std::memory_order_relaxed);
      if (foreign) stats.cross_thread_registrations.fetch_add(1, std::memory_order_relaxed);
    }
  }
  b.completes.clear();
  for (auto& mb : b.mutables) {
    if (rng() % 2 == 0) {
      auto r = std::move(mb).stage(SequenceHash(rng(), std::nullopt, 0), kBlockSize);
      STRESS_CHECK(r.ok(), "stage on another thread");
    }
  }
  b.mutables.clear();
  for (std::size_t i = 0; i < b.imms.size(); ++i) {
    STRESS_CHECK(b.imms[i].sequence_hash() == b.imm_hashes[i], "held block changed its hash");
    STRESS_CHECK(b.imms[i].use_count() >= 1, "held block with no reference");
    if (rng() % 4 == 0) {
      ImmutableBlock<G2> copy = b.imms[i];
      STRESS_CHECK(copy.block_id() == b.imms[i].block_id(), "copy");
    }
  }
  for (auto& imm : b.imms) {
    ImmutableBlock<G2> gone = std::move(imm);
    if (foreign) stats.cross_thread_drops.fetch_add(1, std::memory_order_relaxed);
  }
  b.imms.clear();
  b.imm_hashes.clear();
}

// Puts a bundle into another worker's inbox, so that it is finished on
// another thread. While every other inbox is full, finishes bundles from this
// worker's own inbox (other threads') and yields a few times for room; then
// gives up and finishes `b` here.
void hand_on(BlockManager<G2>& m, std::vector<Exchange>& inboxes, std::size_t self, Bundle& b,
             std::mt19937_64& rng, Stats& stats) {
  for (int patience = 8;;) {
    const std::size_t first = rng();
    for (std::size_t k = 0; k < inboxes.size(); ++k) {
      const std::size_t to = (first + k) % inboxes.size();
      if (to != self && inboxes[to].push(b)) return;
    }
    if (auto other = inboxes[self].pop()) {
      finish_bundle(m, *other, rng, stats);
    } else if (--patience > 0) {
      std::this_thread::yield();
    } else {
      finish_bundle(m, b, rng, stats);
      return;
    }
  }
}

void mixed_worker(BlockManager<G2>& m, const std::vector<std::vector<SequenceHash>>& seqs,
                  std::vector<Exchange>& inboxes, std::size_t self, WeakPool& weaks, Stats& stats,
                  std::uint64_t seed, std::size_t ops) {
  std::mt19937_64 rng(seed);
  const std::size_t total = m.total_blocks();
  for (std::size_t op = 0; op < ops && !stats.failed.load(std::memory_order_relaxed); ++op) {
    const auto r = rng() % 100;
    if (r < 30) {  // a request: match, allocate the rest, stage, register; hand it on
      const auto& seq = seqs[rng() % seqs.size()];
      const std::span<const SequenceHash> prefix(seq.data(), 1 + rng() % seq.size());
      Bundle b;
      b.from = std::this_thread::get_id();
      auto matched = m.match_blocks(prefix);
      STRESS_CHECK(matched.size() <= prefix.size(), "match returned too many");
      for (std::size_t i = 0; i < matched.size(); ++i) {
        STRESS_CHECK(matched[i].sequence_hash() == prefix[i], "match position " << i);
        b.imms.push_back(std::move(matched[i]));
        b.imm_hashes.push_back(prefix[i]);
      }
      stats.match_hits.fetch_add(matched.size(), std::memory_order_relaxed);
      const std::size_t missing = prefix.size() - matched.size();
      if (missing > 0) {
        auto blocks = m.allocate_blocks(missing);
        if (!blocks) {
          stats.allocation_failures.fetch_add(1, std::memory_order_relaxed);
        } else {
          stats.allocations.fetch_add(1, std::memory_order_relaxed);
          for (std::size_t i = 0; i < blocks->size(); ++i) {
            const SequenceHash& h = prefix[matched.size() + i];
            const auto kind = rng() % 20;
            if (kind == 0) {  // left writable: dropped (maybe staged) elsewhere
              b.mutables.push_back(std::move((*blocks)[i]));
              continue;
            }
            auto staged = std::move((*blocks)[i]).stage(h, kBlockSize);
            STRESS_CHECK(staged.ok(), "stage");
            if (kind < 3) {  // registered by whoever finishes the bundle
              b.completes.push_back(std::move(staged).value());
              continue;
            }
            auto imm = m.register_block(std::move(staged).value());
            STRESS_CHECK(imm.sequence_hash() == h, "registered block carries another hash");
            stats.registrations.fetch_add(1, std::memory_order_relaxed);
            b.imms.push_back(std::move(imm));
            b.imm_hashes.push_back(h);
          }
        }
      }
      if (!b.imms.empty()) weaks.add(b.imms[rng() % b.imms.size()].downgrade(), rng());
      hand_on(m, inboxes, self, b, rng, stats);
    } else if (r < 60) {  // finish someone's request (usually another thread's)
      if (auto b = inboxes[self].pop()) {
        if (rng() % 4 == 0 && b->imms.size() > 1) {  // pass half of it on again
          Bundle rest;
          rest.from = b->from;
          const std::size_t half = b->imms.size() / 2;
          for (std::size_t i = half; i < b->imms.size(); ++i) {
            rest.imms.push_back(std::move(b->imms[i]));
            rest.imm_hashes.push_back(b->imm_hashes[i]);
          }
          b->imms.erase(b->imms.begin() + static_cast<std::ptrdiff_t>(half), b->imms.end());
          b->imm_hashes.resize(half);
          hand_on(m, inboxes, self, rest, rng, stats);
        }
        finish_bundle(m, *b, rng, stats);
      }
    } else if (r < 75) {  // upgrade a weak reference while others evict
      if (auto w = weaks.pick(rng())) {
        stats.upgrades.fetch_add(1, std::memory_order_relaxed);
        if (auto got = w->upgrade()) {
          stats.upgrades_ok.fetch_add(1, std::memory_order_relaxed);
          STRESS_CHECK(got->sequence_hash() == w->sequence_hash(),
                       "upgrade returned block " << got->block_id() << " with another hash");
          if (rng() % 2 == 0) {
            Bundle b;
            b.from = std::this_thread::get_id();
            b.imm_hashes.push_back(w->sequence_hash());
            b.imms.push_back(std::move(*got));
            hand_on(m, inboxes, self, b, rng, stats);
          }
        }
      }
    } else if (r < 85) {  // scan random hashes: results in request order, right hashes
      std::vector<SequenceHash> hashes;
      for (std::size_t i = 0, n = 1 + rng() % 8; i < n; ++i) {
        const auto& seq = seqs[rng() % seqs.size()];
        hashes.push_back(seq[rng() % seq.size()]);
      }
      auto got = m.scan_matches(hashes);
      std::size_t j = 0;
      for (const auto& b : got) {
        while (j < hashes.size() && !(hashes[j] == b.sequence_hash())) ++j;
        STRESS_CHECK(j < hashes.size(), "scan returned a hash not asked for, or out of order");
        ++j;
      }
    } else if (r < 95) {  // raw allocation, dropped here or elsewhere
      const std::size_t k = 1 + rng() % std::min<std::size_t>(16, total);
      auto blocks = m.allocate_blocks(k);
      if (!blocks) {
        stats.allocation_failures.fetch_add(1, std::memory_order_relaxed);
      } else {
        stats.allocations.fetch_add(1, std::memory_order_relaxed);
        STRESS_CHECK(blocks->size() == k, "allocate returned " << blocks->size() << " of " << k);
        if (rng() % 2 == 0) {
          Bundle b;
          b.from = std::this_thread::get_id();
          for (auto& mb : *blocks) b.mutables.push_back(std::move(mb));
          hand_on(m, inboxes, self, b, rng, stats);
        }
      }
    } else if (r < 96) {
      m.reset_inactive_pool();
      stats.resets.fetch_add(1, std::memory_order_relaxed);
    } else {
      const PoolCounts c = m.pool_counts();
      STRESS_CHECK(c.balanced(), "counts");
      STRESS_CHECK(m.available_blocks() <= total, "available");
    }
  }
  // Done: finish what others handed over (the test drops any later arrivals).
  while (auto b = inboxes[self].pop()) finish_bundle(m, *b, rng, stats);
}

TEST_P(StressMixedOps, FourThreadsShareOneManager) {
  announce_seed();
  SCOPED_TRACE(seed_note());
  const MixedConfig cfg = GetParam();
  std::mt19937_64 rng(master_seed() ^ (static_cast<std::uint64_t>(cfg.eviction) << 8 |
                                       static_cast<std::uint64_t>(cfg.duplicates)));
  const auto seqs = make_sequences(rng, 24);
  constexpr std::size_t kPool = 64;
  auto m = BlockManager<G2>::builder()
               .block_count(kPool)
               .block_size(kBlockSize)
               .eviction(cfg.eviction)
               .duplicate_policy(cfg.duplicates)
               .registry(make_registry())
               .build();
  std::vector<Exchange> inboxes(kWorkers);  // three bundles each
  WeakPool weaks;
  Stats stats;
  const std::size_t ops = scaled(kOpsPerWorker, 2'000);
  {
    CountWatcher watcher(m, kPool);
    std::vector<std::thread> workers;
    for (std::size_t t = 0; t < kWorkers; ++t) {
      workers.emplace_back(mixed_worker, std::ref(m), std::cref(seqs), std::ref(inboxes), t,
                           std::ref(weaks), std::ref(stats), rng(), ops);
    }
    for (auto& w : workers) w.join();
    watcher.stop();
    std::cout << "[stress] " << mixed_name(cfg) << ": " << kWorkers << "x" << ops
              << " ops, count reads " << watcher.reads() << ", allocations " << stats.allocations
              << " (failed " << stats.allocation_failures << "), registrations "
              << stats.registrations << ", cross-thread drops " << stats.cross_thread_drops
              << ", cross-thread registrations " << stats.cross_thread_registrations
              << ", upgrades " << stats.upgrades_ok << "/" << stats.upgrades << ", match hits "
              << stats.match_hits << std::endl;
  }
  ASSERT_FALSE(stats.failed.load());
  EXPECT_GT(stats.cross_thread_drops.load(), 0u);
  EXPECT_GT(stats.upgrades_ok.load(), 0u);
  EXPECT_GT(stats.allocation_failures.load(), 0u) << "the pool was never exhausted";

  // Everything in flight is dropped: nothing may be in use any more.
  for (auto& inbox : inboxes) inbox.clear();
  weaks.clear();
  EXPECT_EQ(m.audit(), "");
  const PoolCounts c = m.pool_counts();
  EXPECT_TRUE(c.balanced());
  EXPECT_EQ(c.in_use, 0u);
  EXPECT_EQ(c.mutable_out, 0u);
  EXPECT_EQ(c.reset + c.inactive, kPool);
  EXPECT_EQ(m.reset_inactive_pool(), c.inactive);
  EXPECT_EQ(m.pool_counts().reset, kPool);
  EXPECT_EQ(m.audit(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Policies, StressMixedOps,
    ::testing::Values(MixedConfig{EvictionPolicy::kLru, DuplicatePolicy::kAllow},
                      MixedConfig{EvictionPolicy::kLru, DuplicatePolicy::kReject},
                      MixedConfig{EvictionPolicy::kMultiLevelLru, DuplicatePolicy::kAllow},
                      MixedConfig{EvictionPolicy::kMultiLevelLru, DuplicatePolicy::kReject},
                      MixedConfig{EvictionPolicy::kLineage, DuplicatePolicy::kAllow},
                      MixedConfig{EvictionPolicy::kLineage, DuplicatePolicy::kReject}),
    [](const ::testing::TestParamInfo<MixedConfig>& p) { return mixed_name(p.param); });

// Registrations, evicting allocations and upgrades of the same few hashes.
TEST(Stress, WeakUpgradesRaceWithEvictions) {
  announce_seed();
  SCOPED_TRACE(seed_note());
  constexpr std::size_t kPool = 16;
  auto m = BlockManager<G2>::builder()
               .block_count(kPool)
               .block_size(kBlockSize)
               .duplicate_policy(DuplicatePolicy::kAllow)
               .build();
  std::vector<SequenceHash> hashes;
  for (std::uint64_t i = 0; i < 24; ++i) hashes.emplace_back(1000 + i, std::nullopt, 0);
  WeakPool weaks;
  Stats stats;
  const std::size_t ops = scaled(100'000, 2'000);  // upgrades per upgrader
  std::atomic<std::size_t> upgraders_done{0};
  auto running = [&] { return upgraders_done.load() < 2 && !stats.failed.load(); };
  auto registrar = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; running(); ++i) {
      if (i % 32 == 0) std::this_thread::yield();  // no lock hogging on small machines
      auto b = m.allocate_blocks(1 + rng() % 2);
      if (!b) continue;
      for (auto& mb : *b) {
        const SequenceHash& h = hashes[rng() % hashes.size()];
        auto imm = m.register_block(std::move(mb).stage(h, kBlockSize).value());
        STRESS_CHECK(imm.sequence_hash() == h, "registration");
        weaks.add(imm.downgrade(), rng());
      }  // dropped: inactive (or reset for a duplicate)
    }
  };
  auto evictor = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; running(); ++i) {
      if (i % 32 == 0) std::this_thread::yield();
      const std::size_t avail = m.available_blocks();
      if (avail == 0) continue;
      auto b = m.allocate_blocks(1 + rng() % (avail / 2 + 1));  // may fail: others took blocks
      if (b) stats.allocations.fetch_add(1, std::memory_order_relaxed);
    }
  };
  auto upgrader = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < ops && !stats.failed.load();) {
      const auto w = weaks.pick(rng());
      if (!w) {
        std::this_thread::yield();
        continue;
      }
      ++i;
      stats.upgrades.fetch_add(1, std::memory_order_relaxed);
      auto got = w->upgrade();
      if (!got) continue;
      stats.upgrades_ok.fetch_add(1, std::memory_order_relaxed);
      STRESS_CHECK(got->sequence_hash() == w->sequence_hash(),
                   "upgrade of " << w->sequence_hash().value() << " returned block "
                                 << got->block_id() << " holding " << got->sequence_hash().value());
      std::this_thread::yield();  // hold it while the evictor runs
      STRESS_CHECK(got->sequence_hash() == w->sequence_hash(), "hash changed while held");
      STRESS_CHECK(got->use_count() >= 1, "held block with no reference");
    }
    upgraders_done.fetch_add(1);
  };
  std::mt19937_64 rng(master_seed());
  {
    CountWatcher watcher(m, kPool);
    std::vector<std::thread> threads;
    threads.emplace_back(registrar, rng());
    threads.emplace_back(registrar, rng());
    threads.emplace_back(evictor, rng());
    threads.emplace_back(upgrader, rng());
    threads.emplace_back(upgrader, rng());
    for (auto& t : threads) t.join();
    watcher.stop();
    std::cout << "[stress] weak race: upgrades " << stats.upgrades_ok << "/" << stats.upgrades
              << ", evicting allocations " << stats.allocations << ", count reads "
              << watcher.reads() << std::endl;
  }
  ASSERT_FALSE(stats.failed.load());
  EXPECT_GT(stats.upgrades_ok.load(), 0u);
  weaks.clear();
  EXPECT_EQ(m.audit(), "");
  const PoolCounts c = m.pool_counts();
  EXPECT_EQ(c.in_use, 0u);
  EXPECT_EQ(c.reset + c.inactive, kPool);
}

// The manager goes away while two threads still hold its blocks.
TEST(Stress, ManagerDestroyedWhileOtherThreadsHoldBlocks) {
  announce_seed();
  SCOPED_TRACE(seed_note());
  std::mt19937_64 rng(master_seed() ^ 0xD1E);
  const std::size_t rounds = scaled(400, 30);
  const EvictionPolicy policies[] = {EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru,
                                     EvictionPolicy::kLineage};
  Stats stats;
  for (std::size_t round = 0; round < rounds && !stats.failed.load(); ++round) {
    auto metrics = std::make_shared<prometheus::Registry>();
    auto build = [&](std::shared_ptr<prometheus::Registry> reg) {
      return BlockManager<G2>::builder()
          .block_count(32)
          .block_size(kBlockSize)
          .eviction(policies[round % 3])
          .duplicate_policy(round % 2 == 0 ? DuplicatePolicy::kAllow : DuplicatePolicy::kReject)
          .registry(make_registry())
          .metrics_registry(std::move(reg))
          .build();
    };
    std::optional<BlockManager<G2>> m(build(metrics));
    const long base = metrics.use_count();  // ours + the store's

    // Two holders; each holds mutables, completes, its own immutables and
    // copies of the other's, and weak references.
    Bundle held[2];
    std::vector<WeakBlock<G2>> weak[2];
    std::vector<SequenceHash> chain;
    for (std::uint32_t i = 0; i < 12; ++i) {
      chain.push_back(i == 0 ? SequenceHash(rng(), std::nullopt, 0)
                             : SequenceHash(rng(), chain.back().value(), i));
    }
    for (std::size_t h = 0; h < 2; ++h) {
      auto blocks = m->allocate_blocks(10);
      ASSERT_TRUE(blocks.has_value());
      for (std::size_t i = 0; i < blocks->size(); ++i) {
        auto& mb = (*blocks)[i];
        if (i < 2) {
          held[h].mutables.push_back(std::move(mb));
        } else if (i < 4) {
          held[h].completes.push_back(std::move(mb).stage(chain[i], kBlockSize).value());
        } else {
          // Both holders register the same chain: duplicates or deduplication.
          auto imm = m->register_block(std::move(mb).stage(chain[i], kBlockSize).value());
          weak[h].push_back(imm.downgrade());
          held[h].imm_hashes.push_back(chain[i]);
          held[1 - h].imm_hashes.push_back(chain[i]);
          held[1 - h].imms.push_back(imm);  // a copy for the other thread
          held[h].imms.push_back(std::move(imm));
        }
      }
    }
    // held[h].imm_hashes was filled in the order imms were pushed to each.
    for (std::size_t h = 0; h < 2; ++h) {
      ASSERT_EQ(held[h].imms.size(), held[h].imm_hashes.size());
    }

    const int variant = static_cast<int>(round % 3);  // 0: race, 1: drop after, 2: move-assign
    std::latch start(3);
    std::latch manager_gone(1);
    auto holder = [&](std::size_t h, std::uint64_t seed) {
      std::mt19937_64 hr(seed);
      Bundle& b = held[h];
      start.arrive_and_wait();
      if (variant != 0) manager_gone.wait();
      if (variant != 0) {  // the manager is gone: upgrades must fail
        for (const auto& w : weak[h])
          STRESS_CHECK(!w.upgrade().has_value(), "upgrade after destruction");
      }
      while (!b.empty()) {
        switch (hr() % 5) {
          case 0:
            if (!b.mutables.empty()) {
              auto mb = std::move(b.mutables.back());
              b.mutables.pop_back();
              if (hr() % 2 == 0) {  // staging works without the manager
                auto c = std::move(mb).stage(chain[0], kBlockSize);
                STRESS_CHECK(c.ok(), "stage after destruction");
              }
            }
            break;
          case 1:
            if (!b.completes.empty()) {
              auto c = std::move(b.completes.back());
              b.completes.pop_back();
              STRESS_CHECK(c.sequence_hash().position() > 0, "complete hash");
              if (hr() % 2 == 0) {
                auto mb = std::move(c).reset_to_mutable();
              }
            }
            break;
          case 2:
            if (!b.imms.empty()) {
              const std::size_t i = hr() % b.imms.size();
              STRESS_CHECK(b.imms[i].sequence_hash() == b.imm_hashes[i], "hash of held block");
              ImmutableBlock<G2> copy = b.imms[i];
              const WeakBlock<G2> w = copy.downgrade();
              if (auto up = w.upgrade()) {
                STRESS_CHECK(variant == 0, "upgrade succeeded after destruction");
                STRESS_CHECK(up->sequence_hash() == b.imm_hashes[i], "upgrade hash");
              }
            }
            break;
          default:
            if (!b.imms.empty()) {
              auto gone = std::move(b.imms.back());
              b.imms.pop_back();
              b.imm_hashes.pop_back();
            }
            break;
        }
        if (variant == 0 && hr() % 4 == 0) {
          for (const auto& w : weak[h]) {
            if (auto up = w.upgrade())
              STRESS_CHECK(up->sequence_hash() == w.sequence_hash(), "racing upgrade");
          }
        }
      }
    };
    std::thread t0(holder, 0, rng());
    std::thread t1(holder, 1, rng());
    start.arrive_and_wait();
    if (variant == 2) {
      *m = build(std::make_shared<prometheus::Registry>());  // the old store is orphaned
    } else {
      m.reset();
    }
    if (variant != 0) {
      // The holders have not dropped anything yet: the store must still be alive.
      EXPECT_EQ(metrics.use_count(), base) << "store destroyed while its blocks are out";
      manager_gone.count_down();
    }
    t0.join();
    t1.join();
    ASSERT_FALSE(stats.failed.load());
    // The last block is back: the store is gone and weak references are dead.
    EXPECT_EQ(metrics.use_count(), 1) << "store outlived its last block (round " << round << ")";
    for (const auto& ws : weak) {
      for (const auto& w : ws) EXPECT_FALSE(w.upgrade().has_value());
    }
    if (variant == 2) {  // the replacement manager is untouched by all this
      EXPECT_EQ(m->audit(), "");
      EXPECT_EQ(m->pool_counts().reset, 32u);
      auto b = m->allocate_blocks(32);
      EXPECT_TRUE(b.has_value());
    }
  }
}

}  // namespace stress_test
}  // namespace kvbm
