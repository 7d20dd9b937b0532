// Tests of kvbm/disk/disk_engine.h: host -> disk -> host round trips with
// random bytes for both host layouts and odd sizes, every injected fault with
// the exact pairs reported failed, corruption behind the library's back,
// concurrency (queue_depth I/Os really in flight, submit never blocks) and misuse.

#include "kvbm/disk/disk_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "disk/disk_test_util.h"
#include "test_util.h"

namespace kvbm {
namespace disk_engine_test {

using test::Fault;
using test::FaultInjector;
using test::HostPool;
using test::StorageTarget;
using test::TempDir;

// Odd sizes: nothing is a power of two, blocks are not multiples of 4096.
const LayoutConfig kTiny{
    .num_layers = 3, .outer_dim = 2, .page_size = 5, .inner_dim = 7, .dtype_bytes = 2};  // 420 B
const LayoutConfig kOdd{.num_layers = 4,
                        .outer_dim = 2,
                        .page_size = 16,
                        .inner_dim = 100,
                        .dtype_bytes = 2};  // 25600 B
const LayoutConfig kMla{
    .num_layers = 5, .outer_dim = 1, .page_size = 3, .inner_dim = 577, .dtype_bytes = 1};  // 8655 B
const LayoutConfig kAligned{.num_layers = 3,
                            .outer_dim = 2,
                            .page_size = 16,
                            .inner_dim = 256,
                            .dtype_bytes = 2};  // 48 KiB, 8 KiB regions
const LayoutConfig kReal{.num_layers = 32,
                         .outer_dim = 2,
                         .page_size = 16,
                         .inner_dim = 1024,
                         .dtype_bytes = 2};  // 2 MiB

std::vector<std::size_t> indices(std::initializer_list<std::size_t> l) { return l; }

/// Returns counter `name{path="<path>"}` in `registry`, or -1 when absent.
double path_counter(prometheus::Registry& registry, const std::string& name,
                    const std::string& path) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "path" && l.value == path) return m.counter.value;
      }
    }
  }
  return -1;
}

class DiskEngineTest
    : public ::testing::TestWithParam<std::tuple<StorageTarget, LayoutKind, DiskIoEngine>> {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(target(), why);
    if (!base) KVBM_SKIP_OR_FAIL(why);
    if (engine() == DiskIoEngine::kIoUring && !DiskEngine::io_uring_available(&why))
      KVBM_SKIP_OR_FAIL(test::io_uring_missing(why));
    dir_ = std::make_unique<TempDir>(*base);
    seed_ = test::test_seed();
    rng_.seed(seed_);
  }
  [[nodiscard]] const StorageTarget& target() const { return std::get<0>(GetParam()); }
  [[nodiscard]] LayoutKind kind() const { return std::get<1>(GetParam()); }
  [[nodiscard]] DiskIoEngine engine() const { return std::get<2>(GetParam()); }
  /// `o` with the engine under test.
  [[nodiscard]] DiskEngineOptions opts(DiskEngineOptions o = {}) const {
    o.io_engine = engine();
    return o;
  }

  /// Creates a pool; on a file system without O_DIRECT (for kRequired) sets skip_.
  std::unique_ptr<DiskStorage> make_storage(const LayoutConfig& config, std::size_t blocks) {
    DiskStorageOptions o{.directory = dir_->path(),
                         .config = config,
                         .num_blocks = blocks,
                         .file_name = {},
                         .direct_io = target().direct_io};
    if (target().persistent) {
      o.persistent = true;
      o.file_name = "pool-" + std::to_string(storages_++) + ".slots";
    }
    auto r = DiskStorage::create(o);
    if (!r.ok() && r.error().code == EINVAL && o.direct_io == DirectIo::kRequired) {
      skip_ = "no O_DIRECT: " + dir_->path().string() + test::kNoDirectIoHint;
      return nullptr;
    }
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(r).value() : nullptr;
  }

  std::vector<BlockId> permutation(std::size_t n) {
    std::vector<BlockId> p(n);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng_);
    return p;
  }

  /// Writes host blocks 0..n-1 of `src` to disk slots perm[i]; returns the outcome.
  TransferOutcome write_all(const HostPool& src, DiskStorage& disk,
                            const std::vector<BlockId>& perm, std::size_t queue_depth = 3) const {
    DiskWriteEngine w(src.layout(), disk, opts({.queue_depth = queue_depth}));
    std::vector<TransferPair> pairs;
    for (BlockId i = 0; i < perm.size(); ++i) pairs.push_back({i, perm[i]});
    return w.submit(pairs)->wait();
  }

  std::unique_ptr<TempDir> dir_;
  std::string skip_;
  int storages_ = 0;
  std::uint32_t seed_ = 0;
  std::mt19937_64 rng_;
};

