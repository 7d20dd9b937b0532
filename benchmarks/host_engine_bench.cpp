// Host transfer engine throughput, reported beside one plain memcpy of the same
// total bytes.
//
// Model: 32 layers x K,V x 16 tokens x 8 heads x 128 x 2 bytes, so 64 regions
// of 32 KiB per block (2 MiB blocks). Pools of 64 blocks; each batch takes
// `blocks` source and destination ids from fixed random permutations, so no two
// blocks of a batch are adjacent (nothing merges across blocks).
//
//   BM_Memcpy_Baseline                 one memcpy of blocks x 2 MiB, contiguous to contiguous,
//                                      on the calling thread
//   BM_Memcpy_Threads                  the same bytes split in T equal pieces, one memcpy each
//                                      on T worker threads that the calling thread starts and
//                                      waits for (threads:0: T = the engine's default count),
//                                      the baseline at equal threads for the engine's rows
//   BM_MemcpyPerRegion_Baseline        the engine's plan, memcpy'd region by region on the
//                                      calling thread (separated -> contiguous)
//   BM_HostEngine_SeparatedToContiguous   G1 (layer separated) -> G2 (offload)
//   BM_HostEngine_ContiguousToSeparated   G2 -> G1 (onboard)
//   BM_HostEngine_SeparatedToSeparated
//   BM_HostEngine_ContiguousToContiguous
//
// Arguments: {blocks per batch, engine threads (0: the default, min(4, cores))}.
// Bytes/s counts the bytes of the blocks moved. Real time: the copies run on
// the engine's workers. Figure of merit: engine bytes/s over BM_Memcpy_Threads
// bytes/s at the same batch size and the same number of threads (target >= 0.9).

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/storage/storage.h"
#include "kvbm/transfer/host_engine.h"

namespace {

using kvbm::BlockId;
using kvbm::Layout;
using kvbm::LayoutConfig;
using kvbm::LayoutKind;

constexpr std::size_t kPoolBlocks = 64;

LayoutConfig model() {
  LayoutConfig c;
  c.num_layers = 32;
  c.outer_dim = 2;
  c.page_size = 16;
  c.inner_dim = 8 * 128;
  c.dtype_bytes = 2;
  return c;  // region 32 KiB, block 2 MiB
}

/// Pre-faulted host memory holding a pool of `kind`.
struct Pool {
  std::vector<std::unique_ptr<kvbm::Storage>> storage;
  std::unique_ptr<Layout> layout;
};

Pool make_pool(LayoutKind kind, std::uint8_t fill) {
  const LayoutConfig c = model();
  Pool p;
  if (kind == LayoutKind::kFullyContiguous) {
    p.storage.push_back(kvbm::make_host_storage(kPoolBlocks * c.block_bytes()));
    p.layout =
        std::make_unique<Layout>(Layout::fully_contiguous(c, kPoolBlocks, p.storage[0]->base()));
  } else {
    std::vector<std::uintptr_t> bases;
    for (std::size_t r = 0; r < c.regions_per_block(); ++r) {
      p.storage.push_back(kvbm::make_host_storage(kPoolBlocks * c.region_bytes()));
      bases.push_back(p.storage.back()->base());
    }
    p.layout = std::make_unique<Layout>(Layout::layer_separated(c, kPoolBlocks, std::move(bases)));
  }
  for (auto& s : p.storage) std::memset(reinterpret_cast<void*>(s->base()), fill, s->size());
  return p;
}

/// The first `n` pairs of two fixed random permutations of the pool's ids.
std::vector<kvbm::TransferPair> scattered_pairs(std::size_t n) {
  std::mt19937 rng(2024);
  std::vector<BlockId> src(kPoolBlocks);
  std::vector<BlockId> dst(kPoolBlocks);
  std::iota(src.begin(), src.end(), BlockId{0});
  std::iota(dst.begin(), dst.end(), BlockId{0});
  std::shuffle(src.begin(), src.end(), rng);
  std::shuffle(dst.begin(), dst.end(), rng);
  std::vector<kvbm::TransferPair> pairs;
  for (std::size_t i = 0; i < n; ++i) pairs.push_back({src[i], dst[i]});
  return pairs;
}

void set_bytes(benchmark::State& state, std::size_t blocks) {
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(blocks * model().block_bytes()));
  state.counters["blocks"] = static_cast<double>(blocks);
}

void BM_Memcpy_Baseline(benchmark::State& state) {
  const auto blocks = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = blocks * model().block_bytes();
  auto src = kvbm::make_host_storage(bytes);
  auto dst = kvbm::make_host_storage(bytes);
  std::memset(reinterpret_cast<void*>(src->base()), 1, bytes);
  std::memset(reinterpret_cast<void*>(dst->base()), 2, bytes);
  for (auto _ : state) {
    std::memcpy(reinterpret_cast<void*>(dst->base()), reinterpret_cast<const void*>(src->base()),
                bytes);
    benchmark::ClobberMemory();
  }
  set_bytes(state, blocks);
}

/// The engine's worker count for `threads` (0: its default), as the engine reports it.
std::size_t engine_threads(std::size_t threads) {
  const LayoutConfig c{
      .num_layers = 1, .outer_dim = 1, .page_size = 1, .inner_dim = 1, .dtype_bytes = 1};
  auto a = kvbm::make_host_storage(c.block_bytes());
  auto b = kvbm::make_host_storage(c.block_bytes());
  kvbm::HostEngineOptions options;
  options.threads = threads;
  return kvbm::HostTransferEngine(Layout::fully_contiguous(c, 1, a->base()),
                                  Layout::fully_contiguous(c, 1, b->base()), options)
      .threads();
}

