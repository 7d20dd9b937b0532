// tests/disk/disk_test_util.h: helpers shared by the disk tests.
//
//   TempDir            a mkdtemp directory under a base, removed with its contents
//   StorageTarget      where a test pool lives: a real file system with O_DIRECT,
//                      the same without, or tmpfs (buffered fallback)
//   HostPool           host memory for a layout (fully contiguous or layer separated;
//                      odd strides and unaligned, or page aligned), random fill and
//                      per-block byte views
//   FaultInjector      a syscall table whose pread/pwrite/pwritev fail, stall or corrupt
//                      chosen disk slots (keyed by slot index), and counts what it did
//   LogCapture         routes kvbm::logger() into a string for the test's lifetime

#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "kvbm/disk/disk_storage.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/logging.h"
#include "kvbm/storage/layout.h"
#include "skip_or_fail.h"

namespace kvbm::test {

/// A 64-bit mix (splitmix64's finalizer): test data from a seed.
inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// The bytes a block of sequence hash `hash` holds in these tests: derived
/// from the hash alone, so any process can check them.
inline std::vector<std::byte> payload_of(std::uint64_t hash, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; i += 8) {
    const std::uint64_t v = splitmix(hash ^ (i * 0x100000001B3ULL));
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, bytes - i));
  }
  return out;
}

/// A slot buffer aligned to DiskStorage::kAlignment (what O_DIRECT asks).
struct SlotBuffer {
  explicit SlotBuffer(std::size_t n)
      : p(static_cast<std::byte*>(std::aligned_alloc(DiskStorage::kAlignment, n))), size(n) {}
  ~SlotBuffer() { std::free(p); }
  SlotBuffer(const SlotBuffer&) = delete;
  SlotBuffer& operator=(const SlotBuffer&) = delete;
  std::span<std::byte> span() { return {p, size}; }
  std::byte* p;
  std::size_t size;
};

/// A fresh directory from mkdtemp under `base`, removed (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(const std::filesystem::path& base) {
    std::string tmpl = (base / "kvbm-disk-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp under " << base << " failed: " << std::strerror(errno);
      return;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline bool is_tmpfs(const std::filesystem::path& p) {
  struct statfs s {};
  return ::statfs(p.c_str(), &s) == 0 && s.f_type == 0x01021994;  // TMPFS_MAGIC
}

/// Where a test's disk pool lives.
struct StorageTarget {
  const char* name;
  DirectIo direct_io;
  bool tmpfs;               // true: a tmpfs directory (/dev/shm); false: a real file system
  bool persistent = false;  // DiskStorageOptions::persistent (the engines' durable write order)
};

inline const StorageTarget kTargets[] = {
    {"odirect", DirectIo::kRequired, false},
    {"buffered", DirectIo::kOff, false},
    {"tmpfs", DirectIo::kPreferred, true},
};

/// The targets of the engine tests: kTargets and a persistent pool on a real
/// file system (O_DIRECT where it can be had).
inline const StorageTarget kEngineTargets[] = {
    kTargets[0],
    kTargets[1],
    kTargets[2],
    {"persistent", DirectIo::kPreferred, false, true},
};

/// Appended to "no O_DIRECT: <directory>" (KVBM_SKIP_OR_FAIL's reason).
inline constexpr const char* kNoDirectIoHint =
    " refuses O_DIRECT; set KVBM_TEST_DISK_DIR to a directory on a file system that takes it";

/// The reason an io_uring test cannot run (KVBM_SKIP_OR_FAIL), from
/// DiskEngine::io_uring_available()'s `why`, with the two ways to get one.
inline std::string io_uring_missing(const std::string& why) {
  return "io_uring unavailable: " + why +
         "; install liburing-dev (bash scripts/deps.sh) and reconfigure, and run where the "
         "kernel allows io_uring_setup (kernel.io_uring_disabled=0, no seccomp filter on it)";
}

/// Returns the base directory for a target, or nullopt (with the reason in
/// `why`) when this machine has none. A real file system: $KVBM_TEST_DISK_DIR,
/// else /var/tmp, else /tmp, whichever is not tmpfs. tmpfs: /dev/shm.
inline std::optional<std::filesystem::path> target_base(const StorageTarget& t, std::string& why) {
  if (t.tmpfs) {
    if (std::filesystem::is_directory("/dev/shm") && is_tmpfs("/dev/shm"))
      return std::filesystem::path("/dev/shm");
    why = "no tmpfs: /dev/shm is not a tmpfs here";
    return std::nullopt;
  }
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("KVBM_TEST_DISK_DIR"); env != nullptr && *env != '\0')
    candidates.emplace_back(env);
  candidates.emplace_back("/var/tmp");
  candidates.emplace_back("/tmp");
  for (const auto& c : candidates) {
    if (std::filesystem::is_directory(c) && !is_tmpfs(c)) return c;
  }
  why = "no real file system: no directory off tmpfs; set KVBM_TEST_DISK_DIR to one";
  return std::nullopt;
}