/// The tests that inject faults through the syscall table: only the thread pool's I/O passes
/// through it (io_uring's goes to the kernel), so they are instantiated for the thread pool alone.
class DiskEngineFaultTest : public DiskEngineTest {};

#define KVBM_STORAGE_OR_SKIP(var, config, blocks)       \
  auto var = make_storage(config, blocks);              \
  if (!var && !skip_.empty()) KVBM_SKIP_OR_FAIL(skip_); \
  ASSERT_TRUE(var)

/// Round trip host -> disk -> host for one config: random bytes, a random
/// permutation on each leg, several concurrent batches, byte-for-byte checks,
/// and the source left exactly as it was.
void round_trip(DiskStorage& disk, const LayoutConfig& config, LayoutKind src_kind,
                LayoutKind dst_kind, std::mt19937_64& rng, bool page_aligned = false,
                DiskIoEngine engine = DiskIoEngine::kThreadPool) {
  const std::size_t n = disk.num_blocks();
  HostPool src(config, n, src_kind, page_aligned);
  HostPool dst(config, n, dst_kind, page_aligned);
  const bool unstaged = disk.can_write_from(src.regions(0));
  src.fill_random(rng);
  dst.fill(std::byte{0xEE});
  const auto before = src.snapshot();

  std::vector<BlockId> to_disk(n);
  std::iota(to_disk.begin(), to_disk.end(), 0);
  std::shuffle(to_disk.begin(), to_disk.end(), rng);
  std::vector<BlockId> to_host = to_disk;
  std::shuffle(to_host.begin(), to_host.end(), rng);

  {
    DiskWriteEngine w(src.layout(), disk, {.queue_depth = 3, .io_engine = engine});
    EXPECT_EQ(w.io_engine(), engine);
    std::vector<std::shared_ptr<TransferCompletion>> done;
    const std::size_t split = n / 3 + 1;
    for (std::size_t first = 0; first < n; first += split) {
      std::vector<TransferPair> pairs;
      for (std::size_t i = first; i < std::min(n, first + split); ++i) {
        pairs.push_back({static_cast<BlockId>(i), to_disk[i]});
      }
      done.push_back(w.submit(pairs));
    }
    for (auto& d : done) {
      const TransferOutcome& o = d->wait();
      EXPECT_TRUE(o.ok()) << o.message();
    }
    EXPECT_EQ(w.stats().blocks, n);
    EXPECT_EQ(w.stats().failed_blocks, 0U);
    EXPECT_EQ(w.stats().bytes, n * config.block_bytes());
    EXPECT_EQ(w.stats().batches, done.size());
    EXPECT_EQ(w.stats().unstaged_writes, unstaged ? n : 0U)
        << "write path: " << (unstaged ? "pwritev" : "staged");
  }
  {
    DiskReadEngine r(disk, dst.layout(), {.queue_depth = 2, .workers = 2, .io_engine = engine});
    std::vector<TransferPair> pairs;
    for (BlockId i = 0; i < n; ++i) pairs.push_back({to_disk[i], to_host[i]});
    const TransferOutcome o = r.submit(pairs)->wait();  // a copy: the completion is a temporary
    ASSERT_TRUE(o.ok()) << o.message();
    EXPECT_EQ(r.stats().blocks, n);
  }
  for (BlockId i = 0; i < n; ++i) {
    ASSERT_EQ(dst.block(to_host[i]), src.block(i))
        << "host block " << i << " -> disk " << to_disk[i] << " -> host " << to_host[i];
  }
  EXPECT_EQ(src.snapshot(), before) << "the source must not change";
}

TEST_P(DiskEngineTest, RoundTripOddSizes) {
  for (const LayoutConfig& config : {kTiny, kOdd, kMla}) {
    KVBM_STORAGE_OR_SKIP(disk, config, 23);
    round_trip(*disk, config, kind(), kind(), rng_, false, engine());
  }
}

TEST_P(DiskEngineTest, RoundTripPageAlignedHostMemory) {
  for (const LayoutConfig& config : {kAligned, kOdd}) {
    KVBM_STORAGE_OR_SKIP(disk, config, 17);
    if (config == kAligned) {
      HostPool probe(config, 1, kind(), true);
      EXPECT_TRUE(disk->can_write_from(probe.regions(0)))
          << "aligned regions must take the pwritev path";
    }
    round_trip(*disk, config, kind(), kind(), rng_, true, engine());
  }
}

