// The persistent disk pool: recovery time of a large file, and the price of
// durability on writes, each beside its baseline in the same run.
//
// Recovery: a persistent pool of KVBM_BENCH_RECOVERY_SLOTS slots (default
// 100,000) of 4 KiB blocks (8 KiB slots: an 800 MB file), every slot written,
// is recovered by DiskStorage::recover() (O_DIRECT reads, so every run reads
// the disk, not the page cache):
//   BM_DiskRecovery_Recover/threads        sequential runs of whole slots (the default for small
//   slots) BM_DiskRecovery_RecoverHeaders/threads one 4 KiB header pread per slot (the default for
//   large slots) BM_BarePread_WholeFile/threads         baseline: the same file read in 4 MiB
//   preads, nothing parsed
// Counter slots_per_s; the time per iteration is the recovery time.
//
// Writes: the same batch of 2 MiB blocks (32 x 2 x 16 x 1024 x 2 bytes,
// page-aligned host memory: pwritev straight from it) rewritten again and
// again at queue depth 4 into a scratch pool (one pwritev per slot, no sync)
// and into a persistent pool (invalidate live headers, fdatasync, payloads,
// fdatasync, headers, fdatasync), batch sizes 8 and 64:
//   BM_DiskWriteEngine_WriteScratch/batch, BM_DiskWriteEngine_WritePersistent/batch
// The ratio persistent / scratch is the price of durability.
//
//   KVBM_BENCH_DISK_DIR  directory of the pool files (default /var/tmp; a real disk, not tmpfs)

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/disk/disk_engine.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/io/syscalls.h"

