#include "kvbm/eviction/lineage.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "test_util.h"

namespace kvbm {
namespace lineage_test {

SequenceHash root(std::uint64_t v) { return SequenceHash(v, std::nullopt, 0); }
SequenceHash child(std::uint64_t v, const SequenceHash& parent) {
  return SequenceHash(v, parent.value(), parent.position() + 1);
}

// Plays the block store's part: registers blocks, releases them to the
// backend, and unregisters whatever the backend evicts.
class FakeStore {
 public:
  explicit FakeStore(LineageBackend& backend) : b_(backend) {}

  void register_block(BlockId id, const SequenceHash& h) {
    hashes_[id] = h;
    b_.on_registered(h);
  }
  void release(BlockId id) { b_.insert(id, hashes_.at(id)); }
  void match(BlockId id) { b_.remove(id); }
  void unregister(BlockId id) {
    b_.on_unregistered(hashes_.at(id));
    hashes_.erase(id);
  }
  std::optional<BlockId> evict() {
    auto victim = b_.pop_victim();
    if (victim) {
      unregister(*victim);
    }
    return victim;
  }
  std::vector<BlockId> drain() {
    std::vector<BlockId> out;
    while (auto id = evict()) {
      out.push_back(*id);
    }
    return out;
  }

 private:
  LineageBackend& b_;
  std::unordered_map<BlockId, SequenceHash> hashes_;
};

// Chain A <- B <- C and an unrelated leaf X; ids A=0, B=1, C=2, X=3.
struct ChainFixture : ::testing::Test {
  LineageBackend backend{8};
  FakeStore store{backend};
  SequenceHash a = root(0xA);
  SequenceHash b = child(0xB, a);
  SequenceHash c = child(0xC, b);
  SequenceHash x = root(0x10);

  void register_all() {
    store.register_block(0, a);
    store.register_block(1, b);
    store.register_block(2, c);
    store.register_block(3, x);
  }
};

TEST(LineageBackend, RejectsZeroCapacityAndMisuse) {
  EXPECT_THROW(LineageBackend(0), UsageError);
  LineageBackend lb(2);
  EXPECT_EQ(lb.policy(), EvictionPolicy::kLineage);
  lb.insert(0, root(1));
  EXPECT_THROW(lb.insert(0, root(1)), UsageError);
  EXPECT_THROW(lb.insert(2, root(2)), UsageError);
  lb.remove(1);  // absent: no effect
  lb.remove(9);
  EXPECT_EQ(lb.size(), 1U);
}

// The chain is released before X: C is the least recent leaf; each parent it
// frees goes to the front, so the chain unwinds before X goes.
TEST_F(ChainFixture, ChainReleasedBeforeLeafUnwindsFirst) {
  register_all();
  store.release(0);
  store.release(1);
  store.release(2);
  store.release(3);
  EXPECT_EQ(backend.size(), 4U);
  EXPECT_EQ(backend.evictable(), 2U);  // C and X; A and B are parked
  EXPECT_EQ(backend.children_of(a.value()), 1U);

  EXPECT_EQ(store.evict(), 2U);        // C
  EXPECT_EQ(backend.evictable(), 2U);  // B freed, X
  EXPECT_EQ(store.evict(), 1U);        // B, at the front
  EXPECT_EQ(store.evict(), 0U);        // A, at the front
  EXPECT_EQ(store.evict(), 3U);        // X
  EXPECT_EQ(store.evict(), std::nullopt);
  EXPECT_EQ(backend.size(), 0U);
  EXPECT_EQ(backend.evictable(), 0U);
}

TEST_F(ChainFixture, LeafReleasedFirstGoesFirst) {
  register_all();
  store.release(3);
  store.release(0);
  store.release(1);
  store.release(2);
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{3, 2, 1, 0}));
}

// Releasing the chain leaf-first (C, then B, then A) gives the same order.
TEST_F(ChainFixture, ReleaseOrderWithinChainDoesNotMatter) {
  register_all();
  store.release(2);
  store.release(3);
  store.release(1);
  store.release(0);
  EXPECT_EQ(backend.evictable(), 2U);
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{2, 1, 0, 3}));
}

TEST_F(ChainFixture, ParentWithInUseChildIsNeverEvicted) {
  register_all();
  store.release(0);
  store.release(1);
  store.release(3);
  // C stays in use: registered, never released.
  EXPECT_EQ(backend.size(), 3U);
  EXPECT_EQ(backend.evictable(), 1U);
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{3}));
  EXPECT_EQ(backend.size(), 2U);
  EXPECT_EQ(backend.evictable(), 0U);
  EXPECT_EQ(backend.pop_victim(), std::nullopt);

  // Once C is released, the chain can go, leaf first.
  store.release(2);
  EXPECT_EQ(backend.evictable(), 1U);
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{2, 1, 0}));
}