/// Host memory for `num_blocks` blocks in one layout. By default the
/// allocations are not page aligned and the strides are a little larger than
/// needed (stride handling, and the staged O_DIRECT write path); with
/// `page_aligned` every allocation is 4 KiB aligned and the strides are exact,
/// as with pinned buffers (the unstaged pwritev path when the sizes allow).
class HostPool {
 public:
  HostPool(const LayoutConfig& config, std::size_t num_blocks, LayoutKind kind,
           bool page_aligned = false) {
    if (kind == LayoutKind::kFullyContiguous) {
      const std::size_t stride = config.block_bytes() + (page_aligned ? 0 : 24);
      memory_.emplace_back(stride * num_blocks, page_aligned);
      layout_ = Layout::fully_contiguous(config, num_blocks, memory_[0].addr(), stride);
    } else {
      const std::size_t stride = config.region_bytes() + (page_aligned ? 0 : 8);
      std::vector<std::uintptr_t> bases;
      for (std::size_t r = 0; r < config.regions_per_block(); ++r) {
        memory_.emplace_back(stride * num_blocks, page_aligned);
        bases.push_back(memory_.back().addr());
      }
      layout_ = Layout::layer_separated(config, num_blocks, std::move(bases), stride);
    }
  }
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  [[nodiscard]] const Layout& layout() const { return *layout_; }

  /// Fills every byte (blocks and the gaps between them) from `rng`.
  void fill_random(std::mt19937_64& rng) {
    for (auto& m : memory_) {
      for (std::size_t i = 0; i < m.size; ++i) m.p[i] = static_cast<std::byte>(rng());
    }
  }
  /// Fills every byte with `v`.
  void fill(std::byte v) {
    for (auto& m : memory_) std::fill(m.p, m.p + m.size, v);
  }
  /// Returns the block's regions.
  [[nodiscard]] std::vector<Region> regions(BlockId b) const {
    std::vector<Region> out;
    layout_->append_regions(b, out);
    return out;
  }
  /// Returns the block's bytes in (layer, outer) order.
  [[nodiscard]] std::vector<std::byte> block(BlockId b) const {
    std::vector<std::byte> out;
    for (const Region& r : regions(b)) {
      const auto* p = reinterpret_cast<const std::byte*>(r.addr);
      out.insert(out.end(), p, p + r.size);
    }
    return out;
  }
  /// Returns a copy of all the memory, gaps included.
  [[nodiscard]] std::vector<std::vector<std::byte>> snapshot() const {
    std::vector<std::vector<std::byte>> out;
    for (const auto& m : memory_) out.emplace_back(m.p, m.p + m.size);
    return out;
  }

