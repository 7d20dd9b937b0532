// Offload pipeline overhead and onboarding latency, each beside the raw engine.
//
// Pipeline overhead (blocks/s through G1 -> G2 at the default batch size, 64):
//   BM_Pipeline_NullEngine      the whole pipeline (policy, awaiter, batcher,
//                               executor: upgrade, allocate, register) with an
//                               engine that copies nothing
//   BM_Pipeline_HostEngine      the same with the host engine copying the blocks
//   BM_Engine_HostEngine_Alone  the host engine alone: the same blocks in
//                               batches of 64, submitted and waited in turn
//   Figure of merit: BM_Pipeline_HostEngine blocks/s over
//   BM_Engine_HostEngine_Alone blocks/s (target >= 0.9).
//
// Onboarding latency of a 1,000-block prefix into G1 (KvBlockManager::onboard,
// wait, take the blocks):
//   BM_Onboard_FromHost         every block in G2 only
//   BM_Onboard_FromDisk         every block in G3 only (through the pinned bounce buffer)
//   BM_Engine_HostToDevice_Raw  the G2 -> G1 engine alone (the CUDA engine on a GPU, the
//                               host engine where G1 is emulated), one batch of 1,000
//   BM_Engine_DiskRead_Raw      the disk read engine alone, 1,000 slots into host memory
//
// Block model: 8 layers x K,V x 16 tokens x 8 heads x 128 x 2 bytes
// (512 KiB blocks, 16 regions of 32 KiB). G1 is emulated in host memory
// where no GPU is usable. The disk file goes to $KVBM_BENCH_DIR (default
// /tmp); O_DIRECT where the file system allows it.

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>

#include "kvbm/block_manager.h"
#include "kvbm/disk/disk_engine.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/logging.h"
#include "kvbm/offload/offload.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/cuda_engine.h"
#include "kvbm/transfer/host_engine.h"

namespace {

using namespace kvbm;

LayoutConfig model() {
  LayoutConfig c;
  c.num_layers = 8;
  c.outer_dim = 2;
  c.page_size = 16;
  c.inner_dim = 8 * 128;
  c.dtype_bytes = 2;
  return c;  // 32 KiB regions, 512 KiB blocks
}

std::filesystem::path bench_dir() {
  const char* d = std::getenv("KVBM_BENCH_DIR");
  return d != nullptr ? d : "/tmp";
}

std::vector<SequenceHash> chain(std::size_t n, std::uint64_t salt) {
  std::vector<SequenceHash> out;
  std::uint64_t parent = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t v = (salt << 32) + i + 1;
    out.push_back(SequenceHash(v, i == 0 ? std::nullopt : std::optional(parent),
                               static_cast<std::uint32_t>(i)));
    parent = v;
  }
  return out;
}

class NoCopyEngine final : public TransferEngine {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "none"; }
  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair>) override {
    auto c = std::make_shared<TransferCompletion>();
    c->complete({});
    return c;
  }
};

// Pools of kBlocks; the blocks per iteration go through in containers of 64.
constexpr std::size_t kBlocks = 256;
constexpr std::size_t kContainer = 64;

struct Memory {
  std::vector<std::unique_ptr<Storage>> storage;
  std::unique_ptr<Layout> separated, contiguous;
};

Memory make_memory() {
  const LayoutConfig c = model();
  Memory m;
  std::vector<std::uintptr_t> bases;
  for (std::size_t r = 0; r < c.regions_per_block(); ++r) {
    m.storage.push_back(make_host_storage(kBlocks * c.region_bytes()));
    bases.push_back(m.storage.back()->base());
  }
  m.separated = std::make_unique<Layout>(Layout::layer_separated(c, kBlocks, bases));
  m.storage.push_back(make_host_storage(kBlocks * c.block_bytes()));
  m.contiguous =
      std::make_unique<Layout>(Layout::fully_contiguous(c, kBlocks, m.storage.back()->base()));
  for (auto& s : m.storage) std::memset(reinterpret_cast<void*>(s->base()), 7, s->size());
  return m;
}