TEST_P(DiskEngineTest, RoundTripRealisticTwoMiBBlocks) {
  for (const bool page_aligned : {false, true}) {
    KVBM_STORAGE_OR_SKIP(disk, kReal, 6);
    round_trip(*disk, kReal, kind(), kind(), rng_, page_aligned, engine());
  }
}

TEST_P(DiskEngineTest, RoundTripIntoTheOtherLayout) {
  const LayoutKind other = kind() == LayoutKind::kFullyContiguous ? LayoutKind::kLayerSeparated
                                                                  : LayoutKind::kFullyContiguous;
  KVBM_STORAGE_OR_SKIP(disk, kOdd, 9);
  round_trip(*disk, kOdd, kind(), other, rng_, false, engine());
}

// ---- injected write faults ----

struct FaultCase {
  Fault fault;
  bool fails;
  int err;  // errno in the message when it fails
};

/// The two write paths: gathered into the staging buffer (unaligned host
/// memory under O_DIRECT) and pwritev straight from host memory (page-aligned
/// host memory, or any with buffered I/O).
struct WritePath {
  const char* name;
  LayoutConfig config;
  bool page_aligned;
};
const WritePath kWritePaths[] = {{"unaligned", kOdd, false}, {"page_aligned", kAligned, true}};

TEST_P(DiskEngineFaultTest, EveryWriteFaultFailsExactlyTheAffectedPairs) {
  const FaultCase cases[] = {
      {Fault::kEio, true, EIO},
      {Fault::kEnospc, true, ENOSPC},
      {Fault::kEintrOnce, false, 0},
      {Fault::kShortThenContinue, false, 0},
      {Fault::kShortThenEnospc, true, ENOSPC},
      {Fault::kZeroProgress, true, EIO},
  };
  const std::size_t n = 8;
  const auto victims = indices({1, 4, 6});
  for (const WritePath& path : kWritePaths) {
    for (const FaultCase& c : cases) {
      SCOPED_TRACE(std::string("host memory ") + path.name + ", fault " +
                   std::to_string(static_cast<int>(c.fault)));
      KVBM_STORAGE_OR_SKIP(disk, path.config, n);
      HostPool src(path.config, n, kind(), path.page_aligned);
      src.fill_random(rng_);
      const auto before = src.snapshot();
      const auto perm = permutation(n);
      TransferOutcome outcome;
      int injected = 0;
      {
        FaultInjector faults(disk->slot_bytes());
        for (std::size_t v : victims) faults.on_write(perm[v], c.fault);
        test::LogCapture log;
        outcome = write_all(src, *disk, perm);
        injected = faults.injected();
        EXPECT_EQ(log.text().find("pairs failed") != std::string::npos, c.fails) << log.text();
      }
      EXPECT_GE(injected, 3) << "every victim saw its fault";
      EXPECT_EQ(outcome.failed, c.fails ? victims : std::vector<std::size_t>{});
      if (c.fails) {
        EXPECT_NE(outcome.message().find("pair 1 "), std::string::npos) << outcome.message();
        EXPECT_NE(outcome.message().find(std::strerror(c.err)), std::string::npos)
            << outcome.message();
        ASSERT_TRUE(outcome.error.has_value());
        EXPECT_EQ(outcome.error->code, c.err);
        EXPECT_EQ(outcome.error->kind, c.err == ENOSPC ? ErrorKind::kNoSpace : ErrorKind::kIo);
      } else {
        EXPECT_EQ(outcome.message(), "");
      }
      EXPECT_EQ(src.snapshot(), before) << "the source must not change";

      // Read everything back without faults: the good pairs round trip, the
      // failed ones never became readable.
      HostPool back(path.config, n, kind());
      back.fill(std::byte{0xEE});
      DiskReadEngine r(*disk, back.layout(), opts({.queue_depth = 2}));
      std::vector<TransferPair> pairs;
      for (BlockId i = 0; i < n; ++i) pairs.push_back({perm[i], i});
      const TransferOutcome read =
          r.submit(pairs)->wait();  // a copy: the completion is a temporary
      EXPECT_EQ(read.failed, outcome.failed);
      for (BlockId i = 0; i < n; ++i) {
        if (std::find(outcome.failed.begin(), outcome.failed.end(), i) != outcome.failed.end())
          continue;
        EXPECT_EQ(back.block(i), src.block(i)) << "pair " << i;
      }
    }
  }
}