 private:
  struct Buffer {
    Buffer(std::size_t n, bool page_aligned)
        : p(static_cast<std::byte*>(page_aligned
                                        ? std::aligned_alloc(4096, (n + 4095) / 4096 * 4096)
                                        : std::malloc(n + 1))),
          size(n) {
      if (!page_aligned && reinterpret_cast<std::uintptr_t>(p) % 4096 == 0) {
        // malloc happened to return a page: shift by one byte to stay unaligned.
        offset = 1;
      }
      p += offset;
    }
    ~Buffer() {
      if (p != nullptr) std::free(p - offset);
    }
    Buffer(Buffer&& o) noexcept : p(std::exchange(o.p, nullptr)), size(o.size), offset(o.offset) {}
    Buffer& operator=(Buffer&&) = delete;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    [[nodiscard]] std::uintptr_t addr() const { return reinterpret_cast<std::uintptr_t>(p); }
    std::byte* p;
    std::size_t size;
    std::size_t offset = 0;
  };
  std::vector<Buffer> memory_;
  std::optional<Layout> layout_;
};

/// What a faulty pread or pwrite does to one slot.
enum class Fault {
  kEio,                ///< every call fails with EIO
  kEnospc,             ///< every call fails with ENOSPC
  kEintrOnce,          ///< the first call fails with EINTR, later calls are real
  kShortThenContinue,  ///< the first call moves part of the bytes (4 KiB multiple), later calls are
                       ///< real
  kShortThenEnospc,  ///< the first call moves part, the next fails with ENOSPC (a disk filling up)
  kShortThenEof,     ///< pread: the first call moves part, the next returns 0 (end of file)
  kZeroProgress,     ///< pwrite: every call returns 0
  kFlipByte,         ///< pread: real read, then one data byte of the slot flipped in the buffer
  kStall,            ///< the call waits until release() (counts how many wait at once)
};