namespace {

using namespace kvbm;

constexpr LayoutConfig kSmall{
    .num_layers = 2, .outer_dim = 2, .page_size = 4, .inner_dim = 128, .dtype_bytes = 2};
constexpr LayoutConfig kReal{
    .num_layers = 32, .outer_dim = 2, .page_size = 16, .inner_dim = 1024, .dtype_bytes = 2};
constexpr std::size_t kMaxBatch = 64;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Aligned {
  explicit Aligned(std::size_t n) : p(static_cast<std::byte*>(std::aligned_alloc(4096, n))) {
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0x5A, n);
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  std::byte* p;
};

struct Env {
  Env()
      : slots(env_size("KVBM_BENCH_RECOVERY_SLOTS", 100000)),
        host(kMaxBatch * kReal.block_bytes()) {
    const char* d = std::getenv("KVBM_BENCH_DISK_DIR");
    const std::filesystem::path base = d != nullptr && *d != '\0' ? d : "/var/tmp";
    std::string tmpl = (base / "kvbm-recovery-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp under " + base.string() + " failed");
    dir = tmpl;
    recovery = open("recovery", kSmall, slots, true, "bench@1");
    // Fill every slot through the engine, in batches of 4096.
    {
      Aligned blocks(4096 * kSmall.block_bytes());
      const Layout layout =
          Layout::fully_contiguous(kSmall, 4096, reinterpret_cast<std::uintptr_t>(blocks.p));
      DiskWriteEngine w(layout, *recovery, {.queue_depth = 8});
      for (std::size_t first = 0; first < slots; first += 4096) {
        std::vector<TransferPair> pairs;
        for (std::size_t i = first; i < std::min(slots, first + 4096); ++i) {
          pairs.push_back(
              {static_cast<BlockId>(i - first), static_cast<BlockId>(i), 0x1000000 + i});
        }
        const TransferOutcome o = w.submit(pairs)->wait();
        if (!o.ok()) throw std::runtime_error(std::string(o.message()));
      }
    }
    std::fprintf(stderr,
                 "disk_recovery_bench: %zu slots of %zu bytes (%.0f MB) in %s, O_DIRECT %s\n",
                 slots, recovery->slot_bytes(), static_cast<double>(recovery->file_bytes()) / 1e6,
                 dir.c_str(), recovery->direct_io() ? "on" : "off");
    scratch = open("scratch", kReal, kMaxBatch, false, "");
    persistent = open("persistent", kReal, kMaxBatch, true, "bench@1");
  }
  ~Env() {
    recovery.reset();
    scratch.reset();
    persistent.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::unique_ptr<DiskStorage> open(const std::string& sub, const LayoutConfig& config,
                                    std::size_t n, bool persist, const std::string& ns) const {
    std::filesystem::create_directory(dir / sub);
    std::filesystem::permissions(dir / sub, std::filesystem::perms::owner_all);
    DiskStorageOptions o{.directory = dir / sub, .config = config, .num_blocks = n};
    o.persistent = persist;
    o.namespace_id = ns;
    auto r = DiskStorage::create(o);
    if (!r.ok()) throw std::runtime_error(r.error().message);
    return std::move(r).value();
  }

  std::size_t slots;
  std::filesystem::path dir;
  std::unique_ptr<DiskStorage> recovery;
  std::unique_ptr<DiskStorage> scratch;
  std::unique_ptr<DiskStorage> persistent;
  Aligned host;
};

Env& env() {
  static Env e;
  return e;
}

void recover(benchmark::State& state, bool headers_only) {
  Env& e = env();
  RecoveryOptions o{.threads = static_cast<std::size_t>(state.range(0))};
  if (headers_only) o.sequential_slot_limit = 0;
  std::uint64_t recovered = 0;
  for (auto _ : state) {
    const Recovery r = e.recovery->recover(o);
    recovered = r.summary.recovered;
  }
  if (recovered != e.slots) state.SkipWithError("recovery did not find every slot");
  state.counters["slots_per_s"] = benchmark::Counter(static_cast<double>(e.slots),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DiskRecovery_Recover(benchmark::State& state) { recover(state, false); }
void BM_DiskRecovery_RecoverHeaders(benchmark::State& state) { recover(state, true); }

/// The disk's own pace: the whole file in 4 MiB preads by `threads` threads.
void BM_BarePread_WholeFile(benchmark::State& state) {
  Env& e = env();
  const auto threads = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kChunk = 4 << 20;
  const std::uint64_t bytes = e.recovery->file_bytes();
  const std::size_t chunks = (bytes + kChunk - 1) / kChunk;
  std::vector<std::unique_ptr<Aligned>> buffers;
  for (std::size_t t = 0; t < threads; ++t) buffers.push_back(std::make_unique<Aligned>(kChunk));
  for (auto _ : state) {
    std::atomic<std::size_t> next{0};
    auto reader = [&](std::size_t t) {
      for (std::size_t c; (c = next.fetch_add(1)) < chunks;) {
        const std::uint64_t at = c * kChunk;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - at));
        if (!io::pread_full(e.recovery->fd(), buffers[t]->p, n, static_cast<std::int64_t>(at)))
          std::abort();
      }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(reader, t);
    reader(0);
    for (auto& t : pool) t.join();
  }
  state.counters["slots_per_s"] = benchmark::Counter(static_cast<double>(e.slots),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void write_engine(benchmark::State& state, DiskStorage& disk) {
  Env& e = env();
  const auto batch = static_cast<std::size_t>(state.range(0));
  const Layout layout =
      Layout::fully_contiguous(kReal, kMaxBatch, reinterpret_cast<std::uintptr_t>(e.host.p));
  DiskWriteEngine engine(layout, disk, {.queue_depth = 4});
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < batch; ++i)
    pairs.push_back({i, static_cast<BlockId>(batch - 1 - i), 0x2000 + i});
  for (auto _ : state) {
    const TransferOutcome o = engine.submit(pairs)->wait();
    if (!o.ok()) state.SkipWithError(std::string(o.message()).c_str());
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * batch * kReal.block_bytes()));
}

void BM_DiskWriteEngine_WriteScratch(benchmark::State& state) {
  write_engine(state, *env().scratch);
}
void BM_DiskWriteEngine_WritePersistent(benchmark::State& state) {
  write_engine(state, *env().persistent);
}

BENCHMARK(BM_BarePread_WholeFile)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);
BENCHMARK(BM_DiskRecovery_Recover)
    ->Arg(1)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2);
BENCHMARK(BM_DiskRecovery_RecoverHeaders)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2);
BENCHMARK(BM_DiskWriteEngine_WriteScratch)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2);
BENCHMARK(BM_DiskWriteEngine_WritePersistent)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2);

}  // namespace

BENCHMARK_MAIN();