TEST_P(DiskEngineFaultTest, MixedWriteFaultsInOneBatch) {
  const std::size_t n = 10;
  for (const WritePath& path : kWritePaths) {
    SCOPED_TRACE(std::string("host memory ") + path.name);
    KVBM_STORAGE_OR_SKIP(disk, path.config, n);
    HostPool src(path.config, n, kind(), path.page_aligned);
    src.fill_random(rng_);
    const auto perm = permutation(n);
    TransferOutcome outcome;
    {
      FaultInjector faults(disk->slot_bytes());
      faults.on_write(perm[0], Fault::kEio);
      faults.on_write(perm[2], Fault::kEintrOnce);
      faults.on_write(perm[3], Fault::kEnospc);
      faults.on_write(perm[5], Fault::kShortThenContinue);
      faults.on_write(perm[6], Fault::kShortThenEnospc);
      test::LogCapture log;
      auto registry = std::make_shared<prometheus::Registry>();
      DiskWriteEngine w(
          src.layout(), *disk,
          opts({.queue_depth = 4, .workers = 4, .name = "offload_g3", .registry = registry}));
      EXPECT_EQ(w.name(), "offload_g3");
      std::vector<TransferPair> pairs;
      for (BlockId i = 0; i < n; ++i) pairs.push_back({i, perm[i]});
      outcome = w.submit(pairs)->wait();
      EXPECT_EQ(w.stats().failed_blocks, 3U);
      EXPECT_EQ(w.stats().blocks, n - 3);
      EXPECT_EQ(w.stats().bytes, (n - 3) * path.config.block_bytes());
      EXPECT_EQ(w.stats().unstaged_writes, disk->can_write_from(src.regions(0)) ? n - 3 : 0U);
      EXPECT_EQ(path_counter(*registry, "kvbm_transfer_failed_blocks_total", "offload_g3"), 3.0);
      EXPECT_EQ(path_counter(*registry, "kvbm_transfer_blocks_total", "offload_g3"),
                static_cast<double>(n - 3));
      EXPECT_EQ(path_counter(*registry, "kvbm_transfer_bytes_total", "offload_g3"),
                static_cast<double>((n - 3) * path.config.block_bytes()));
    }
    EXPECT_EQ(outcome.failed, indices({0, 3, 6}));
    EXPECT_NE(outcome.message().find("pair 0 "), std::string::npos) << outcome.message();
    EXPECT_NE(outcome.message().find(std::strerror(EIO)), std::string::npos) << outcome.message();
  }
}

// ---- injected read faults ----

TEST_P(DiskEngineFaultTest, EveryReadFaultFailsExactlyTheAffectedPairsAndLeavesThemUntouched) {
  const FaultCase cases[] = {
      {Fault::kEio, true, EIO},
      {Fault::kEintrOnce, false, 0},
      {Fault::kShortThenContinue, false, 0},
      {Fault::kShortThenEof, true, ENODATA},
      {Fault::kFlipByte, true, EBADMSG},
  };
  const std::size_t n = 8;
  KVBM_STORAGE_OR_SKIP(disk, kOdd, n);
  HostPool src(kOdd, n, kind());
  src.fill_random(rng_);
  const auto perm = permutation(n);
  ASSERT_TRUE(write_all(src, *disk, perm).ok());
  const auto victims = indices({0, 3, 7});
  for (const FaultCase& c : cases) {
    SCOPED_TRACE("fault " + std::to_string(static_cast<int>(c.fault)));
    HostPool dst(kOdd, n, kind());
    dst.fill(std::byte{0xEE});
    const std::vector<std::byte> untouched(kOdd.block_bytes(), std::byte{0xEE});
    TransferOutcome outcome;
    {
      FaultInjector faults(disk->slot_bytes());
      for (std::size_t v : victims) faults.on_read(perm[v], c.fault);
      test::LogCapture log;
      DiskReadEngine r(*disk, dst.layout(), opts({.queue_depth = 3, .workers = 5}));
      std::vector<TransferPair> pairs;
      for (BlockId i = 0; i < n; ++i) pairs.push_back({perm[i], i});
      outcome = r.submit(pairs)->wait();
      EXPECT_GE(faults.injected(), 3);
      EXPECT_EQ(r.stats().failed_blocks, c.fails ? victims.size() : 0U);
    }
    EXPECT_EQ(outcome.failed, c.fails ? victims : std::vector<std::size_t>{});
    if (c.fails) {
      EXPECT_NE(outcome.message().find("pair 0 "), std::string::npos) << outcome.message();
      ASSERT_TRUE(outcome.error.has_value());
      EXPECT_EQ(outcome.error->code, c.err);
      EXPECT_EQ(outcome.error->kind, c.err == EBADMSG ? ErrorKind::kCorrupt : ErrorKind::kIo);
      if (c.err == EBADMSG) {
        EXPECT_NE(outcome.message().find("checksum mismatch"), std::string::npos)
            << outcome.message();
      } else {
        EXPECT_NE(outcome.message().find(std::strerror(c.err)), std::string::npos)
            << outcome.message();
      }
    }
    for (BlockId i = 0; i < n; ++i) {
      const bool failed =
          std::find(outcome.failed.begin(), outcome.failed.end(), i) != outcome.failed.end();
      EXPECT_EQ(dst.block(i), failed ? untouched : src.block(i))
          << "pair " << i << (failed ? " (failed)" : "");
    }
  }
}

