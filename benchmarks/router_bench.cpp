// The router's index and router, each beside a bare std::unordered_map doing
// the same number of hash-map operations (docs/benchmarks.md, "Router").
//
//   BM_Baseline_HashMapInsert   per op: one insert or one erase of a u64 key, at
//                               the index's steady-state size
//   BM_KvIndexer_Apply          per block: BlockStored / BlockRemoved hashes
//                               applied, batches of 32 + 32 over 64 instances
//   BM_Baseline_HashMapFind     per find: the same number of entries as the
//                               index below, one find per request block
//   BM_KvIndexer_Overlaps       per request block: overlaps() over {instances,
//                               request blocks}; instance i holds the first
//                               (i+1)/instances of the request (half G1, the
//                               rest G2), so the walk runs the whole request
//   BM_KvRouter_Route           per request block: route() + finish(), 64
//                               instances, 256 blocks
//
// Every index also holds 200,000 unrelated blocks spread over its instances,
// so lookups pay the cache misses of a real cluster's index.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/events/kv_event.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"

namespace {

using kvbm::router::InstanceId;
using kvbm::router::KvIndexer;
namespace events = kvbm::events;

constexpr std::size_t kBackgroundBlocks = 200'000;
constexpr std::size_t kApplyInstances = 64;
constexpr std::size_t kChunk = 32;    // hashes stored (and removed) per batch
constexpr std::size_t kWindow = 100;  // batches a block stays before its removal

/// A well-mixed 64-bit value of (a, b, c) (splitmix64 steps).
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t x = (a * 0x9E3779B97F4A7C15ULL) ^ (b + 0x632BE59BD9B4E019ULL) ^ (c << 17U);
  x ^= x >> 30U;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27U;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31U;
  return x;
}

events::KvEvent stored(std::vector<std::uint64_t> hashes, const char* medium) {
  events::BlockStored e;
  e.block_hashes = std::move(hashes);
  e.block_size = 16;
  e.medium = medium;
  return e;
}

events::KvEvent removed(std::vector<std::uint64_t> hashes, const char* medium) {
  events::BlockRemoved e;
  e.block_hashes = std::move(hashes);
  e.medium = medium;
  return e;
}

std::vector<std::uint64_t> chunk(std::size_t instance, std::size_t c) {
  std::vector<std::uint64_t> out(kChunk);
  for (std::size_t j = 0; j < kChunk; ++j) out[j] = mix(instance, c, j);
  return out;
}

// ----------------------------------------------------------------------------
// Applying events.

void BM_Baseline_HashMapInsert(benchmark::State& state) {
  // The index's steady state: 64 instances x 100 batches x 32 blocks.
  std::unordered_map<std::uint64_t, std::uint64_t> map;
  map.reserve(kApplyInstances * kWindow * kChunk * 2);
  std::vector<std::vector<std::uint64_t>> chunks;
  for (std::size_t i = 0; i < kApplyInstances; ++i) {
    for (std::size_t c = 0; c < 2 * kWindow; ++c) chunks.push_back(chunk(i, c));
  }
  std::size_t k = 0;
  const std::size_t per_instance = 2 * kWindow;
  auto step = [&] {
    const std::size_t i = k % kApplyInstances;
    const std::size_t b = (k / kApplyInstances) % per_instance;
    for (std::uint64_t h : chunks[(i * per_instance) + b]) map.try_emplace(h, i);
    for (std::uint64_t h : chunks[(i * per_instance) + ((b + kWindow) % per_instance)])
      map.erase(h);
    ++k;
  };
  for (std::size_t w = 0; w < kApplyInstances * per_instance; ++w) step();
  for (auto _ : state) step();
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * kChunk));
  state.counters["entries"] = static_cast<double>(map.size());
}
BENCHMARK(BM_Baseline_HashMapInsert);

void BM_KvIndexer_Apply(benchmark::State& state) {
  KvIndexer index;
  std::vector<InstanceId> ids;
  for (std::size_t i = 0; i < kApplyInstances; ++i)
    ids.push_back(index.add_instance(std::to_string(i)));
  const std::size_t per_instance = 2 * kWindow;
  // Batch b of instance i stores chunk b and removes chunk b + kWindow, stored
  // kWindow batches earlier (the cycle repeats).
  std::vector<events::KvEventBatch> batches;
  batches.reserve(kApplyInstances * per_instance);
  for (std::size_t i = 0; i < kApplyInstances; ++i) {
    for (std::size_t b = 0; b < per_instance; ++b) {
      events::KvEventBatch batch;
      batch.events.push_back(stored(chunk(i, b), b % 4 == 0 ? "CPU" : "GPU"));
      const std::size_t r = (b + kWindow) % per_instance;
      batch.events.push_back(removed(chunk(i, r), r % 4 == 0 ? "CPU" : "GPU"));
      batches.push_back(std::move(batch));
    }
  }
  std::vector<std::uint64_t> seq(kApplyInstances, 0);
  std::size_t k = 0;
  auto step = [&] {
    const std::size_t i = k % kApplyInstances;
    const std::size_t b = (k / kApplyInstances) % per_instance;
    benchmark::DoNotOptimize(index.apply(ids[i], seq[i]++, batches[(i * per_instance) + b]));
    ++k;
  };
  for (std::size_t w = 0; w < kApplyInstances * per_instance; ++w) step();
  for (auto _ : state) step();
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(2 * kChunk));
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 2), benchmark::Counter::kIsRate);
  std::size_t entries = 0;
  for (InstanceId id : ids) {
    for (std::size_t n : index.state(id).blocks) entries += n;
  }
  state.counters["entries"] = static_cast<double>(entries);
  state.counters["bytes_per_block"] = static_cast<double>(index.stats().index_bytes) /
                                      static_cast<double>(index.stats().distinct_blocks);
}
BENCHMARK(BM_KvIndexer_Apply);

