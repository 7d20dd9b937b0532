// tests/facade/facade_test_util.h: helpers shared by the KvBlockManager tests.
//
//   TempDir            a fresh directory for the G3 file, removed with its contents
//   small_layout()     2 KiB blocks of 4 tokens (2 layers x 2 outer x 64 x 2 bytes)
//   config(g1, g2, g3) a small config: direct I/O off, 1 ms flushes, 4 bounce blocks
//   write_block / read_block   a block's bytes, through host_write/host_read (G1 may be real
//                      device memory)
//   pattern / compute  bytes that are a function of the hash; blocks computed into G1 and
//   registered
//   prefix(seed, n)    a prefix of n blocks: hashes chained from `seed`

#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/hashing.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/storage/host_access.h"
#include "kvbm/storage/layout.h"

namespace kvbm::test {

using Bytes = std::vector<std::uint8_t>;

/// A fresh directory under the temporary directory, named kvbm-<tag>-XXXXXX.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "facade") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("kvbm-" + tag + "-XXXXXX")).string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// 2 KiB blocks of 4 tokens (512-byte regions).
inline LayoutConfig small_layout() {
  return {.num_layers = 2, .outer_dim = 2, .page_size = 4, .inner_dim = 64, .dtype_bytes = 2};
}

/// A small config with tiers of g1, g2, g3 blocks (0: absent), G3's file in `dir`.
inline KvBlockManagerConfig config(std::size_t g1, std::size_t g2, std::size_t g3,
                                   const std::filesystem::path& dir = {}) {
  KvBlockManagerConfig c;
  c.layout = small_layout();
  c.device.blocks = g1;
  c.host.blocks = g2;
  c.disk.blocks = g3;
  c.disk_directory = dir;
  c.disk_direct_io = DirectIo::kOff;
  c.pipeline.batch_config.flush_interval = std::chrono::milliseconds(1);
  c.bounce_blocks = 4;
  return c;
}

/// Writes `bytes` into block `id` of `l` (host or device memory).
inline void write_block(const Layout& l, BlockId id, const Bytes& bytes) {
  std::vector<Region> regions;
  l.append_regions(id, regions);
  std::size_t off = 0;
  for (const Region& r : regions) {
    host_write(r.addr, bytes.data() + off, r.size);
    off += r.size;
  }
}

/// Reads block `id` of `l` (host or device memory).
inline Bytes read_block(const Layout& l, BlockId id) {
  std::vector<Region> regions;
  l.append_regions(id, regions);
  Bytes out;
  for (const Region& r : regions) {
    const std::size_t at = out.size();
    out.resize(at + r.size);
    host_read(out.data() + at, r.addr, r.size);
  }
  return out;
}

/// The bytes of the block with hash value `v`: a function of the value alone
/// (all a recovered block or another instance's copy keeps).
inline Bytes pattern(std::uint64_t v, std::size_t n) {
  Bytes out(n);
  std::mt19937_64 rng(v);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

/// Computes `hashes` into G1 of `kv` (bytes from pattern()) and registers them.
inline void compute(KvBlockManager& kv, std::span<const SequenceHash> hashes) {
  if (hashes.empty()) return;
  auto blocks = kv.device().allocate_blocks(hashes.size());
  ASSERT_TRUE(blocks.has_value());
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    write_block(kv.device_layout(), (*blocks)[i].block_id(),
                pattern(hashes[i].value(), kv.block_bytes()));
    complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv.block_size()).value());
  }
  (void)kv.register_blocks(std::move(complete));
}

/// A prefix of n blocks: hashes chained from `seed`.
inline std::vector<SequenceHash> prefix(std::uint64_t seed, std::size_t n) {
  std::vector<SequenceHash> out;
  std::optional<SequenceHash> parent;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(chain(parent, seed * 1000003 + i));
    parent = out.back();
  }
  return out;
}

/// Disk reads (pread) that wait, while the gate lives and is closed, until
/// open() (then read for real). Starts closed. For a manager on the thread
/// pool engine (DiskIoEngine::kThreadPool), whose reads go through pread.
class ReadGate {
 public:
  ReadGate() : override_(table()) {}
  ~ReadGate() { open(); }
  ReadGate(const ReadGate&) = delete;
  ReadGate& operator=(const ReadGate&) = delete;

  /// Lets every waiting and later read go.
  static void open() {
    {
      std::lock_guard lock(state().mu);
      state().open = true;
    }
    state().cv.notify_all();
  }
  /// Reads that have reached the gate so far.
  [[nodiscard]] static int reads() { return state().reads.load(); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    std::atomic<int> reads{0};
  };
  static State& state() {
    static State s;
    return s;
  }
  static io::SyscallTable table() {
    {
      std::lock_guard lock(state().mu);
      state().open = false;
    }
    state().reads = 0;
    io::SyscallTable t = io::real_syscalls();
    t.pread = [](int fd, void* buf, std::size_t count, std::int64_t offset) -> std::int64_t {
      state().reads.fetch_add(1);
      {
        std::unique_lock lock(state().mu);
        state().cv.wait(lock, [] { return state().open; });
      }
      return io::real_syscalls().pread(fd, buf, count, offset);
    };
    return t;
  }
  io::ScopedSyscallOverride override_;
};

}  // namespace kvbm::test