void run_pipeline(benchmark::State& state, std::shared_ptr<TransferEngine> engine) {
  logger()->set_level(spdlog::level::warn);
  auto g1 = BlockManager<G1>::builder().block_count(kBlocks).block_size(16).build();
  auto g2 = BlockManager<G2>::builder().block_count(kBlocks).block_size(16).build();
  auto pipeline =
      OffloadPipeline<G1, G2>::builder().source(g1).destination(g2).engine(engine).build();
  // kBlocks registered G1 blocks, held for the whole run.
  const auto hashes = chain(kBlocks, 1);
  auto mut = g1.allocate_blocks(kBlocks).value();
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < kBlocks; ++i)
    complete.push_back(std::move(mut[i]).stage(hashes[i], 16).value());
  auto blocks = g1.register_blocks(std::move(complete));
  std::vector<std::vector<ImmutableBlock<G1>>> containers;
  for (std::size_t i = 0; i < kBlocks; i += kContainer) {
    containers.emplace_back(blocks.begin() + static_cast<std::ptrdiff_t>(i),
                            blocks.begin() + static_cast<std::ptrdiff_t>(i + kContainer));
  }
  std::vector<TransferHandle> handles;
  for (auto _ : state) {
    handles.clear();
    for (const auto& c : containers) handles.push_back(pipeline->enqueue(c));
    for (auto& h : handles) {
      if (h.wait() != TransferStatus::kDone) state.SkipWithError("a container did not complete");
    }
    state.PauseTiming();
    g2.reset_inactive_pool();  // the next iteration copies them again
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kBlocks));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(kBlocks * model().block_bytes()));
}

void BM_Pipeline_NullEngine(benchmark::State& state) {
  run_pipeline(state, std::make_shared<NoCopyEngine>());
}

void BM_Pipeline_HostEngine(benchmark::State& state) {
  static Memory m = make_memory();
  run_pipeline(state, std::make_shared<HostTransferEngine>(*m.separated, *m.contiguous));
}

void BM_Engine_HostEngine_Alone(benchmark::State& state) {
  static Memory m = make_memory();
  HostTransferEngine engine(*m.separated, *m.contiguous);
  std::vector<std::vector<TransferPair>> batches;
  for (std::size_t i = 0; i < kBlocks; i += kContainer) {
    std::vector<TransferPair> b;
    for (std::size_t k = i; k < i + kContainer; ++k) {
      b.push_back({static_cast<BlockId>(k), static_cast<BlockId>(kBlocks - 1 - k)});
    }
    batches.push_back(std::move(b));
  }
  for (auto _ : state) {
    for (const auto& b : batches) {
      if (!engine.submit(b)->wait().ok()) state.SkipWithError("copy failed");
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kBlocks));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(kBlocks * model().block_bytes()));
}

// ---- onboarding ----

constexpr std::size_t kPrefix = 1000;

struct OnboardFixture {
  std::filesystem::path dir;
  std::unique_ptr<KvBlockManager> kv;
  std::vector<SequenceHash> hashes = chain(kPrefix, 2);