TEST_P(DiskEngineTest, FileCorruptedBehindTheLibrarysBackIsDetectedOnRead) {
  const std::size_t n = 8;
  KVBM_STORAGE_OR_SKIP(disk, kOdd, n);
  HostPool src(kOdd, n, kind());
  src.fill_random(rng_);
  const auto perm = permutation(n);
  ASSERT_TRUE(write_all(src, *disk, perm).ok());
  // Pair 2: one data byte flipped; pair 5: one header byte flipped; pair 6:
  // its slot overwritten with pair 1's slot, header and all (a misdirected write).
  test::flip_byte_behind_the_back(disk->path(),
                                  disk->slot_offset(perm[2]) + kOdd.block_bytes() / 2);
  test::flip_byte_behind_the_back(disk->path(),
                                  disk->slot_offset(perm[5]) + disk->slot_bytes() - 40);
  {
    std::vector<char> slot(disk->slot_bytes());
    const int fd = ::open(disk->path().c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, slot.data(), slot.size(), static_cast<off_t>(disk->slot_offset(perm[1]))),
              static_cast<ssize_t>(slot.size()));
    ASSERT_EQ(
        ::pwrite(fd, slot.data(), slot.size(), static_cast<off_t>(disk->slot_offset(perm[6]))),
        static_cast<ssize_t>(slot.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  HostPool dst(kOdd, n, kind());
  dst.fill(std::byte{0xEE});
  test::LogCapture log;
  auto registry = std::make_shared<prometheus::Registry>();
  DiskReadEngine r(*disk, dst.layout(), opts({.registry = registry}));
  EXPECT_EQ(r.name(), "disk_to_host");
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < n; ++i) pairs.push_back({perm[i], i});
  const TransferOutcome o = r.submit(pairs)->wait();  // a copy: the completion is a temporary
  EXPECT_EQ(o.failed, indices({2, 5, 6}));
  EXPECT_EQ(path_counter(*registry, "kvbm_transfer_failed_blocks_total", "disk_to_host"), 3.0);
  EXPECT_EQ(path_counter(*registry, "kvbm_transfer_blocks_total", "disk_to_host"), 5.0);
  EXPECT_NE(o.message().find("pair 2 "), std::string::npos) << o.message();
  EXPECT_NE(o.message().find("checksum mismatch"), std::string::npos) << o.message();
  const std::vector<std::byte> untouched(kOdd.block_bytes(), std::byte{0xEE});
  for (BlockId i : {2U, 5U, 6U}) EXPECT_EQ(dst.block(i), untouched) << i;
  for (BlockId i : {0U, 1U, 3U, 4U, 7U}) EXPECT_EQ(dst.block(i), src.block(i)) << i;
}

TEST_P(DiskEngineTest, FileTruncatedBehindTheLibrarysBackFailsTheReadsPastItsEnd) {
  // A real short read: slot 4 ends half way (at a 4 KiB boundary, as O_DIRECT
  // asks), slot 5 is gone. Both fail with ENODATA, as pread_full reports the
  // end of the file, and leave their destinations untouched.
  const std::size_t n = 6;
  KVBM_STORAGE_OR_SKIP(disk, kOdd, n);
  HostPool src(kOdd, n, kind());
  src.fill_random(rng_);
  std::vector<BlockId> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  ASSERT_TRUE(write_all(src, *disk, identity).ok());
  const std::uint64_t half = disk->slot_bytes() / 2 / DiskStorage::kAlignment;
  ASSERT_EQ(::truncate(disk->path().c_str(),
                       static_cast<off_t>(disk->slot_offset(4) + half * DiskStorage::kAlignment)),
            0);
  HostPool dst(kOdd, n, kind());
  dst.fill(std::byte{0xEE});
  test::LogCapture log;
  DiskReadEngine r(*disk, dst.layout(), opts({.queue_depth = 2}));
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < n; ++i) pairs.push_back({i, i});
  const TransferOutcome o = r.submit(pairs)->wait();  // a copy: the completion is a temporary
  EXPECT_EQ(o.failed, indices({4, 5}));
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->code, ENODATA) << *o.error;
  const std::vector<std::byte> untouched(kOdd.block_bytes(), std::byte{0xEE});
  for (BlockId i : {4U, 5U}) EXPECT_EQ(dst.block(i), untouched) << i;
  for (BlockId i = 0; i < 4; ++i) EXPECT_EQ(dst.block(i), src.block(i)) << i;
}

