// Benchmarks of the block manager's hot paths, each beside the baseline it
// cannot beat: a bare std::unordered_map lookup of the same keys.
//
// Per-block figures: items_processed counts blocks, so "items_per_second"
// inverted is the cost of one block. Pool of 100,000 blocks, batches of 32,
// block size 16, as in the peer figures of REFERENCE.md.

#include <malloc.h>

#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>

#include <kvbm/block_manager.h>

namespace {

using kvbm::BlockManager;
using kvbm::G2;
using kvbm::SequenceHash;

constexpr std::size_t kPool = 100'000;
constexpr std::size_t kBatch = 32;
constexpr std::uint32_t kBlockSize = 16;

std::vector<SequenceHash> chain(std::uint64_t seed, std::size_t n) {
  std::vector<SequenceHash> out;
  out.reserve(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t v = rng();
    out.emplace_back(v, i == 0 ? std::nullopt : std::optional(out.back().value()),
                     static_cast<std::uint32_t>(i));
  }
  return out;
}

BlockManager<G2> make_manager(std::size_t blocks = kPool) {
  return BlockManager<G2>::builder().block_count(blocks).block_size(kBlockSize).build();
}

// Registers `hashes` and returns the strong handles.
std::vector<kvbm::ImmutableBlock<G2>> register_all(BlockManager<G2>& m,
                                                   const std::vector<SequenceHash>& hashes) {
  auto blocks = *m.allocate_blocks(hashes.size());
  std::vector<kvbm::CompleteBlock<G2>> staged;
  staged.reserve(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    staged.push_back(std::move(blocks[i]).stage(hashes[i], kBlockSize).value());
  }
  return m.register_blocks(std::move(staged));
}

// --- Baseline -------------------------------------------------------------

void BM_Baseline_UnorderedMapLookup(benchmark::State& state) {
  const auto hashes = chain(1, kPool);
  std::unordered_map<std::uint64_t, std::uint32_t> map;
  map.reserve(kPool);
  for (std::uint32_t i = 0; i < hashes.size(); ++i) map.emplace(hashes[i].value(), i);
  std::size_t pos = 0;
  for (auto _ : state) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < kBatch; ++i) {
      sum += map.find(hashes[pos + i].value())->second;
    }
    benchmark::DoNotOptimize(sum);
    pos = (pos + kBatch) % (kPool - kBatch);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_Baseline_UnorderedMapLookup);

// --- Lifecycle ------------------------------------------------------------