TEST_F(ChainFixture, ChildRegisteredLaterParksAnEvictableParent) {
  store.register_block(0, a);
  store.release(0);
  EXPECT_EQ(backend.evictable(), 1U);
  store.register_block(1, b);  // a new request extends A while A is inactive
  EXPECT_EQ(backend.evictable(), 0U);
  EXPECT_EQ(backend.pop_victim(), std::nullopt);
  store.unregister(1);  // B leaves the tier (e.g. its request was cancelled)
  EXPECT_EQ(backend.evictable(), 1U);
  EXPECT_EQ(store.evict(), 0U);
}

TEST_F(ChainFixture, MatchTakesParkedAndEvictableBlocksBack) {
  register_all();
  for (BlockId id = 0; id < 4; ++id) {
    store.release(id);
  }
  store.match(1);  // parked B matched: back in use, still registered
  EXPECT_EQ(backend.size(), 3U);
  EXPECT_EQ(backend.evictable(), 2U);
  store.match(2);  // evictable C matched
  EXPECT_EQ(backend.size(), 2U);
  EXPECT_EQ(backend.evictable(), 1U);  // X; A is parked under B
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{3}));
  store.release(1);  // B is parked again under the in-use C
  EXPECT_EQ(backend.evictable(), 0U);
  store.release(2);
  EXPECT_EQ(store.drain(), (std::vector<BlockId>{2, 1, 0}));
}

// A parent with two children becomes evictable only after both leave.
TEST(LineageBackend, ParentWaitsForEveryChild) {
  LineageBackend lb(8);
  FakeStore store(lb);
  const SequenceHash p = root(1);
  const SequenceHash c1 = child(2, p);
  const SequenceHash c2 = child(3, p);
  const SequenceHash leaf = root(4);
  store.register_block(0, p);
  store.register_block(1, c1);
  store.register_block(2, c2);
  store.register_block(3, leaf);
  store.release(0);
  store.release(1);
  store.release(3);
  store.release(2);
  EXPECT_EQ(lb.children_of(p.value()), 2U);
  EXPECT_EQ(store.evict(), 1U);  // c1: p still has c2
  EXPECT_EQ(lb.evictable(), 2U);
  EXPECT_EQ(store.evict(), 3U);  // leaf
  EXPECT_EQ(store.evict(), 2U);  // c2: p now childless, to the front
  EXPECT_EQ(lb.children_of(p.value()), 0U);
  EXPECT_EQ(store.evict(), 0U);
}

// A child registered in this tier whose parent was never here (for example
// onboarded on its own) is counted and uncounted without harm.
TEST(LineageBackend, ChildOfAbsentParentIsHarmless) {
  LineageBackend lb(4);
  FakeStore store(lb);
  const SequenceHash orphan = child(7, root(6));
  store.register_block(0, orphan);
  EXPECT_EQ(lb.children_of(6), 1U);
  store.release(0);
  EXPECT_EQ(store.evict(), 0U);
  EXPECT_EQ(lb.children_of(6), 0U);
  lb.on_unregistered(orphan);  // unbalanced extra call: ignored
  EXPECT_EQ(lb.children_of(6), 0U);
}

// Two inactive blocks holding the same value (only one can be registered):
// the copy protects no child and may be evicted; nothing is stranded.
TEST(LineageBackend, DuplicateValueDoesNotStrandBlocks) {
  LineageBackend lb(4);
  const SequenceHash p = root(1);
  const SequenceHash c = child(2, p);
  lb.on_registered(p);
  lb.on_registered(c);
  lb.insert(0, p);  // the registered copy: parked under c
  lb.insert(1, p);  // a copy with the same value
  EXPECT_EQ(lb.evictable(), 1U);
  EXPECT_EQ(lb.pop_victim(), 1U);
  lb.on_unregistered(c);
  EXPECT_EQ(lb.pop_victim(), 0U);
  EXPECT_EQ(lb.size(), 0U);
}

// More distinct parents than the table was sized for: it grows and stays exact.
TEST(LineageBackend, ManyAbsentParentsGrowTheTable) {
  LineageBackend lb(2);
  std::vector<SequenceHash> orphans;
  for (std::uint64_t p = 1; p <= 500; ++p) {
    orphans.push_back(child(p + 1000000, root(p)));
    lb.on_registered(orphans.back());
  }
  for (std::uint64_t p = 1; p <= 500; ++p) {
    ASSERT_EQ(lb.children_of(p), 1U) << p;
  }
  for (std::size_t i = 0; i < orphans.size(); i += 2) {
    lb.on_unregistered(orphans[i]);
  }
  for (std::uint64_t p = 1; p <= 500; ++p) {
    ASSERT_EQ(lb.children_of(p), p % 2 == 0 ? 1U : 0U) << p;
  }
}