TEST_P(DiskEngineTest, ReadingASlotNeverWrittenFailsThatPairOnly) {
  const std::size_t n = 4;
  KVBM_STORAGE_OR_SKIP(disk, kTiny, n);
  HostPool src(kTiny, n, kind());
  src.fill_random(rng_);
  {
    DiskWriteEngine w(src.layout(), *disk, opts());
    const TransferPair pairs[] = {{0, 0}, {1, 1}, {3, 3}};
    ASSERT_TRUE(w.submit(pairs)->wait().ok());
  }
  HostPool dst(kTiny, n, kind());
  test::LogCapture log;
  DiskReadEngine r(*disk, dst.layout(), opts());
  const TransferPair pairs[] = {{3, 0}, {2, 1}, {0, 2}};
  const TransferOutcome o = r.submit(pairs)->wait();  // a copy: the completion is a temporary
  EXPECT_EQ(o.failed, indices({1}));
  EXPECT_NE(o.message().find("never written"), std::string::npos) << o.message();
  EXPECT_EQ(dst.block(0), src.block(3));
  EXPECT_EQ(dst.block(2), src.block(0));
}

TEST_P(DiskEngineTest, ReadingASlotForAnotherSequenceHashFailsThatPairAndLeavesItUntouched) {
  // Both paths (straight from host memory, and staged) record the pair's hash.
  const std::size_t n = 3;
  KVBM_STORAGE_OR_SKIP(disk, kTiny, n);
  HostPool src(kTiny, n, kind());
  src.fill_random(rng_);
  {
    DiskWriteEngine w(src.layout(), *disk, opts());
    const TransferPair pairs[] = {{0, 0, 0x100}, {1, 1, 0x101}, {2, 2, 0x102}};
    ASSERT_TRUE(w.submit(pairs)->wait().ok());
  }
  HostPool dst(kTiny, n, kind());
  dst.fill(std::byte{0xEE});
  const auto untouched = dst.block(1);
  test::LogCapture log;
  DiskReadEngine r(*disk, dst.layout(), opts());
  // Slot 1 holds hash 0x101's bytes; asking it for 0x100 must fail.
  const TransferPair pairs[] = {{0, 0, 0x100}, {1, 1, 0x100}, {2, 2, 0x102}};
  const TransferOutcome o = r.submit(pairs)->wait();  // a copy: the completion is a temporary
  EXPECT_EQ(o.failed, indices({1}));
  EXPECT_NE(o.message().find("sequence hash 257, not 256"), std::string::npos) << o.message();
  ASSERT_TRUE(o.error.has_value());
  EXPECT_EQ(o.error->kind, ErrorKind::kCorrupt) << *o.error;
  EXPECT_EQ(dst.block(0), src.block(0));
  EXPECT_EQ(dst.block(1), untouched);
  EXPECT_EQ(dst.block(2), src.block(2));
}

