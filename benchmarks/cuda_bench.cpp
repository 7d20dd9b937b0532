// CUDA transfer throughput: CudaTransferEngine beside one plain contiguous
// cudaMemcpyAsync of the same total bytes from pinned memory.
//
//   BM_CudaMemcpy_Contiguous      baseline: one cudaMemcpyAsync of the batch's bytes
//   BM_CudaEngine_Kernel          one batched-kernel launch per batch
//   BM_CudaEngine_MemcpyBatch     one cudaMemcpyBatchAsync per batch (CUDA >= 12.8)
//   BM_CudaEngine_MemcpyLoop      one cudaMemcpyAsync per region
//   BM_CudaEngine_Auto            the engine's own choice
//
// Arguments: {h2d (0: device -> host, 1: host -> device), region_kib}. The
// layout is layer separated on both sides: 32 layers x K,V x 16 tokens x
// inner x 2 bytes, inner chosen for region sizes 8 KiB to 2 MiB, so a block
// is 64 regions. A batch moves about 128 MiB (at least one block) of every
// other device block (nothing merges on the device side) to consecutive host
// blocks. Host memory is pinned (cudaHostAlloc). bytes_per_second is the
// batch's bytes over wall time (submit to completion); `vs_contiguous` is
// that over the baseline's rate for the same direction and bytes (the issue's
// target: at least 0.9).
//
// Without a CUDA device (or built without CUDA) the binary says so and exits 0.
//
//   build/release/benchmarks/cuda_bench --benchmark_min_time=0.5

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/config.h"
#include "kvbm/storage/layout.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/cuda_engine.h"

#if KVBM_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace {

using kvbm::BlockId;
using kvbm::CudaCopyMode;
using kvbm::CudaDirection;
using kvbm::Layout;
using kvbm::LayoutConfig;

constexpr std::size_t kBatchTargetBytes = std::size_t{128} << 20;

/// The pools and the batch of one region size.
struct Setup {
  LayoutConfig config;
  std::size_t batch_blocks = 0;
  std::unique_ptr<kvbm::Storage> device;  // 2 x batch_blocks blocks
  std::unique_ptr<kvbm::Storage> host;    // batch_blocks blocks, pinned
  Layout device_layout = Layout::fully_contiguous({1, 1, 1, 1, 1}, 1, 0x1000);
  Layout host_layout = Layout::fully_contiguous({1, 1, 1, 1, 1}, 1, 0x1000);
  std::vector<kvbm::TransferPair> d2h;  // device block 2i -> host block i
  std::vector<kvbm::TransferPair> h2d;  // host block i -> device block 2i

  [[nodiscard]] std::size_t batch_bytes() const { return batch_blocks * config.block_bytes(); }
};

Layout layer_separated(const LayoutConfig& config, std::size_t blocks, std::uintptr_t base) {
  std::vector<std::uintptr_t> bases(config.regions_per_block());
  for (std::size_t i = 0; i < bases.size(); ++i)
    bases[i] = base + i * blocks * config.region_bytes();
  return Layout::layer_separated(config, blocks, std::move(bases));
}

Setup& setup_for(std::size_t region_kib) {
  static std::map<std::size_t, Setup> setups;
  auto it = setups.find(region_kib);
  if (it != setups.end()) return it->second;
  Setup s;
  // region = 16 tokens x inner x 2 bytes.
  s.config = LayoutConfig{32, 2, 16, static_cast<std::uint32_t>(region_kib * 1024 / 32), 2};
  s.batch_blocks = std::max<std::size_t>(1, kBatchTargetBytes / s.config.block_bytes());
  const std::size_t device_blocks = 2 * s.batch_blocks;
  s.device = kvbm::make_device_storage(device_blocks * s.config.block_bytes());
  s.host = kvbm::make_pinned_storage(s.batch_bytes());
  s.device_layout = layer_separated(s.config, device_blocks, s.device->base());
  s.host_layout = layer_separated(s.config, s.batch_blocks, s.host->base());
  for (std::size_t i = 0; i < s.batch_blocks; ++i) {
    s.d2h.push_back({static_cast<BlockId>(2 * i), static_cast<BlockId>(i)});
    s.h2d.push_back({static_cast<BlockId>(i), static_cast<BlockId>(2 * i)});
  }
  static_cast<void>(cudaMemset(reinterpret_cast<void*>(s.device->base()), 1, s.device->size()));
  static_cast<void>(cudaDeviceSynchronize());  // the engines' streams do not wait for it
  return setups.emplace(region_kib, std::move(s)).first->second;
}

