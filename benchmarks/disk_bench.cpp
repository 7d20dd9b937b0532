// Disk engine throughput: whole 2 MiB blocks (32 layers x K,V x 16 tokens x
// 8 heads x 128 x 2 bytes, layer separated on the host: 64 regions of 32 KiB)
// written to and read from a disk pool at queue depth qd, beside the same
// slots moved by qd bare pwrite/pread threads (no gather, no checksum) on a
// second file of the same size: the ratio engine / bare is what the engine
// costs on top of the disk. benchmarks/disk_vs_fio.sh compares with fio.
//
//   KVBM_BENCH_DISK_DIR     directory of the pool files (default /var/tmp; use a real disk, not
//                           tmpfs)
//   KVBM_BENCH_DISK_BLOCKS  blocks in the pool and per batch (default 256: a 513 MiB file)
//   KVBM_BENCH_DISK_NO_FLUSH  1: the read cases read the pool without the fdatasync that
//                           otherwise follows its writing (the state sitting D measured)
//   KVBM_BENCH_DISK_KEEP    a file name: the pool file is moved to KVBM_BENCH_DISK_DIR/NAME
//                           at exit (replacing one there), whole and written, so that a
//                           baseline (fio in benchmarks/compare.py) reads the very file the
//                           engine read, in the same state, with the same flags
//   KVBM_BENCH_DISK_ORDER   a file name: the slot order every iteration reads (and writes) is
//                           written to KVBM_BENCH_DISK_DIR/NAME, one slot index a line, so that
//                           a baseline replays the very same reads (disk_vs_fio.sh: an fio
//                           iolog of it)
//
// Each iteration moves every block once, in a random slot order, as one batch.

#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/disk/disk_engine.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/io/syscalls.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

using namespace kvbm;

constexpr LayoutConfig kConfig{
    .num_layers = 32, .outer_dim = 2, .page_size = 16, .inner_dim = 1024, .dtype_bytes = 2};

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

/// Layer-separated host memory for the pool's blocks: one allocation per
/// (layer, outer). Page aligned like pinned buffers (the engine then writes
/// straight from them with pwritev), or 64 bytes off a page (it gathers).
struct HostBlocks {
  HostBlocks(std::size_t blocks, bool page_aligned) {
    std::vector<std::uintptr_t> bases;
    const std::size_t skew = page_aligned ? 0 : 64;
    for (std::size_t r = 0; r < kConfig.regions_per_block(); ++r) {
      auto* p =
          static_cast<std::byte*>(std::aligned_alloc(4096, blocks * kConfig.region_bytes() + 4096));
      if (p == nullptr) throw std::bad_alloc();
      memory.emplace_back(p, &std::free);
      bases.push_back(reinterpret_cast<std::uintptr_t>(p + skew));
    }
    layout = std::make_unique<Layout>(Layout::layer_separated(kConfig, blocks, std::move(bases)));
  }
  std::vector<std::unique_ptr<std::byte, decltype(&std::free)>> memory;
  std::unique_ptr<Layout> layout;
};

struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n)
      : p(static_cast<std::byte*>(std::aligned_alloc(DiskStorage::kAlignment, n))) {
    std::memset(p, 0x3C, n);
  }
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* p;
};