std::string engine_param_name(
    const ::testing::TestParamInfo<std::tuple<StorageTarget, LayoutKind, DiskIoEngine>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" +
         std::string(to_string(std::get<1>(info.param))) + "_" +
         std::string(to_string(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Targets, DiskEngineTest,
    ::testing::Combine(::testing::ValuesIn(test::kEngineTargets),
                       ::testing::Values(LayoutKind::kFullyContiguous, LayoutKind::kLayerSeparated),
                       ::testing::Values(DiskIoEngine::kThreadPool, DiskIoEngine::kIoUring)),
    engine_param_name);

INSTANTIATE_TEST_SUITE_P(Targets, DiskEngineFaultTest,
                         ::testing::Combine(::testing::ValuesIn(test::kEngineTargets),
                                            ::testing::Values(LayoutKind::kFullyContiguous,
                                                              LayoutKind::kLayerSeparated),
                                            ::testing::Values(DiskIoEngine::kThreadPool)),
                         engine_param_name);

// ---- concurrency, lifetime and misuse (one target is enough) ----

class DiskEngineBehaviourTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(test::kTargets[1], why);  // a real file system, buffered or not
    if (!base) KVBM_SKIP_OR_FAIL(why);
    dir_ = std::make_unique<TempDir>(*base);
    auto r = DiskStorage::create(
        {.directory = dir_->path(), .config = kOdd, .num_blocks = kBlocks, .file_name = {}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    disk_ = std::move(r).value();
    host_.emplace(kOdd, kBlocks, LayoutKind::kLayerSeparated);
    std::mt19937_64 rng(7);
    host_->fill_random(rng);
  }
  std::vector<TransferPair> identity(std::size_t first, std::size_t count) const {
    std::vector<TransferPair> pairs;
    for (std::size_t i = first; i < first + count; ++i)
      pairs.push_back({static_cast<BlockId>(i), static_cast<BlockId>(i)});
    return pairs;
  }
  static constexpr std::size_t kBlocks = 16;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<DiskStorage> disk_;
  std::optional<HostPool> host_;
};

TEST_F(DiskEngineBehaviourTest, QueueDepthIsTheNumberOfIosInFlight) {
  struct Case {
    std::size_t queue_depth;
    std::size_t workers;  // option
    std::size_t threads;  // expected
  };
  for (const Case c : {Case{1, 1, 1}, Case{3, 3, 3}, Case{2, 0, 4}, Case{2, 5, 5}}) {
    SCOPED_TRACE("queue_depth " + std::to_string(c.queue_depth) + ", workers " +
                 std::to_string(c.workers));
    const int depth = static_cast<int>(c.queue_depth);
    FaultInjector faults(disk_->slot_bytes());
    for (BlockId i = 0; i < kBlocks; ++i) faults.on_write(i, Fault::kStall);
    DiskWriteEngine w(host_->layout(), *disk_,
                      {.queue_depth = c.queue_depth,
                       .workers = c.workers,
                       .io_engine = DiskIoEngine::kThreadPool});
    EXPECT_EQ(w.workers(), c.threads);
    EXPECT_EQ(w.queue_depth(), c.queue_depth);
    auto done = w.submit(identity(0, kBlocks));
    EXPECT_EQ(faults.wait_stalled(depth), depth);
    // The other workers have prepared their blocks by now and wait for the
    // disk; give a would-be extra I/O a moment to show up: none may.
    EXPECT_EQ(faults.wait_stalled(depth + 1, std::chrono::milliseconds(200)), depth);
    faults.release();
    EXPECT_TRUE(done->wait().ok()) << done->wait().message();
    EXPECT_EQ(faults.max_stalled(), depth);
  }
}

TEST_F(DiskEngineBehaviourTest, SubmitReturnsAtOnceWhileTheDiskIsStalled) {
  FaultInjector faults(disk_->slot_bytes());
  for (BlockId i = 0; i < kBlocks; ++i) faults.on_write(i, Fault::kStall);
  DiskWriteEngine w(host_->layout(), *disk_,
                    {.queue_depth = 2, .io_engine = DiskIoEngine::kThreadPool});
  auto first = w.submit(identity(0, 8));
  auto second = w.submit(identity(8, 8));  // the workers are all blocked: this must still return
  faults.wait_stalled(2);
  EXPECT_FALSE(first->done());
  EXPECT_FALSE(second->done());
  faults.release();
  EXPECT_TRUE(first->wait().ok());
  EXPECT_TRUE(second->wait().ok());
}

TEST_F(DiskEngineBehaviourTest, DestructionWaitsForEveryAcceptedBatch) {
  std::vector<std::shared_ptr<TransferCompletion>> done;
  std::atomic<int> callbacks{0};
  {
    DiskWriteEngine w(host_->layout(), *disk_, {.queue_depth = 2});
    for (std::size_t b = 0; b < 4; ++b) {
      done.push_back(w.submit(identity(b * 4, 4)));
      done.back()->on_complete([&](const TransferOutcome& o) {
        if (o.ok()) ++callbacks;
      });
    }
  }
  for (auto& d : done) {
    EXPECT_TRUE(d->done());
    EXPECT_TRUE(d->wait().ok());
  }
  EXPECT_EQ(callbacks.load(), 4);
}

TEST_F(DiskEngineBehaviourTest, ReadsAndWritesOfDifferentSlotsRunConcurrently) {
  {
    DiskWriteEngine w(host_->layout(), *disk_);
    ASSERT_TRUE(w.submit(identity(0, 8))->wait().ok());
  }
  HostPool dst(kOdd, kBlocks, LayoutKind::kFullyContiguous);
  DiskWriteEngine w(host_->layout(), *disk_);
  DiskReadEngine r(*disk_, dst.layout());
  for (int round = 0; round < 5; ++round) {
    auto writes = w.submit(identity(8, 8));
    auto reads = r.submit(identity(0, 8));
    EXPECT_TRUE(writes->wait().ok());
    EXPECT_TRUE(reads->wait().ok());
  }
  for (BlockId i = 0; i < 8; ++i) EXPECT_EQ(dst.block(i), host_->block(i));
}

TEST_F(DiskEngineBehaviourTest, AutoIsTheThreadPoolAndIoEngineSaysWhichRuns) {
  DiskWriteEngine automatic(host_->layout(), *disk_);
  EXPECT_EQ(automatic.io_engine(), DiskIoEngine::kThreadPool);
  EXPECT_EQ(automatic.workers(), 2 * automatic.queue_depth());
  std::string why;
  const bool ring = DiskEngine::io_uring_available(&why);
  test::LogCapture log;
  DiskWriteEngine asked(host_->layout(), *disk_, {.io_engine = DiskIoEngine::kIoUring});
  if (ring) {
    EXPECT_EQ(asked.io_engine(), DiskIoEngine::kIoUring);
    EXPECT_EQ(asked.workers(), 1U);
    EXPECT_TRUE(asked.submit(identity(0, kBlocks))->wait().ok());
  } else {  // one warning, and the thread pool does the work
    EXPECT_EQ(asked.io_engine(), DiskIoEngine::kThreadPool);
    EXPECT_NE(log.text().find("io_uring asked for but unavailable"), std::string::npos)
        << log.text();
  }
  EXPECT_EQ(to_string(DiskIoEngine::kIoUring), "io_uring");
}

TEST_F(DiskEngineBehaviourTest, MisuseIsAUsageError) {
  DiskWriteEngine w(host_->layout(), *disk_);
  EXPECT_THROW((void)w.submit({}), UsageError);
  const TransferPair out_of_range_src[] = {{kBlocks, 0}};
  EXPECT_THROW((void)w.submit(out_of_range_src), UsageError);
  const TransferPair out_of_range_dst[] = {{0, kBlocks}};
  EXPECT_THROW((void)w.submit(out_of_range_dst), UsageError);
  const TransferPair duplicate_dst[] = {{0, 5}, {1, 5}};
  try {
    (void)w.submit(duplicate_dst);
    ADD_FAILURE() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("destination block 5 appears twice"), std::string::npos)
        << e.what();
  }
  const TransferPair same_src_twice[] = {{0, 5}, {0, 6}};  // reading one source twice is fine
  EXPECT_TRUE(w.submit(same_src_twice)->wait().ok());

  HostPool other(kTiny, kBlocks, LayoutKind::kFullyContiguous);
  EXPECT_THROW((void)DiskWriteEngine(other.layout(), *disk_), UsageError);
  EXPECT_THROW((void)DiskReadEngine(*disk_, other.layout()), UsageError);
  EXPECT_THROW((void)DiskWriteEngine(host_->layout(), *disk_, {.queue_depth = 0}), UsageError);
  EXPECT_THROW((void)DiskReadEngine(*disk_, host_->layout(), {.queue_depth = 257}), UsageError);
  EXPECT_THROW((void)DiskReadEngine(*disk_, host_->layout(), {.queue_depth = 4, .workers = 3}),
               UsageError);
  EXPECT_THROW((void)DiskReadEngine(*disk_, host_->layout(), {.queue_depth = 4, .workers = 513}),
               UsageError);
  EXPECT_EQ(w.name(), "host_to_disk");
  DiskReadEngine r(*disk_, host_->layout());
  EXPECT_EQ(r.name(), "disk_to_host");
  auto registry = std::make_shared<prometheus::Registry>();
  DiskReadEngine first(*disk_, host_->layout(), {.registry = registry});
  EXPECT_THROW((void)DiskReadEngine(*disk_, host_->layout(), {.registry = registry}), UsageError)
      << "two engines may not share a path label in one registry";
}

}  // namespace disk_engine_test
}  // namespace kvbm