/// A syscall table whose pread/pwrite misbehave for chosen slots. One
/// injector at a time (the fake functions reach it through a static pointer).
/// Build it before the engines that do I/O through it, so that they are
/// destroyed (and drained) first.
class FaultInjector {
 public:
  explicit FaultInjector(std::size_t slot_bytes)
      : slot_bytes_(static_cast<std::int64_t>(slot_bytes)) {
    current() = this;
    io::SyscallTable table = io::real_syscalls();
    table.pread = &fake_pread;
    table.pwrite = &fake_pwrite;
    table.pwritev = &fake_pwritev;
    override_.emplace(table);
  }
  ~FaultInjector() {
    override_.reset();
    current() = nullptr;
  }
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  void on_write(std::size_t slot, Fault f) {
    std::lock_guard lock(mu_);
    writes_[static_cast<std::int64_t>(slot)] = {f, 0};
  }
  void on_read(std::size_t slot, Fault f) {
    std::lock_guard lock(mu_);
    reads_[static_cast<std::int64_t>(slot)] = {f, 0};
  }
  /// Number of faults injected so far (calls that did not behave as the real one).
  [[nodiscard]] int injected() const { return injected_.load(); }
  /// kStall: blocks until `n` calls are stalled at once (or the timeout passes);
  /// returns the largest number seen stalled at once.
  int wait_stalled(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return stalled_ >= n; });
    return max_stalled_;
  }
  [[nodiscard]] int max_stalled() {
    std::lock_guard lock(mu_);
    return max_stalled_;
  }
  /// kStall: lets every stalled and future call through.
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  struct Rule {
    Fault fault;
    int calls;
  };
  enum class Op { kRead, kWrite };

  static FaultInjector*& current() {
    static FaultInjector* p = nullptr;
    return p;
  }

  static std::int64_t fake_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
    return current()->apply(
        Op::kRead, count, offset, static_cast<unsigned char*>(buf),
        [&](std::size_t n) { return io::real_syscalls().pread(fd, buf, n, offset); });
  }
  static std::int64_t fake_pwrite(int fd, const void* buf, std::size_t count, std::int64_t offset) {
    return current()->apply(Op::kWrite, count, offset, nullptr, [&](std::size_t n) {
      return io::real_syscalls().pwrite(fd, buf, n, offset);
    });
  }
  static std::int64_t fake_pwritev(int fd, const iovec* iov, int iovcnt, std::int64_t offset) {
    std::size_t count = 0;
    for (int i = 0; i < iovcnt; ++i) count += iov[i].iov_len;
    return current()->apply(Op::kWrite, count, offset, nullptr, [&](std::size_t n) {
      std::vector<iovec> part;  // the first n bytes of iov
      for (int i = 0; i < iovcnt && n > 0; ++i) {
        part.push_back({iov[i].iov_base, std::min(n, iov[i].iov_len)});
        n -= part.back().iov_len;
      }
      return io::real_syscalls().pwritev(fd, part.data(), static_cast<int>(part.size()), offset);
    });
  }

  static std::size_t short_count(std::size_t count) {
    std::size_t part = count / 2 / 4096 * 4096;
    return part == 0 ? count / 2 : part;  // buffered paths accept any size
  }

  /// `real(n)` performs the real call for the first n of `count` bytes.
  template <class Real>
  std::int64_t apply(Op op, std::size_t count, std::int64_t offset, unsigned char* read_buf,
                     Real real) {
    const std::int64_t slot = offset / slot_bytes_;
    Fault fault{};
    int call = 0;
    {
      std::unique_lock lock(mu_);
      auto& rules = op == Op::kRead ? reads_ : writes_;
      const auto it = rules.find(slot);
      if (it == rules.end()) {
        lock.unlock();
        return real(count);
      }
      fault = it->second.fault;
      call = it->second.calls++;
      if (fault == Fault::kStall) {
        ++stalled_;
        max_stalled_ = std::max(max_stalled_, stalled_);
        ++injected_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return released_; });
        --stalled_;
        lock.unlock();
        return real(count);
      }
    }
    auto fail = [&](int err) -> std::int64_t {
      ++injected_;
      errno = err;
      return -1;
    };
    switch (fault) {
      case Fault::kEio:
        return fail(EIO);
      case Fault::kEnospc:
        return fail(ENOSPC);
      case Fault::kEintrOnce:
        if (call == 0) return fail(EINTR);
        return real(count);
      case Fault::kShortThenContinue:
        if (call == 0) {
          ++injected_;
          return real(short_count(count));
        }
        return real(count);
      case Fault::kShortThenEnospc:
        if (call == 0) {
          ++injected_;
          return real(short_count(count));
        }
        return fail(ENOSPC);
      case Fault::kShortThenEof:
        if (call == 0) {
          ++injected_;
          return real(short_count(count));
        }
        ++injected_;
        return 0;
      case Fault::kZeroProgress:
        ++injected_;
        return 0;
      case Fault::kFlipByte: {
        const std::int64_t n = real(count);
        if (n > 0 && read_buf != nullptr) {
          ++injected_;
          read_buf[0] ^= 0x20;
        }
        return n;
      }
      case Fault::kStall:
        break;
    }
    return real(count);
  }

  std::int64_t slot_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, Rule> reads_;
  std::map<std::int64_t, Rule> writes_;
  int stalled_ = 0;
  int max_stalled_ = 0;
  bool released_ = false;
  std::atomic<int> injected_{0};
  std::optional<io::ScopedSyscallOverride> override_;
};

/// Sends kvbm::logger() output to a string while alive.
class LogCapture {
 public:
  LogCapture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto log = std::make_shared<spdlog::logger>("kvbm", sink);
    log->set_level(spdlog::level::trace);
    set_logger(log);
  }
  ~LogCapture() { set_logger(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  [[nodiscard]] std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

/// Flips one byte of the file at `offset` through a separate descriptor (the
/// library does not know), then syncs it to the device.
inline void flip_byte_behind_the_back(const std::filesystem::path& file, std::uint64_t offset) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

}  // namespace kvbm::test