/// The pool, a second file for the bare baseline, host memory, and a slot order.
struct Env {
  Env()
      : blocks(env_size("KVBM_BENCH_DISK_BLOCKS", 256)),
        src(blocks, true),
        src_unaligned(blocks, false),
        dst(blocks, true) {
    const char* d = std::getenv("KVBM_BENCH_DISK_DIR");
    const std::filesystem::path base = d != nullptr && *d != '\0' ? d : "/var/tmp";
    std::string tmpl = (base / "kvbm-disk-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp under " + base.string() + " failed");
    dir = tmpl;
    struct statfs sfs {};
    if (::statfs(dir.c_str(), &sfs) == 0 && sfs.f_type == 0x01021994) {
      std::fprintf(stderr, "warning: %s is tmpfs; these figures are memory, not disk\n",
                   dir.c_str());
    }
    pool = make("pool.slots");
    bare = make("bare.slots");
    std::mt19937_64 rng(42);
    const std::size_t per_base = blocks * kConfig.region_bytes();
    for (std::size_t r = 0; r < src.memory.size(); ++r) {
      for (std::size_t i = 0; i < per_base; i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(src.memory[r].get() + i, &v, 8);
      }
      std::memcpy(src_unaligned.memory[r].get() + 64, src.memory[r].get(), per_base);
      std::memset(dst.memory[r].get(), 0, per_base);
    }
    order.resize(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    write_order();
    std::fprintf(
        stderr, "disk_bench: %zu blocks of %zu bytes in %s (slot %zu bytes, O_DIRECT %s)\n", blocks,
        pool->block_bytes(), dir.c_str(), pool->slot_bytes(), pool->direct_io() ? "on" : "off");
  }
  ~Env() {
    std::error_code ec;
    if (const char* keep = std::getenv("KVBM_BENCH_DISK_KEEP"); keep != nullptr && *keep != '\0') {
      // A link made before the scratch pool removes its file on destruction.
      const std::filesystem::path kept = dir.parent_path() / keep;
      std::filesystem::remove(kept, ec);
      std::filesystem::create_hard_link(pool->path(), kept, ec);
      if (ec) std::fprintf(stderr, "disk_bench: keeping the pool file: %s\n", ec.message().c_str());
    }
    pool.reset();
    bare.reset();
    std::filesystem::remove_all(dir, ec);
  }
  /// KVBM_BENCH_DISK_ORDER: the slot order, one index a line, beside the kept pool file.
  void write_order() const {
    const char* name = std::getenv("KVBM_BENCH_DISK_ORDER");
    if (name == nullptr || *name == '\0') return;
    const std::string path = (dir.parent_path() / name).string();
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write the slot order to " + path);
    for (const BlockId b : order) std::fprintf(f, "%llu\n", static_cast<unsigned long long>(b));
    if (std::fclose(f) != 0) throw std::runtime_error("cannot write the slot order to " + path);
  }
  std::unique_ptr<DiskStorage> make(const char* name) const {
    auto r = DiskStorage::create({.directory = dir,
                                  .config = kConfig,
                                  .num_blocks = blocks,
                                  .file_name = name,
                                  .direct_io = DirectIo::kPreferred});
    if (!r.ok()) throw std::runtime_error(r.error().message);
    return std::move(r).value();
  }
  std::vector<TransferPair> pairs(bool write) const {
    std::vector<TransferPair> out;
    for (BlockId i = 0; i < blocks; ++i)
      out.push_back(write ? TransferPair{i, order[i]} : TransferPair{order[i], i});
    return out;
  }

  std::size_t blocks;
  std::filesystem::path dir;
  std::unique_ptr<DiskStorage> pool;
  std::unique_ptr<DiskStorage> bare;
  HostBlocks src;
  HostBlocks src_unaligned;
  HostBlocks dst;
  std::vector<BlockId> order;
};

Env& env() {
  static Env e;
  return e;
}

/// The engine of the benchmark's second argument: engine:0 the thread pool,
/// engine:1 io_uring (skipped where it cannot be had).
DiskEngineOptions engine_options(benchmark::State& state) {
  const bool ring = state.range(1) == 1;
  std::string why;
  if (ring && !DiskEngine::io_uring_available(&why)) state.SkipWithError(why.c_str());
  return {.queue_depth = static_cast<std::size_t>(state.range(0)),
          .io_engine = ring ? DiskIoEngine::kIoUring : DiskIoEngine::kThreadPool};
}

void write_engine(benchmark::State& state, const HostBlocks& src) {
  Env& e = env();
  DiskWriteEngine engine(*src.layout, *e.pool, engine_options(state));
  const auto pairs = e.pairs(true);
  for (auto _ : state) {
    const TransferOutcome o = engine.submit(pairs)->wait();
    if (!o.ok()) state.SkipWithError(std::string(o.message()).c_str());
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * e.blocks * kConfig.block_bytes()));
  state.counters["unstaged"] =
      static_cast<double>(engine.stats().unstaged_writes) /
      static_cast<double>(std::max<std::uint64_t>(1, engine.stats().blocks));
}

/// Page-aligned host memory: checksum + pwritev straight from the regions.
void BM_DiskWriteEngine_Write(benchmark::State& state) { write_engine(state, env().src); }
/// Host memory off the page: gather into the staging buffer, checksum, pwrite.
void BM_DiskWriteEngine_WriteStaged(benchmark::State& state) {
  write_engine(state, env().src_unaligned);
}

void BM_DiskReadEngine_Read(benchmark::State& state) {
  Env& e = env();
  static bool written = false;
  if (!written) {
    DiskWriteEngine writer(*e.src.layout, *e.pool, {.io_engine = DiskIoEngine::kThreadPool});
    const TransferOutcome o = writer.submit(e.pairs(true))->wait();
    if (!o.ok()) {
      state.SkipWithError(std::string(o.message()).c_str());
      return;
    }
    // Flushed before it is read (a FLUSH to the device: on a VM, the host writes its cache of
    // the disk image back), so that no read benefits from, or waits behind, write-back of the
    // pool just written; fio's read of the same file (benchmarks/compare.py) finds it flushed too.
    // KVBM_BENCH_DISK_NO_FLUSH=1 reads it unflushed, as sitting D did (docs/benchmarks.md).
    const char* no_flush = std::getenv("KVBM_BENCH_DISK_NO_FLUSH");
    const bool flush = no_flush == nullptr || std::string_view(no_flush) != "1";
    if (flush && ::fdatasync(e.pool->fd()) != 0) {
      state.SkipWithError("fdatasync of the pool file failed");
      return;
    }
    written = true;
  }
  DiskReadEngine engine(*e.pool, *e.dst.layout, engine_options(state));
  const auto pairs = e.pairs(false);
  for (auto _ : state) {
    const TransferOutcome o = engine.submit(pairs)->wait();
    if (!o.ok()) state.SkipWithError(std::string(o.message()).c_str());
  }
  if (std::memcmp(e.dst.memory[5].get(), e.src.memory[5].get(),
                  e.blocks * kConfig.region_bytes()) != 0) {
    state.SkipWithError("read back differs from what was written");
  }
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * e.blocks * kConfig.block_bytes()));
}