// ----------------------------------------------------------------------------
// Overlap queries.

std::vector<std::uint64_t> request_hashes(std::size_t blocks) {
  std::vector<std::uint64_t> out(blocks);
  for (std::size_t j = 0; j < blocks; ++j) out[j] = mix(0xABCD, 7, j);
  return out;
}

/// An index of `instances` instances: instance i holds the first
/// blocks * (i + 1) / instances blocks of the request (the first half of
/// them in G1, the rest in G2) and its share of the background blocks.
std::unique_ptr<KvIndexer> cluster(std::size_t instances, std::size_t blocks) {
  auto index = std::make_unique<KvIndexer>();
  const auto request = request_hashes(blocks);
  for (std::size_t i = 0; i < instances; ++i) {
    const InstanceId id = index->add_instance(std::to_string(i));
    const std::size_t held = blocks * (i + 1) / instances;
    events::KvEventBatch b;
    b.events.push_back(
        stored({request.begin(), request.begin() + static_cast<std::ptrdiff_t>(held / 2)}, "GPU"));
    b.events.push_back(stored({request.begin() + static_cast<std::ptrdiff_t>(held / 2),
                               request.begin() + static_cast<std::ptrdiff_t>(held)},
                              "CPU"));
    std::vector<std::uint64_t> background;
    for (std::size_t j = i; j < kBackgroundBlocks; j += instances)
      background.push_back(mix(1, 2, j));
    b.events.push_back(stored(std::move(background), "GPU"));
    index->apply(id, 0, b);
  }
  return index;
}

void BM_Baseline_HashMapFind(benchmark::State& state) {
  const auto blocks = static_cast<std::size_t>(state.range(1));
  std::unordered_map<std::uint64_t, std::uint64_t> map;
  for (std::size_t j = 0; j < kBackgroundBlocks; ++j) map.emplace(mix(1, 2, j), j);
  const auto request = request_hashes(blocks);
  for (std::size_t j = 0; j < blocks; ++j) map.emplace(request[j], j);
  for (auto _ : state) {
    std::uint64_t sum = 0;
    for (std::uint64_t h : request) {
      const auto it = map.find(h);
      if (it == map.end()) break;
      sum += it->second;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(blocks));
}

void BM_KvIndexer_Overlaps(benchmark::State& state) {
  const auto instances = static_cast<std::size_t>(state.range(0));
  const auto blocks = static_cast<std::size_t>(state.range(1));
  const auto index = cluster(instances, blocks);
  const auto request = request_hashes(blocks);
  for (auto _ : state) benchmark::DoNotOptimize(index->overlaps(request));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(blocks));
  const auto st = index->stats();
  state.counters["bytes_per_block"] =
      static_cast<double>(st.index_bytes) / static_cast<double>(st.distinct_blocks);
}

void overlap_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"instances", "blocks"});
  for (std::int64_t instances : {1, 8, 64}) {
    for (std::int64_t blocks : {16, 256}) b->Args({instances, blocks});
  }
}
BENCHMARK(BM_Baseline_HashMapFind)->Apply(overlap_args);
BENCHMARK(BM_KvIndexer_Overlaps)->Apply(overlap_args);

// ----------------------------------------------------------------------------
// Routing.

void BM_KvRouter_Route(benchmark::State& state) {
  const auto instances = static_cast<std::size_t>(state.range(0));
  const auto blocks = static_cast<std::size_t>(state.range(1));
  const auto index = cluster(instances, blocks);
  const auto request = request_hashes(blocks);
  kvbm::router::KvRouter router(*index);
  for (auto _ : state) {
    const auto d = router.route(request, blocks * 16);
    router.finish(d);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(blocks));
}
BENCHMARK(BM_KvRouter_Route)->ArgNames({"instances", "blocks"})->Args({64, 256});

}  // namespace

BENCHMARK_MAIN();