  OnboardFixture() {
    logger()->set_level(spdlog::level::warn);
    dir = bench_dir() / ("kvbm-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    KvBlockManagerConfig c;
    c.layout = model();
    c.device.blocks = kPrefix + 24;
    c.host.blocks = kPrefix + 24;
    c.disk.blocks = kPrefix + 24;
    c.disk_directory = dir;
    kv = KvBlockManager::build(c);
    // The forward pass writes every G1 block (and so faults its pages in), as
    // the raw engine's destination is written before it is timed. On a GPU
    // (cudaMalloc) there is nothing to fault in.
    if (kv->device_emulated()) {
      std::vector<Region> regions;
      for (BlockId b = 0; b < kv->device().total_blocks(); ++b)
        kv->device_layout().append_regions(b, regions);
      for (const Region& r : regions) std::memset(reinterpret_cast<void*>(r.addr), 1, r.size);
    }
    auto mut = kv->device().allocate_blocks(kPrefix).value();
    std::vector<CompleteBlock<G1>> complete;
    for (std::size_t i = 0; i < kPrefix; ++i) {
      complete.push_back(std::move(mut[i]).stage(hashes[i], 16).value());
    }
    kv->register_blocks(std::move(complete));
    kv->drain();
  }
  ~OnboardFixture() {
    kv.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

void run_onboard(benchmark::State& state, bool from_disk) {
  OnboardFixture f;
  if (from_disk) f.kv->host()->reset_inactive_pool();
  for (auto _ : state) {
    state.PauseTiming();
    f.kv->device().reset_inactive_pool();
    state.ResumeTiming();
    auto h = f.kv->onboard(f.hashes);
    auto blocks = h.take_blocks();
    if (blocks.size() != kPrefix)
      state.SkipWithError(("onboarded " + std::to_string(blocks.size())).c_str());
    const auto counts = h.counts();
    if (counts.from(from_disk ? TierId::kG3 : TierId::kG2) != kPrefix)
      state.SkipWithError("wrong source tier");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kPrefix));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(kPrefix * model().block_bytes()));
}

void BM_Onboard_FromHost(benchmark::State& state) { run_onboard(state, false); }
void BM_Onboard_FromDisk(benchmark::State& state) { run_onboard(state, true); }

void BM_Engine_HostToDevice_Raw(benchmark::State& state) {
  const LayoutConfig c = model();
  auto src = make_pinned_storage(kPrefix * c.block_bytes());
  auto dst = make_device_storage(kPrefix * c.block_bytes());
  std::memset(reinterpret_cast<void*>(src->base()), 3, src->size());
  if (dst->host_accessible()) {
    std::memset(reinterpret_cast<void*>(dst->base()), 4,
                dst->size());  // fault the pages in, as in G1
  }
  std::vector<std::uintptr_t> bases;
  for (std::size_t r = 0; r < c.regions_per_block(); ++r)
    bases.push_back(dst->base() + r * kPrefix * c.region_bytes());
  Layout from = Layout::fully_contiguous(c, kPrefix, src->base());
  Layout to = Layout::layer_separated(c, kPrefix, bases);
  // The engine the facade uses for G2 -> G1: CUDA on a GPU, host copies where G1 is emulated.
  std::unique_ptr<TransferEngine> owned;
  if (dst->emulated()) {
    owned = std::make_unique<HostTransferEngine>(from, to);
  } else {
    owned = std::make_unique<CudaTransferEngine>(from, to, CudaDirection::kHostToDevice);
  }
  TransferEngine& engine = *owned;
  std::vector<TransferPair> pairs;
  for (std::size_t i = 0; i < kPrefix; ++i)
    pairs.push_back({static_cast<BlockId>(i), static_cast<BlockId>(i)});
  for (auto _ : state) {
    if (!engine.submit(pairs)->wait().ok()) state.SkipWithError("copy failed");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kPrefix));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(kPrefix * c.block_bytes()));
}

void BM_Engine_DiskRead_Raw(benchmark::State& state) {
  const LayoutConfig c = model();
  const auto dir = bench_dir() / ("kvbm-bench-raw-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } cleanup{dir};
  DiskStorageOptions o;
  o.directory = dir;
  o.config = c;
  o.num_blocks = kPrefix;
  auto disk = DiskStorage::create(o);
  if (!disk.ok()) {
    state.SkipWithError(disk.error().message.c_str());
    return;
  }
  auto host = make_pinned_storage(kPrefix * c.block_bytes());
  std::memset(reinterpret_cast<void*>(host->base()), 5, host->size());
  Layout layout = Layout::fully_contiguous(c, kPrefix, host->base());
  {
    DiskWriteEngine w(layout, *disk.value());
    std::vector<TransferPair> pairs;
    for (std::size_t i = 0; i < kPrefix; ++i)
      pairs.push_back({static_cast<BlockId>(i), static_cast<BlockId>(i)});
    if (!w.submit(pairs)->wait().ok()) state.SkipWithError("write failed");
  }
  DiskReadEngine r(*disk.value(), layout);
  std::vector<TransferPair> pairs;
  for (std::size_t i = 0; i < kPrefix; ++i)
    pairs.push_back({static_cast<BlockId>(i), static_cast<BlockId>(i)});
  for (auto _ : state) {
    if (!r.submit(pairs)->wait().ok()) state.SkipWithError("read failed");
  }
  state.counters["direct_io"] = disk.value()->direct_io() ? 1 : 0;
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kPrefix));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(kPrefix * c.block_bytes()));
}

BENCHMARK(BM_Pipeline_NullEngine)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Pipeline_HostEngine)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Engine_HostEngine_Alone)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Onboard_FromHost)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Engine_HostToDevice_Raw)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Onboard_FromDisk)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Engine_DiskRead_Raw)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