/// One pass of `threads` bare threads moving every slot with pwrite/pread
/// (continued when short), in the same random order: what the disk does
/// without the engine. Returns false when an I/O failed.
bool bare_pass(Env& e, std::size_t threads, bool write,
               std::vector<std::unique_ptr<AlignedBuffer>>& buffers) {
  const std::size_t slot = e.bare->slot_bytes();
  while (buffers.size() < threads) buffers.push_back(std::make_unique<AlignedBuffer>(slot));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::size_t i = next++; i < e.blocks; i = next++) {
        const auto offset = static_cast<std::int64_t>(e.bare->slot_offset(e.order[i]));
        const io::IoStatus s = write ? io::pwrite_full(e.bare->fd(), buffers[t]->p, slot, offset)
                                     : io::pread_full(e.bare->fd(), buffers[t]->p, slot, offset);
        if (!s) failed = true;
      }
    });
  }
  for (auto& t : pool) t.join();
  return !failed;
}

void bare_io(benchmark::State& state, bool write) {
  Env& e = env();
  const auto threads = static_cast<std::size_t>(state.range(0));
  std::vector<std::unique_ptr<AlignedBuffer>> buffers;
  static bool laid_out = false;  // reads need written extents, as the engine's do
  if (!write && !laid_out) laid_out = bare_pass(e, 4, true, buffers);
  for (auto _ : state) {
    if (!bare_pass(e, threads, write, buffers)) state.SkipWithError("bare I/O failed");
  }
  // Counted in block bytes like the engine, although each I/O moves a whole slot.
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * e.blocks * kConfig.block_bytes()));
}

void BM_BarePwrite_Write(benchmark::State& state) { bare_io(state, true); }
void BM_BarePread_Read(benchmark::State& state) { bare_io(state, false); }

/// The staged write's CPU work per block without I/O: gather 64 regions into
/// a staging buffer and XXH3 them.
void BM_DiskSlot_GatherChecksum(benchmark::State& state) {
  Env& e = env();
  AlignedBuffer staging(e.pool->slot_bytes());
  std::vector<Region> regions;
  BlockId b = 0;
  for (auto _ : state) {
    regions.clear();
    e.src_unaligned.layout->append_regions(b, regions);
    std::byte* out = staging.p;
    for (const Region& r : regions) {
      std::memcpy(out, reinterpret_cast<const void*>(r.addr), r.size);
      out += r.size;
    }
    benchmark::DoNotOptimize(XXH3_64bits(staging.p, kConfig.block_bytes()));
    b = (b + 1) % static_cast<BlockId>(e.blocks);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kConfig.block_bytes()));
}

/// The queue depth: I/Os in flight (the engine's queue_depth, the bare threads).
void depth_args(benchmark::internal::Benchmark* b) {
  b->ArgName("qd")
      ->Arg(1)
      ->Arg(2)
      ->Arg(4)
      ->Arg(8)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(1.0);
}

/// depth_args for both engines: engine:0 the thread pool, engine:1 io_uring.
void engine_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"qd", "engine"})
      ->Args({1, 0})
      ->Args({1, 1})
      ->Args({2, 0})
      ->Args({2, 1})
      ->Args({4, 0})
      ->Args({4, 1})
      ->Args({8, 0})
      ->Args({8, 1})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(1.0);
}

BENCHMARK(BM_DiskWriteEngine_Write)->Apply(engine_args);
BENCHMARK(BM_DiskWriteEngine_WriteStaged)->Apply(engine_args);
BENCHMARK(BM_BarePwrite_Write)->Apply(depth_args);
BENCHMARK(BM_DiskReadEngine_Read)->Apply(engine_args);
BENCHMARK(BM_BarePread_Read)->Apply(depth_args);
BENCHMARK(BM_DiskSlot_GatherChecksum)->Unit(benchmark::kMicrosecond);

/// The unstaged write's CPU work per block: XXH3 of 64 regions where they lie.
void BM_DiskSlot_Checksum(benchmark::State& state) {
  Env& e = env();
  std::vector<Region> regions;
  BlockId b = 0;
  for (auto _ : state) {
    regions.clear();
    e.src.layout->append_regions(b, regions);
    benchmark::DoNotOptimize(DiskStorage::checksum(regions));
    b = (b + 1) % static_cast<BlockId>(e.blocks);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kConfig.block_bytes()));
}
BENCHMARK(BM_DiskSlot_Checksum)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