/// memcpy of blocks x 2 MiB split in equal pieces over T worker threads, started and awaited
/// by the calling thread each iteration (as the engine's workers are by submit() and wait()).
void BM_Memcpy_Threads(benchmark::State& state) {
  const auto blocks = static_cast<std::size_t>(state.range(0));
  const std::size_t threads = engine_threads(static_cast<std::size_t>(state.range(1)));
  const std::size_t bytes = blocks * model().block_bytes();
  auto src = kvbm::make_host_storage(bytes);
  auto dst = kvbm::make_host_storage(bytes);
  std::memset(reinterpret_cast<void*>(src->base()), 1, bytes);
  std::memset(reinterpret_cast<void*>(dst->base()), 2, bytes);
  std::barrier sync(static_cast<std::ptrdiff_t>(threads + 1));
  bool stop = false;  // written before a barrier phase, read after it
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::size_t begin = bytes * t / threads, end = bytes * (t + 1) / threads;
      for (;;) {
        sync.arrive_and_wait();
        if (stop) return;
        std::memcpy(reinterpret_cast<void*>(dst->base() + begin),
                    reinterpret_cast<const void*>(src->base() + begin), end - begin);
        sync.arrive_and_wait();
      }
    });
  }
  for (auto _ : state) {
    sync.arrive_and_wait();  // start
    sync.arrive_and_wait();  // every piece copied
    benchmark::ClobberMemory();
  }
  stop = true;
  sync.arrive_and_wait();
  for (auto& w : workers) w.join();
  set_bytes(state, blocks);
  state.counters["threads"] = static_cast<double>(threads);
}

void BM_MemcpyPerRegion_Baseline(benchmark::State& state) {
  const auto blocks = static_cast<std::size_t>(state.range(0));
  Pool src = make_pool(LayoutKind::kLayerSeparated, 1);
  Pool dst = make_pool(LayoutKind::kFullyContiguous, 2);
  const auto pairs = scattered_pairs(blocks);
  std::vector<BlockId> s;
  std::vector<BlockId> d;
  for (const auto& p : pairs) {
    s.push_back(p.src);
    d.push_back(p.dst);
  }
  std::vector<kvbm::CopyOp> ops;
  kvbm::plan_copies(*src.layout, s, *dst.layout, d, ops);
  for (auto _ : state) {
    for (const auto& op : ops) {
      std::memcpy(reinterpret_cast<void*>(op.dst), reinterpret_cast<const void*>(op.src), op.size);
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, blocks);
}

void run_engine(benchmark::State& state, LayoutKind from, LayoutKind to) {
  const auto blocks = static_cast<std::size_t>(state.range(0));
  Pool src = make_pool(from, 1);
  Pool dst = make_pool(to, 2);
  kvbm::HostEngineOptions options;
  options.threads = static_cast<std::size_t>(state.range(1));
  kvbm::HostTransferEngine engine(*src.layout, *dst.layout, options);
  const auto pairs = scattered_pairs(blocks);
  for (auto _ : state) {
    const auto& outcome = engine.submit(pairs)->wait();
    if (!outcome.ok()) state.SkipWithError(std::string(outcome.message()).c_str());
  }
  set_bytes(state, blocks);
  state.counters["threads"] = static_cast<double>(engine.threads());
}

void BM_HostEngine_SeparatedToContiguous(benchmark::State& state) {
  run_engine(state, LayoutKind::kLayerSeparated, LayoutKind::kFullyContiguous);
}
void BM_HostEngine_ContiguousToSeparated(benchmark::State& state) {
  run_engine(state, LayoutKind::kFullyContiguous, LayoutKind::kLayerSeparated);
}
void BM_HostEngine_SeparatedToSeparated(benchmark::State& state) {
  run_engine(state, LayoutKind::kLayerSeparated, LayoutKind::kLayerSeparated);
}
void BM_HostEngine_ContiguousToContiguous(benchmark::State& state) {
  run_engine(state, LayoutKind::kFullyContiguous, LayoutKind::kFullyContiguous);
}

void batch_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"blocks"});
  for (int blocks : {16, 32, 64}) b->Arg(blocks);
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

void engine_sweep(benchmark::internal::Benchmark* b) {
  b->ArgNames({"blocks", "threads"});
  for (int blocks : {16, 32, 64}) {
    for (int threads : {1, 0}) b->Args({blocks, threads});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Memcpy_Baseline)->Apply(batch_sizes);
BENCHMARK(BM_Memcpy_Threads)->Apply(engine_sweep);
BENCHMARK(BM_MemcpyPerRegion_Baseline)->Apply(batch_sizes);
BENCHMARK(BM_HostEngine_SeparatedToContiguous)->Apply(engine_sweep);
BENCHMARK(BM_HostEngine_ContiguousToSeparated)->Apply(engine_sweep);
BENCHMARK(BM_HostEngine_SeparatedToSeparated)->Apply(engine_sweep);
BENCHMARK(BM_HostEngine_ContiguousToContiguous)->Apply(engine_sweep);

}  // namespace

BENCHMARK_MAIN();