/// Bytes per second of one contiguous cudaMemcpyAsync of `bytes` between the
/// pinned and the device buffer of `s`, measured afresh at each call: each
/// engine run is paired with its own baseline, taken just before it (with
/// --benchmark_repetitions, each repetition's ratio stands on its own).
double contiguous_rate(Setup& s, bool h2d) {
  cudaStream_t stream = nullptr;
  static_cast<void>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  static_cast<void>(cudaEventCreate(&start));
  static_cast<void>(cudaEventCreate(&stop));
  auto* dev = reinterpret_cast<void*>(s.device->base());
  auto* host = reinterpret_cast<void*>(s.host->base());
  constexpr int kReps = 10;
  static_cast<void>(cudaEventRecord(start, stream));
  for (int i = 0; i < kReps; ++i) {
    static_cast<void>(
        h2d ? cudaMemcpyAsync(dev, host, s.batch_bytes(), cudaMemcpyHostToDevice, stream)
            : cudaMemcpyAsync(host, dev, s.batch_bytes(), cudaMemcpyDeviceToHost, stream));
  }
  static_cast<void>(cudaEventRecord(stop, stream));
  static_cast<void>(cudaEventSynchronize(stop));
  float ms = 0;
  static_cast<void>(cudaEventElapsedTime(&ms, start, stop));
  static_cast<void>(cudaEventDestroy(start));
  static_cast<void>(cudaEventDestroy(stop));
  static_cast<void>(cudaStreamDestroy(stream));
  return ms > 0 ? kReps * static_cast<double>(s.batch_bytes()) / (ms / 1e3) : 0.0;
}

void BM_CudaMemcpy_Contiguous(benchmark::State& state) {
  const bool h2d = state.range(0) != 0;
  Setup& s = setup_for(static_cast<std::size_t>(state.range(1)));
  cudaStream_t stream = nullptr;
  static_cast<void>(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto* dev = reinterpret_cast<void*>(s.device->base());
  auto* host = reinterpret_cast<void*>(s.host->base());
  for (auto _ : state) {
    const cudaError_t err =
        h2d ? cudaMemcpyAsync(dev, host, s.batch_bytes(), cudaMemcpyHostToDevice, stream)
            : cudaMemcpyAsync(host, dev, s.batch_bytes(), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {
      state.SkipWithError(cudaGetErrorString(err));
      break;
    }
  }
  static_cast<void>(cudaStreamDestroy(stream));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(s.batch_bytes()));
  state.counters["regions"] = 1;
}

void run_engine(benchmark::State& state, CudaCopyMode mode) {
  const bool h2d = state.range(0) != 0;
  Setup& s = setup_for(static_cast<std::size_t>(state.range(1)));
  const double baseline = contiguous_rate(s, h2d);
  kvbm::CudaEngineOptions options;
  options.mode = mode;
  std::unique_ptr<kvbm::CudaTransferEngine> engine;
  try {
    engine = h2d ? std::make_unique<kvbm::CudaTransferEngine>(s.host_layout, s.device_layout,
                                                              CudaDirection::kHostToDevice, options)
                 : std::make_unique<kvbm::CudaTransferEngine>(
                       s.device_layout, s.host_layout, CudaDirection::kDeviceToHost, options);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const auto& pairs = h2d ? s.h2d : s.d2h;
  for (auto _ : state) {
    const kvbm::TransferOutcome out = engine->submit(pairs)->wait();
    if (!out.ok()) {
      state.SkipWithError(std::string(out.message()).c_str());
      break;
    }
  }
  const auto stats = engine->stats();
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(s.batch_bytes()));
  state.counters["regions"] =
      stats.batches > 0 ? static_cast<double>(stats.copies) / static_cast<double>(stats.batches)
                        : 0;
  state.counters["vs_contiguous"] =
      benchmark::Counter(baseline > 0 ? static_cast<double>(s.batch_bytes()) / baseline : 0.0,
                         benchmark::Counter::kIsIterationInvariantRate);
  if (mode == CudaCopyMode::kAuto) {
    state.SetLabel(std::string(kvbm::to_string(
        engine->mode_for(static_cast<std::size_t>(state.counters["regions"]), s.batch_bytes()))));
  }
}

void BM_CudaEngine_Kernel(benchmark::State& state) { run_engine(state, CudaCopyMode::kKernel); }
void BM_CudaEngine_MemcpyBatch(benchmark::State& state) {
  run_engine(state, CudaCopyMode::kMemcpyBatch);
}
void BM_CudaEngine_MemcpyLoop(benchmark::State& state) {
  run_engine(state, CudaCopyMode::kMemcpyLoop);
}
void BM_CudaEngine_Auto(benchmark::State& state) { run_engine(state, CudaCopyMode::kAuto); }

void sweep(benchmark::internal::Benchmark* b) {
  b->ArgNames({"h2d", "region_kib"});
  for (int h2d : {0, 1}) {
    for (int kib : {8, 16, 32, 128, 512, 2048}) b->Args({h2d, kib});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_CudaMemcpy_Contiguous)->Apply(sweep);
BENCHMARK(BM_CudaEngine_Kernel)->Apply(sweep);
BENCHMARK(BM_CudaEngine_MemcpyBatch)->Apply(sweep);
BENCHMARK(BM_CudaEngine_MemcpyLoop)->Apply(sweep);
BENCHMARK(BM_CudaEngine_Auto)->Apply(sweep);

}  // namespace
#endif  // KVBM_HAVE_CUDA

int main(int argc, char** argv) {
  if (!KVBM_HAVE_CUDA || !kvbm::cuda_device_available()) {
    std::printf("cuda_bench: no CUDA device (%s); nothing to measure, skipping\n",
                KVBM_HAVE_CUDA ? "none usable at run time" : "kvbm was built without CUDA");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
