// benchmarks/python_baseline_bench.cpp: the C++ side of the Python figures (docs/python.md).
//
// The calls the Python bindings make, made from C++ on the same manager and
// blocks as benchmarks/python/bindings_bench.py, so that every Python figure has
// its C++ counterpart:
//
//   BM_KvBlockManager_Probe256      probe() of a 256-block request held in G2
//   BM_KvBlockManager_Present256    the registry's presence per tier (KvBlockManager.present)
//   BM_KvBlockManager_Store/32      allocate in G2, memcpy each row in, stage, register: store()
//   BM_KvBlockManager_Load/32       memcpy each block G1/G2 holds out (the rest onboarded): load()
//   BM_Memcpy_Block/32              the bare copies, the machine's ceiling
//
// Blocks of 64 KiB (one region), G1 64 blocks, G2 1024 blocks, no G3: the
// figures are the API's and the copies', not a disk's.

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include <kvbm/kvbm.h>

namespace {

constexpr std::size_t kBlockBytes = 64 << 10;

std::unique_ptr<kvbm::KvBlockManager> make_manager() {
  kvbm::KvBlockManagerConfig c;
  c.layout = {
      .num_layers = 1, .outer_dim = 1, .page_size = 1, .inner_dim = kBlockBytes, .dtype_bytes = 1};
  c.device_layout = kvbm::LayoutKind::kFullyContiguous;
  c.device.blocks = 64;
  c.host.blocks = 1024;
  c.device_to_host = kvbm::OffloadMode::kNone;
  return kvbm::KvBlockManager::build(c);
}

std::vector<kvbm::SequenceHash> flat(std::uint64_t first, std::size_t n) {
  std::vector<kvbm::SequenceHash> out;
  for (std::size_t i = 0; i < n; ++i)
    out.emplace_back(first + i * 0x9E3779B97F4A7C15ULL, std::nullopt, 0);
  return out;
}

// store(): what the binding does for hashes not yet in G2.
std::size_t store(kvbm::KvBlockManager& kv, const std::vector<kvbm::SequenceHash>& hashes,
                  const std::uint8_t* rows) {
  auto& pool = *kv.host();
  const auto present = pool.registry()->presence<kvbm::G2>(hashes);
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!present[i]) missing.push_back(i);
  }
  auto blocks = pool.allocate_at_most(missing.size());
  std::vector<kvbm::CompleteBlock<kvbm::G2>> complete;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const auto r = kv.host_layout().block_region(blocks[k].block_id());
    std::memcpy(reinterpret_cast<void*>(r.addr), rows + missing[k] * kBlockBytes, kBlockBytes);
    complete.push_back(std::move(blocks[k]).stage(hashes[missing[k]], kv.block_size()).value());
  }
  auto registered = pool.register_blocks(std::move(complete));
  return hashes.size() - missing.size() + blocks.size();
}

// load(): what G1 and then G2 hold copied straight out (no landing in G1), the rest
// onboarded, waited for and copied out of G1.
std::size_t load(kvbm::KvBlockManager& kv, const std::vector<kvbm::SequenceHash>& hashes,
                 std::uint8_t* rows) {
  const std::span<const kvbm::SequenceHash> all(hashes);
  std::size_t n = 0;
  {
    auto held = kv.device().match_blocks(all);
    for (const auto& b : held) {
      const auto r = kv.device_layout().block_region(b.block_id());
      std::memcpy(rows + n++ * kBlockBytes, reinterpret_cast<const void*>(r.addr), kBlockBytes);
    }
  }
  if (n < hashes.size()) {
    auto held = kv.host()->match_blocks(all.subspan(n));
    for (const auto& b : held) {
      const auto r = kv.host_layout().block_region(b.block_id());
      std::memcpy(rows + n++ * kBlockBytes, reinterpret_cast<const void*>(r.addr), kBlockBytes);
    }
  }
  if (n == hashes.size()) return n;
  auto h = kv.onboard(std::vector<kvbm::SequenceHash>(hashes.begin() + n, hashes.end()));
  auto blocks = h.take_blocks();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto r = kv.device_layout().block_region(blocks[i].block_id());
    std::memcpy(rows + (n + i) * kBlockBytes, reinterpret_cast<const void*>(r.addr), kBlockBytes);
  }
  return n + blocks.size();
}

std::vector<std::uint8_t> random_rows(std::size_t n) {
  std::vector<std::uint8_t> v(n * kBlockBytes);
  std::mt19937_64 rng(1);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

void BM_KvBlockManager_Probe256(benchmark::State& state) {
  auto kv = make_manager();
  const auto hashes = flat(1, 256);
  auto rows = random_rows(256);
  if (store(*kv, hashes, rows.data()) != 256) state.SkipWithError("store failed");
  for (auto _ : state) benchmark::DoNotOptimize(kv->probe(hashes));
  state.counters["ns_per_block"] =
      benchmark::Counter(256.0 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_KvBlockManager_Probe256);

void BM_KvBlockManager_Present256(benchmark::State& state) {
  auto kv = make_manager();
  const auto hashes = flat(1, 256);
  auto rows = random_rows(256);
  (void)store(*kv, hashes, rows.data());
  const auto& reg = *kv->device().registry();
  for (auto _ : state) {
    benchmark::DoNotOptimize(reg.presence<kvbm::G1>(hashes));
    benchmark::DoNotOptimize(reg.presence<kvbm::G2>(hashes));
  }
}
BENCHMARK(BM_KvBlockManager_Present256);

void BM_KvBlockManager_Store(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto kv = make_manager();
  auto rows = random_rows(n);
  std::uint64_t next = 1;
  for (auto _ : state) {
    const auto hashes = flat(next, n);  // new hashes: G2 evicts the oldest
    next += n;
    benchmark::DoNotOptimize(store(*kv, hashes, rows.data()));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * kBlockBytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_KvBlockManager_Store)->Arg(32);

void BM_KvBlockManager_Load(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto kv = make_manager();
  constexpr std::size_t kSet = 512;  // held in G2; G1 (64) keeps only the last two loads
  auto src = random_rows(kSet);
  const auto all = flat(1, kSet);
  if (store(*kv, all, src.data()) != kSet) state.SkipWithError("store failed");
  std::vector<std::uint8_t> out(n * kBlockBytes);
  std::size_t at = 0;
  for (auto _ : state) {
    std::vector<kvbm::SequenceHash> hashes(all.begin() + at, all.begin() + at + n);
    at = (at + n) % kSet;
    if (load(*kv, hashes, out.data()) != n) state.SkipWithError("short load");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * kBlockBytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_KvBlockManager_Load)->Arg(32);

void BM_Memcpy_Block(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto src = random_rows(n);
  std::vector<std::uint8_t> dst(src.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i)
      std::memcpy(dst.data() + i * kBlockBytes, src.data() + i * kBlockBytes, kBlockBytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * kBlockBytes));
}
BENCHMARK(BM_Memcpy_Block)->Arg(32);

}  // namespace

BENCHMARK_MAIN();
