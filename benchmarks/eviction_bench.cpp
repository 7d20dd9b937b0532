// Eviction backends, per operation, beside a std::list + std::unordered_map
// LRU (the textbook design) as the baseline, and the frequency sketch beside
// a bare std::unordered_map counter.
//
// Each iteration of the churn benchmarks is one insert, one remove of a
// block taken back by a match, and one pop_victim; items = operations.

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/eviction/lineage.h"
#include "kvbm/eviction/lru.h"
#include "kvbm/eviction/multi_level_lru.h"
#include "kvbm/frequency_tracker.h"

namespace {

using kvbm::BlockId;
using kvbm::SequenceHash;

// The baseline: what a first implementation of an LRU usually looks like.
class ListMapLru {
 public:
  void insert(BlockId id) { where_[id] = order_.insert(order_.end(), id); }
  void remove(BlockId id) {
    auto it = where_.find(id);
    if (it != where_.end()) {
      order_.erase(it->second);
      where_.erase(it);
    }
  }
  std::optional<BlockId> pop_victim() {
    if (order_.empty()) {
      return std::nullopt;
    }
    const BlockId id = order_.front();
    order_.pop_front();
    where_.erase(id);
    return id;
  }

 private:
  std::list<BlockId> order_;
  std::unordered_map<BlockId, std::list<BlockId>::iterator> where_;
};

std::vector<SequenceHash> make_hashes(std::size_t n) {
  std::vector<SequenceHash> out;
  out.reserve(n);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < n; ++i) {
    out.emplace_back(rng(), std::nullopt, 0);
  }
  return out;
}

// Fills the pool half way, then churns: release one block, take a random one
// back, evict the oldest.
template <class Backend>
void churn(benchmark::State& state, Backend& backend) {
  const auto capacity = static_cast<BlockId>(state.range(0));
  const auto hashes = make_hashes(capacity);
  std::vector<BlockId> free_ids;
  for (BlockId id = 0; id < capacity; ++id) {
    free_ids.push_back(id);
  }
  std::vector<BlockId> inactive;
  for (BlockId i = 0; i < capacity / 2; ++i) {
    backend.insert(free_ids.back(), hashes[free_ids.back()]);
    free_ids.pop_back();
  }
  std::mt19937 rng(1);
  for (auto _ : state) {
    const BlockId in = free_ids.back();
    free_ids.pop_back();
    backend.insert(in, hashes[in]);
    const auto back = static_cast<BlockId>(rng() % capacity);
    if (backend.contains(back)) {
      backend.remove(back);
      free_ids.push_back(back);
    }
    if (auto victim = backend.pop_victim()) {
      free_ids.push_back(*victim);
    }
    benchmark::DoNotOptimize(free_ids.data());
  }
  state.SetItemsProcessed(state.iterations() * 3);
}

void BM_ListMapLru_Churn(benchmark::State& state) {
  struct Adapter {
    ListMapLru lru;
    std::vector<bool> in;
    explicit Adapter(std::size_t n) : in(n) {}
    void insert(BlockId id, const SequenceHash&) {
      lru.insert(id);
      in[id] = true;
    }
    void remove(BlockId id) {
      lru.remove(id);
      in[id] = false;
    }
    bool contains(BlockId id) const { return in[id]; }
    std::optional<BlockId> pop_victim() {
      auto v = lru.pop_victim();
      if (v) in[*v] = false;
      return v;
    }
  } backend(static_cast<std::size_t>(state.range(0)));
  churn(state, backend);
}

void BM_LruBackend_Churn(benchmark::State& state) {
  kvbm::LruBackend backend(static_cast<std::size_t>(state.range(0)));
  churn(state, backend);
}

void BM_MultiLevelLruBackend_Churn(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto tracker = std::make_shared<kvbm::FrequencyTracker>(n);
  const auto hashes = make_hashes(n);
  for (std::size_t i = 0; i < n; i += 3) {
    for (std::size_t k = 0; k < i % 9; ++k) tracker->touch(hashes[i].value());
  }
  kvbm::MultiLevelLruBackend backend(n, tracker);
  churn(state, backend);
}

void BM_LineageBackend_Churn(benchmark::State& state) {
  kvbm::LineageBackend backend(static_cast<std::size_t>(state.range(0)));
  churn(state, backend);
}

void BM_UnorderedMapCounter_Touch(benchmark::State& state) {
  std::unordered_map<std::uint64_t, std::uint32_t> counts;
  counts.reserve(static_cast<std::size_t>(state.range(0)));
  const auto hashes = make_hashes(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    ++counts[hashes[i].value()];
    i = i + 1 == hashes.size() ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_FrequencyTracker_Touch(benchmark::State& state) {
  kvbm::FrequencyTracker tracker(static_cast<std::size_t>(state.range(0)));
  const auto hashes = make_hashes(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    tracker.touch(hashes[i].value());
    i = i + 1 == hashes.size() ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_FrequencyTracker_Estimate(benchmark::State& state) {
  kvbm::FrequencyTracker tracker(static_cast<std::size_t>(state.range(0)));
  const auto hashes = make_hashes(static_cast<std::size_t>(state.range(0)));
  for (const auto& h : hashes) tracker.touch(h.value());
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(tracker.estimate(hashes[i].value()));
    i = i + 1 == hashes.size() ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
}

// Pool sizes: a small tier and a 100,000-block tier as in docs figures.
#define KVBM_POOL_SIZES ->Arg(1024)->Arg(100000)

BENCHMARK(BM_ListMapLru_Churn) KVBM_POOL_SIZES;
BENCHMARK(BM_LruBackend_Churn) KVBM_POOL_SIZES;
BENCHMARK(BM_MultiLevelLruBackend_Churn) KVBM_POOL_SIZES;
BENCHMARK(BM_LineageBackend_Churn) KVBM_POOL_SIZES;
BENCHMARK(BM_UnorderedMapCounter_Touch) KVBM_POOL_SIZES;
BENCHMARK(BM_FrequencyTracker_Touch) KVBM_POOL_SIZES;
BENCHMARK(BM_FrequencyTracker_Estimate) KVBM_POOL_SIZES;
BENCHMARK(BM_FrequencyTracker_Touch)->Arg(100000)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