// The table against std::unordered_map, with a small key space so probe runs
// wrap around and deletions shift entries back. Prints its seed.
TEST(LineageTable, MatchesReferenceMap) {
  const std::uint64_t seed = test::test_seed64();
  std::mt19937_64 rng(seed);
  detail::LineageTable table(4);
  std::unordered_map<std::uint64_t, std::uint32_t> model;
  for (int step = 0; step < 100000; ++step) {
    const std::uint64_t key = rng() % 40;
    if (rng() % 2 == 0) {
      ++table.find_or_insert(key).children;
      ++model[key];
    } else if (auto* e = table.find(key)) {
      ASSERT_GT(model[key], 0U);
      --e->children;
      table.erase_if_empty(e);
      if (--model[key] == 0) {
        model.erase(key);
      }
    } else {
      ASSERT_EQ(model.count(key), 0U) << "seed " << seed << " step " << step;
    }
    if (step % 97 == 0) {
      ASSERT_EQ(table.size(), model.size()) << "seed " << seed << " step " << step;
      for (std::uint64_t k = 0; k < 40; ++k) {
        const auto* e = table.find(k);
        const auto it = model.find(k);
        ASSERT_EQ(e == nullptr, it == model.end()) << "seed " << seed << " key " << k;
        if (e != nullptr) {
          ASSERT_EQ(e->children, it->second) << "seed " << seed << " key " << k;
        }
      }
    }
  }
}

// Random store traffic over random trees; checks the lineage invariant and
// the evictable count against a model. Prints its seed.
TEST(LineageBackend, NeverEvictsAParentOfARegisteredBlock) {
  const std::uint64_t seed = test::test_seed64();
  std::mt19937_64 rng(seed);
  constexpr BlockId kCapacity = 48;
  LineageBackend lb(kCapacity);

  enum class Slot { kFree, kInUse, kInactive };
  std::vector<Slot> slot(kCapacity, Slot::kFree);
  std::vector<SequenceHash> hash(kCapacity);
  std::unordered_map<std::uint64_t, BlockId> registered;  // value -> id
  std::uint64_t next_value = 1;

  const auto children = [&](std::uint64_t value) {
    int n = 0;
    for (BlockId i = 0; i < kCapacity; ++i) {
      n += slot[i] != Slot::kFree && hash[i].has_parent() && hash[i].parent() == value ? 1 : 0;
    }
    return n;
  };
  const auto model_evictable = [&] {
    std::size_t n = 0;
    for (BlockId i = 0; i < kCapacity; ++i) {
      n += slot[i] == Slot::kInactive && children(hash[i].value()) == 0 ? 1 : 0;
    }
    return n;
  };

  for (int step = 0; step < 20000; ++step) {
    const auto id = static_cast<BlockId>(rng() % kCapacity);
    switch (rng() % 4) {
      case 0: {  // register a new block: a root or a child of a registered one
        if (slot[id] != Slot::kFree) {
          break;
        }
        std::optional<SequenceHash> parent;
        if (!registered.empty() && rng() % 4 != 0) {
          auto it = registered.begin();
          std::advance(it, static_cast<long>(rng() % registered.size()));
          parent = hash[it->second];
        }
        const std::uint64_t v = next_value++;
        hash[id] = parent ? child(v, *parent) : root(v);
        slot[id] = Slot::kInUse;
        registered[v] = id;
        lb.on_registered(hash[id]);
        break;
      }
      case 1:  // release
        if (slot[id] == Slot::kInUse) {
          lb.insert(id, hash[id]);
          slot[id] = Slot::kInactive;
        }
        break;
      case 2:  // match takes it back
        if (slot[id] == Slot::kInactive) {
          lb.remove(id);
          slot[id] = Slot::kInUse;
        }
        break;
      default: {  // evict
        const auto victim = lb.pop_victim();
        if (!victim) {
          ASSERT_EQ(model_evictable(), 0U) << "seed " << seed << " step " << step;
          break;
        }
        ASSERT_EQ(slot[*victim], Slot::kInactive) << "seed " << seed << " step " << step;
        ASSERT_EQ(children(hash[*victim].value()), 0) << "seed " << seed << " step " << step;
        slot[*victim] = Slot::kFree;
        registered.erase(hash[*victim].value());
        lb.on_unregistered(hash[*victim]);
      }
    }
    std::size_t inactive = 0;
    for (const Slot s : slot) {
      inactive += s == Slot::kInactive ? 1 : 0;
    }
    ASSERT_EQ(lb.size(), inactive) << "seed " << seed << " step " << step;
    ASSERT_EQ(lb.evictable(), model_evictable()) << "seed " << seed << " step " << step;
  }
}

}  // namespace lineage_test
}  // namespace kvbm