// The n-th fresh sequence hash: a splitmix64 finalizer of n, so that keys are
// spread like real sequence hashes (XXH3 outputs), not consecutive integers
// that a modulo-bucketed map would lay out in order.
std::uint64_t fresh_hash(std::uint64_t n) {
  std::uint64_t z = n + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// allocate -> stage -> register -> drop, from the reset pool, in batches.
void BM_BlockManager_LifecycleFromReset(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  auto m = make_manager();
  std::uint64_t next = 1;
  std::size_t used = 0;
  for (auto _ : state) {
    if (used + batch > kPool) {
      // Dropped blocks wait in the inactive pool; send them back to reset so
      // that every allocation is served from the reset pool.
      state.PauseTiming();
      m.reset_inactive_pool();
      used = 0;
      state.ResumeTiming();
    }
    auto blocks = *m.allocate_blocks(batch);
    std::vector<kvbm::CompleteBlock<G2>> staged;
    staged.reserve(batch);
    for (auto& b : blocks) {
      staged.push_back(std::move(b)
                           .stage(SequenceHash(fresh_hash(next++), std::nullopt, 0), kBlockSize)
                           .value());
    }
    auto registered = m.register_blocks(std::move(staged));
    benchmark::DoNotOptimize(registered.data());
    used += batch;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
BENCHMARK(BM_BlockManager_LifecycleFromReset)->Arg(1)->Arg(32);

// The same when every allocation must evict a cached (inactive) block.
void BM_BlockManager_LifecycleEvicting(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  auto m = make_manager();
  std::uint64_t next = 1;
  {  // Fill the whole pool with inactive blocks.
    auto all = register_all(m, chain(7, kPool));
    next = 1ULL << 40;
  }
  for (auto _ : state) {
    auto blocks = *m.allocate_blocks(batch);
    std::vector<kvbm::CompleteBlock<G2>> staged;
    staged.reserve(batch);
    for (auto& b : blocks) {
      staged.push_back(std::move(b)
                           .stage(SequenceHash(fresh_hash(next++), std::nullopt, 0), kBlockSize)
                           .value());
    }
    auto registered = m.register_blocks(std::move(staged));
    benchmark::DoNotOptimize(registered.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
BENCHMARK(BM_BlockManager_LifecycleEvicting)->Arg(1)->Arg(32);

// One block at a time through the single-block calls (allocate_block,
// register_block), as a scheduler does when a decode step fills one block.
// Arg 0: every allocation comes from the reset pool; arg 1: every allocation
// evicts a cached block.
void BM_BlockManager_LifecycleSingle(benchmark::State& state) {
  const bool evicting = state.range(0) != 0;
  auto m = make_manager();
  std::uint64_t next = 1;
  std::size_t used = 0;
  if (evicting) {
    auto all = register_all(m, chain(7, kPool));
    next = 1ULL << 40;
  }
  for (auto _ : state) {
    if (!evicting && used == kPool) {
      state.PauseTiming();
      m.reset_inactive_pool();
      used = 0;
      state.ResumeTiming();
    }
    auto staged = std::move(*m.allocate_block())
                      .stage(SequenceHash(fresh_hash(next++), std::nullopt, 0), kBlockSize)
                      .value();
    auto registered = m.register_block(std::move(staged));
    benchmark::DoNotOptimize(&registered);
    ++used;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_BlockManager_LifecycleSingle)->ArgName("evicting")->Arg(0)->Arg(1);

// --- Matching -------------------------------------------------------------

// Runs prefix matches of 32-block runs. Handles are kept for a window of
// calls and dropped with the timer paused, so the figure is the match alone;
// BM_BlockManager_MatchInactiveThenDrop reports the two together.
template <class Span>
void run_matches(benchmark::State& state, BlockManager<G2>& m, const Span& hashes,
                 bool count_calls) {
  constexpr std::size_t kWindow = 64;
  std::vector<std::vector<kvbm::ImmutableBlock<G2>>> window;
  window.reserve(kWindow);
  std::size_t pos = 0;
  for (auto _ : state) {
    window.push_back(m.match_blocks(std::span(hashes).subspan(pos, kBatch)));
    pos = (pos + 2 * kBatch) % (kPool - kBatch);  // runs of a window never overlap
    if (window.size() == kWindow) {
      state.PauseTiming();
      window.clear();
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(
      static_cast<std::int64_t>(state.iterations() * (count_calls ? 1 : kBatch)));
}

// Prefix match of 32-block runs whose blocks are all inactive (cached).
void BM_BlockManager_MatchInactive(benchmark::State& state) {
  auto m = make_manager();
  const auto hashes = chain(1, kPool);
  { auto held = register_all(m, hashes); }
  run_matches(state, m, hashes, false);
}
BENCHMARK(BM_BlockManager_MatchInactive);

// Match inactive blocks, then drop them back to the inactive pool.
void BM_BlockManager_MatchInactiveThenDrop(benchmark::State& state) {
  auto m = make_manager();
  const auto hashes = chain(1, kPool);
  { auto held = register_all(m, hashes); }
  std::size_t pos = 0;
  for (auto _ : state) {
    auto hits = m.match_blocks(std::span(hashes).subspan(pos, kBatch));
    benchmark::DoNotOptimize(hits.data());
    pos = (pos + kBatch) % (kPool - kBatch);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_BlockManager_MatchInactiveThenDrop);

// Prefix match of 32-block runs whose blocks are held by another request.
void BM_BlockManager_MatchActive(benchmark::State& state) {
  auto m = make_manager();
  const auto hashes = chain(1, kPool);
  auto held = register_all(m, hashes);
  run_matches(state, m, hashes, false);
}
BENCHMARK(BM_BlockManager_MatchActive);

// A prefix match whose first hash misses: cost per call.
void BM_BlockManager_MatchMiss(benchmark::State& state) {
  auto m = make_manager();
  const auto hashes = chain(1, kPool);
  { auto held = register_all(m, hashes); }
  const auto misses = chain(2, kPool);
  run_matches(state, m, misses, true);
}
BENCHMARK(BM_BlockManager_MatchMiss);

// --- Construction ---------------------------------------------------------

// Builds a manager of 1,000,000 blocks; reports bytes of metadata per block
// (heap growth during the build, and after registering every block).
// Heap bytes in use: small chunks plus the large ones malloc serves with mmap
// (the slot array and the hash index are such).
std::size_t heap_in_use() {
  const auto m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void BM_BlockManager_Build1M(benchmark::State& state) {
  constexpr std::size_t kBlocks = 1'000'000;
  double build_bytes = 0;
  double registered_bytes = 0;
  for (auto _ : state) {
    const auto before = heap_in_use();
    auto m = make_manager(kBlocks);
    const auto after_build = heap_in_use();
    benchmark::DoNotOptimize(m.total_blocks());
    state.PauseTiming();
    build_bytes = static_cast<double>(after_build - before) / kBlocks;
    {
      auto blocks = *m.allocate_blocks(kBlocks);
      std::vector<kvbm::CompleteBlock<G2>> staged;
      staged.reserve(kBlocks);
      for (std::size_t i = 0; i < kBlocks; ++i) {
        staged.push_back(
            std::move(blocks[i]).stage(SequenceHash(i + 1, std::nullopt, 0), kBlockSize).value());
      }
      blocks.clear();
      blocks.shrink_to_fit();
      auto reg = m.register_blocks(std::move(staged));
      staged.shrink_to_fit();
      reg.clear();
      reg.shrink_to_fit();
      registered_bytes = static_cast<double>(heap_in_use() - before) / kBlocks;
    }
    state.ResumeTiming();
  }
  state.counters["bytes_per_block_built"] = build_bytes;
  state.counters["bytes_per_block_all_registered"] = registered_bytes;
}
BENCHMARK(BM_BlockManager_Build1M)->Unit(benchmark::kMillisecond)->Iterations(5);

// --- Two threads ----------------------------------------------------------

BlockManager<G2>* g_shared = nullptr;
std::vector<SequenceHash>* g_hashes = nullptr;

void BM_BlockManager_LifecycleEvicting_Threads(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_shared = new BlockManager<G2>(make_manager());
    auto held = register_all(*g_shared, chain(7, kPool));
  }
  std::uint64_t next = (static_cast<std::uint64_t>(state.thread_index()) + 1) << 40;
  for (auto _ : state) {
    auto blocks = *g_shared->allocate_blocks(kBatch);
    std::vector<kvbm::CompleteBlock<G2>> staged;
    staged.reserve(kBatch);
    for (auto& b : blocks) {
      staged.push_back(std::move(b)
                           .stage(SequenceHash(fresh_hash(next++), std::nullopt, 0), kBlockSize)
                           .value());
    }
    auto registered = g_shared->register_blocks(std::move(staged));
    benchmark::DoNotOptimize(registered.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  if (state.thread_index() == 0) {
    delete g_shared;
    g_shared = nullptr;
  }
}
BENCHMARK(BM_BlockManager_LifecycleEvicting_Threads)->Threads(1)->Threads(2)->UseRealTime();

void BM_BlockManager_MatchInactive_Threads(benchmark::State& state) {
  if (state.thread_index() == 0) {
    g_shared = new BlockManager<G2>(make_manager());
    g_hashes = new std::vector<SequenceHash>(chain(1, kPool));
    auto held = register_all(*g_shared, *g_hashes);
  }
  std::size_t pos = static_cast<std::size_t>(state.thread_index()) * 50'000;
  for (auto _ : state) {
    auto hits = g_shared->match_blocks(std::span(*g_hashes).subspan(pos, kBatch));
    benchmark::DoNotOptimize(hits.data());
    pos = (pos + kBatch) % (kPool - kBatch);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  if (state.thread_index() == 0) {
    delete g_shared;
    delete g_hashes;
    g_shared = nullptr;
    g_hashes = nullptr;
  }
}
BENCHMARK(BM_BlockManager_MatchInactive_Threads)->Threads(1)->Threads(2)->UseRealTime();

void BM_Baseline_UnorderedMapLookup_Threads(benchmark::State& state) {
  static std::unordered_map<std::uint64_t, std::uint32_t>* map = nullptr;
  if (state.thread_index() == 0) {
    g_hashes = new std::vector<SequenceHash>(chain(1, kPool));
    map = new std::unordered_map<std::uint64_t, std::uint32_t>();
    map->reserve(kPool);
    for (std::uint32_t i = 0; i < g_hashes->size(); ++i) map->emplace((*g_hashes)[i].value(), i);
  }
  std::size_t pos = static_cast<std::size_t>(state.thread_index()) * 50'000;
  for (auto _ : state) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < kBatch; ++i) sum += map->find((*g_hashes)[pos + i].value())->second;
    benchmark::DoNotOptimize(sum);
    pos = (pos + kBatch) % (kPool - kBatch);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  if (state.thread_index() == 0) {
    delete map;
    delete g_hashes;
    g_hashes = nullptr;
  }
}
BENCHMARK(BM_Baseline_UnorderedMapLookup_Threads)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
