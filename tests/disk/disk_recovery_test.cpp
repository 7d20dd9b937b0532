// Tests of kvbm/disk/disk_recovery.h and the persistent mode of
// kvbm/disk/disk_storage.h: a round trip across a reopen, a child process
// killed with SIGKILL while it writes (recovery finds only whole blocks with
// the right bytes), torn writes injected through the syscall table, bytes
// changed behind the library's back (each discard counted by its reason),
// another layout or namespace, resizing, the directory lock held by another
// process, ownership and permission checks, and a seeded mutation test of the
// header parser and of whole files.

#include "kvbm/disk/disk_recovery.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "disk/disk_test_util.h"
#include "kvbm/disk/disk_engine.h"
#include "kvbm/disk/disk_storage.h"
#include "test_util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm {
namespace disk_recovery_test {

namespace fs = std::filesystem;
using test::HostPool;
using test::payload_of;
using test::SlotBuffer;
using test::splitmix;
using test::TempDir;

// 2 x 2 x 4 x 128 x 2 = 4 KiB blocks: one data sector, one header sector.
const LayoutConfig kSmall{
    .num_layers = 2, .outer_dim = 2, .page_size = 4, .inner_dim = 128, .dtype_bytes = 2};
// The same block bytes, other dimensions.
const LayoutConfig kSameBytes{
    .num_layers = 4, .outer_dim = 1, .page_size = 4, .inner_dim = 128, .dtype_bytes = 2};
// An odd size (the staged write path, padding).
const LayoutConfig kOdd{
    .num_layers = 3, .outer_dim = 2, .page_size = 5, .inner_dim = 7, .dtype_bytes = 2};

/// Writes the payload of `hash` into host block `b`.
void fill_block(const HostPool& host, BlockId b, std::uint64_t hash) {
  const auto bytes = payload_of(hash, host.layout().config().block_bytes());
  std::size_t at = 0;
  for (const Region& r : host.regions(b)) {
    std::memcpy(reinterpret_cast<void*>(r.addr), bytes.data() + at, r.size);
    at += r.size;
  }
}

class DiskRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(test::kTargets[1], why);
    if (!base) KVBM_SKIP_OR_FAIL(why);
    tmp_ = std::make_unique<TempDir>(*base);
    dir_ = tmp_->path() / "cache";
  }
  DiskStorageOptions options(std::size_t blocks = 16, LayoutConfig config = kSmall,
                             std::string ns = "model@1") const {
    DiskStorageOptions o;
    o.directory = dir_;
    o.config = config;
    o.num_blocks = blocks;
    o.persistent = true;
    o.namespace_id = std::move(ns);
    return o;
  }
  static std::unique_ptr<DiskStorage> open(const DiskStorageOptions& o) {
    auto r = DiskStorage::create(o);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(r).value() : nullptr;
  }
  /// Writes hash[i] (payload_of) into slot slots[i] through a DiskWriteEngine; returns the outcome.
  static TransferOutcome write_blocks(DiskStorage& disk, const std::vector<BlockId>& slots,
                                      const std::vector<std::uint64_t>& hashes,
                                      bool page_aligned = true) {
    HostPool host(disk.config(), slots.size(), LayoutKind::kFullyContiguous, page_aligned);
    std::vector<TransferPair> pairs;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      fill_block(host, static_cast<BlockId>(i), hashes[i]);
      pairs.push_back({static_cast<BlockId>(i), slots[i], hashes[i]});
    }
    // The thread pool: the torn-write tests tear its pwrite(v)s through the syscall table.
    DiskWriteEngine w(host.layout(), disk,
                      {.queue_depth = 4, .io_engine = DiskIoEngine::kThreadPool});
    return w.submit(pairs)->wait();
  }
  /// Reads every recovered slot back through a DiskReadEngine and checks its bytes.
  static void expect_bytes(DiskStorage& disk, const std::vector<RecoveredSlot>& slots) {
    if (slots.empty()) return;
    HostPool host(disk.config(), slots.size(), LayoutKind::kLayerSeparated);
    std::vector<TransferPair> pairs;
    for (std::size_t i = 0; i < slots.size(); ++i)
      pairs.push_back({slots[i].slot, static_cast<BlockId>(i), slots[i].hash});
    DiskReadEngine r(disk, host.layout(), {.queue_depth = 4});
    const TransferOutcome o = r.submit(pairs)->wait();
    EXPECT_TRUE(o.ok()) << o.message();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      EXPECT_EQ(host.block(static_cast<BlockId>(i)), payload_of(slots[i].hash, disk.block_bytes()))
          << "slot " << slots[i].slot;
    }
  }
  std::unique_ptr<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(DiskRecoveryTest, RoundTripAcrossAReopenServesEveryByte) {
  for (const LayoutConfig& config : {kSmall, kOdd}) {
    SCOPED_TRACE(config.block_bytes());
    fs::remove_all(dir_);
    std::vector<BlockId> slots{3, 0, 9, 15, 7};
    std::vector<std::uint64_t> hashes{0x11, 0x22, 0x33, 0x44, 0x55};
    {
      auto disk = open(options(16, config));
      ASSERT_TRUE(disk);
      EXPECT_EQ(disk->state(), DiskFileState::kCreated);
      struct stat st {};
      ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0700U) << "a missing directory is created 0700";
      ASSERT_EQ(::stat(disk->path().c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0600U);
      EXPECT_EQ(disk->path().filename(), "kvbm.slots");
      ASSERT_TRUE(write_blocks(*disk, slots, hashes, config.block_bytes() % 4096 == 0).ok());
    }
    EXPECT_TRUE(fs::exists(dir_ / "kvbm.slots")) << "a persistent file is kept";
    auto disk = open(options(16, config));
    ASSERT_TRUE(disk);
    EXPECT_EQ(disk->state(), DiskFileState::kReopened);
    const Recovery rec = disk->recover({.threads = 3});
    std::vector<RecoveredSlot> expected;
    for (BlockId s = 0; s < 16; ++s) {
      for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i] == s) expected.push_back({s, hashes[i]});
      }
    }
    EXPECT_EQ(rec.slots, expected);
    EXPECT_EQ(rec.summary.scanned, 16U);
    EXPECT_EQ(rec.summary.recovered, 5U);
    EXPECT_EQ(rec.summary.count(SlotDiscard::kAbsent), 11U);
    EXPECT_EQ(rec.summary.discarded_total(), 11U);
    EXPECT_GE(rec.summary.bytes_read, 16U * DiskStorage::kHeaderSectorBytes);
    EXPECT_NE(rec.summary.to_string().find("5 recovered"), std::string::npos)
        << rec.summary.to_string();
    expect_bytes(*disk, rec.slots);
    // The header-only and the sequential reader agree; so does a full verification.
    EXPECT_EQ(disk->recover({.threads = 2, .sequential_slot_limit = 0}).slots, expected);
    EXPECT_EQ(disk->recover({.threads = 1, .verify_payloads = true}).slots, expected);
    // Rewriting a recovered slot invalidates its live header first, and the new block wins.
    ASSERT_TRUE(disk->header_may_be_live(3));
    ASSERT_TRUE(write_blocks(*disk, {3}, {0x99}).ok());
    const Recovery again = disk->recover();
    EXPECT_EQ(again.slots.front(), (RecoveredSlot{0, 0x22}));
    EXPECT_EQ(again.slots[1], (RecoveredSlot{3, 0x99}));
    expect_bytes(*disk, again.slots);
  }
}

TEST_F(DiskRecoveryTest, WriteSlotFollowsTheDurableOrderToo) {
  auto disk = open(options(4, kOdd));
  ASSERT_TRUE(disk);
  SlotBuffer buf(disk->slot_bytes());
  const auto bytes = payload_of(7, disk->block_bytes());
  std::memcpy(buf.p, bytes.data(), bytes.size());
  ASSERT_TRUE(disk->write_slot(2, buf.span(), 7));
  ASSERT_TRUE(disk->write_slot(2, buf.span(), 7));  // a live header: invalidated first
  disk.reset();
  disk = open(options(4, kOdd));
  const Recovery rec = disk->recover();
  ASSERT_EQ(rec.slots, (std::vector<RecoveredSlot>{{2, 7}}));
  ASSERT_TRUE(disk->read_slot(2, buf.span(), 7));
  EXPECT_EQ(std::memcmp(buf.p, bytes.data(), bytes.size()), 0);
}

// ---- a child killed with SIGKILL while it writes ----

/// Runs in the child: opens the pool, recovers, then writes batches of fresh
/// hashes into random slots until killed. Never returns.
[[noreturn]] void write_until_killed(const DiskStorageOptions& o, std::uint64_t seed,
                                     int ready_fd) {
  try {
    auto r = DiskStorage::create(o);
    if (!r.ok()) ::_exit(3);
    auto disk = std::move(r).value();
    (void)disk->recover({.threads = 2});
    const char c = 1;
    if (::write(ready_fd, &c, 1) != 1) ::_exit(4);
    std::mt19937_64 rng(seed);
    const std::size_t n = disk->num_blocks();
    HostPool host(disk->config(), 8, LayoutKind::kFullyContiguous, true);
    DiskWriteEngine w(host.layout(), *disk, {.queue_depth = 4});
    for (std::uint64_t batch = 0;; ++batch) {
      std::vector<TransferPair> pairs;
      std::vector<BlockId> used;
      for (BlockId i = 0; i < 8; ++i) {
        BlockId slot = static_cast<BlockId>(rng() % n);
        if (std::find(used.begin(), used.end(), slot) != used.end()) continue;
        used.push_back(slot);
        const std::uint64_t hash = splitmix(seed ^ (batch << 8) ^ i);
        fill_block(host, i, hash);
        pairs.push_back({i, slot, hash});
      }
      (void)w.submit(pairs)->wait();
    }
  } catch (...) {
    ::_exit(5);
  }
}

TEST_F(DiskRecoveryTest, SigkillAtRandomMomentsLeavesOnlyWholeBlocks) {
  const std::uint32_t seed = test::test_seed();
  std::mt19937_64 rng(seed);
  const auto o = options(48, kSmall);
  int trials_with_blocks = 0;
  std::uint64_t recovered_total = 0;
  constexpr int kTrials = 60;
  for (int trial = 0; trial < kTrials; ++trial) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      write_until_killed(o, splitmix(seed + static_cast<std::uint64_t>(trial)), fds[1]);
    }
    ::close(fds[1]);
    char c = 0;
    const bool ready =
        ::read(fds[0], &c, 1) == 1;  // the child holds the lock and writes from now on
    ::close(fds[0]);
    if (ready) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(ready) << "trial " << trial << ": the child failed before writing (status "
                       << status << ")";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "trial " << trial << " status " << status;

    auto disk = open(o);  // the lock died with the child
    ASSERT_TRUE(disk) << "trial " << trial;
    const Recovery rec = disk->recover({.threads = 2, .verify_payloads = (trial % 2) == 0});
    EXPECT_EQ(rec.summary.count(SlotDiscard::kPayloadChecksum), 0U)
        << "trial " << trial << ": a torn payload behind a whole header";
    EXPECT_EQ(rec.summary.count(SlotDiscard::kHeaderChecksum), 0U) << "trial " << trial;
    EXPECT_EQ(rec.summary.recovered + rec.summary.discarded_total(), rec.summary.scanned);
    expect_bytes(*disk, rec.slots);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "trial " << trial << " (seed " << seed << ")";
      return;
    }
    trials_with_blocks += rec.slots.empty() ? 0 : 1;
    recovered_total += rec.slots.size();
  }
  std::cout << kTrials << " trials, " << trials_with_blocks << " with blocks, " << recovered_total
            << " blocks recovered and verified\n";
  EXPECT_GT(trials_with_blocks, kTrials / 2);
}

// ---- torn writes through the syscall table ----

/// Tears the first write that lands at `g_tear_offset`: writes its first
/// `g_tear_bytes` bytes, then fails with EIO.
std::int64_t g_tear_offset = -1;
std::size_t g_tear_bytes = 0;
int g_tears = 0;

std::int64_t tearing_pwrite(int fd, const void* buf, std::size_t count, std::int64_t offset) {
  if (offset == g_tear_offset && g_tears == 0) {
    ++g_tears;
    (void)io::real_syscalls().pwrite(fd, buf, std::min(count, g_tear_bytes), offset);
    errno = EIO;
    return -1;
  }
  return io::real_syscalls().pwrite(fd, buf, count, offset);
}
std::int64_t tearing_pwritev(int fd, const iovec* iov, int iovcnt, std::int64_t offset) {
  if (offset == g_tear_offset && g_tears == 0) {
    ++g_tears;
    std::vector<iovec> part;
    std::size_t left = g_tear_bytes;
    for (int i = 0; i < iovcnt && left > 0; ++i) {
      part.push_back({iov[i].iov_base, std::min(left, iov[i].iov_len)});
      left -= part.back().iov_len;
    }
    (void)io::real_syscalls().pwritev(fd, part.data(), static_cast<int>(part.size()), offset);
    errno = EIO;
    return -1;
  }
  return io::real_syscalls().pwritev(fd, iov, iovcnt, offset);
}

TEST_F(DiskRecoveryTest, TornWritesLeaveTheSlotAbsentOrTheOldBlockWhole) {
  // Buffered, so that a write can tear at any byte (O_DIRECT tears at sector
  // granularity at worst, and the 64-byte record never straddles a sector).
  auto o = options(8, kSmall);
  o.direct_io = DirectIo::kOff;
  auto disk = open(o);
  ASSERT_TRUE(disk);
  ASSERT_TRUE(write_blocks(*disk, {1, 2, 3}, {0xA1, 0xA2, 0xA3}).ok());
  io::SyscallTable table = io::real_syscalls();
  table.pwrite = &tearing_pwrite;
  table.pwritev = &tearing_pwritev;
  struct Case {
    const char* what;
    BlockId slot;
    bool header;        // tear the header sector (else the payload)
    std::size_t bytes;  // bytes that land
  };
  const Case cases[] = {
      // The old header is invalidated (and synced) before the payload changes:
      // a torn payload leaves the slot absent, never the old header over new bytes.
      {"payload torn over a live block", 1, false, 2048},
      // The header's record is the sector's last 64 bytes: a sector torn
      // before them leaves no header; torn inside them, a corrupt one.
      {"header sector torn before the record", 4, true, 2048},
      {"header record torn in half", 5, true, 4096 - 32},
      // The invalidation itself torn (the record survives): the old block stays whole.
      {"invalidation torn", 2, true, 2048},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::uint64_t offset = c.header ? disk->header_offset(c.slot) : disk->slot_offset(c.slot);
    g_tear_offset = static_cast<std::int64_t>(offset);
    g_tear_bytes = c.bytes;
    g_tears = 0;
    {
      io::ScopedSyscallOverride torn(table);
      const TransferOutcome out = write_blocks(*disk, {c.slot}, {0xB0 + c.slot});
      EXPECT_EQ(out.failed, std::vector<std::size_t>{0});
      EXPECT_NE(out.message().find("Input/output error"), std::string::npos) << out.message();
    }
    EXPECT_EQ(g_tears, 1);
  }
  disk.reset();
  disk = open(o);
  const Recovery rec = disk->recover({.verify_payloads = true});
  EXPECT_EQ(rec.slots, (std::vector<RecoveredSlot>{{2, 0xA2}, {3, 0xA3}}));
  EXPECT_EQ(rec.summary.count(SlotDiscard::kHeaderChecksum), 1U);  // slot 5
  EXPECT_EQ(rec.summary.count(SlotDiscard::kAbsent), 5U);          // 0, 1, 4, 6, 7
  expect_bytes(*disk, rec.slots);
}

// ---- bytes changed behind the library's back ----

/// Rewrites the header record of `slot` in `file` through `edit`, then
/// recomputes its checksum (a well-formed header that says something else).
template <class Edit>
void edit_header(const DiskStorage& disk, BlockId slot, Edit edit) {
  const int fd = ::open(disk.path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const off_t at =
      static_cast<off_t>(disk.header_offset(slot) + DiskStorage::kHeaderSectorBytes - 64);
  std::uint64_t h[8];
  ASSERT_EQ(::pread(fd, h, sizeof h, at), 64);
  edit(h);
  h[7] = XXH3_64bits(h, 56);
  ASSERT_EQ(::pwrite(fd, h, sizeof h, at), 64);
  ::fsync(fd);
  ::close(fd);
}

void copy_range(const fs::path& from, std::uint64_t from_at, const fs::path& to,
                std::uint64_t to_at, std::size_t n) {
  std::vector<char> buf(n);
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  const int out = ::open(to.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(in, 0);
  ASSERT_GE(out, 0);
  ASSERT_EQ(::pread(in, buf.data(), n, static_cast<off_t>(from_at)), static_cast<ssize_t>(n));
  ASSERT_EQ(::pwrite(out, buf.data(), n, static_cast<off_t>(to_at)), static_cast<ssize_t>(n));
  ::fsync(out);
  ::close(in);
  ::close(out);
}

TEST_F(DiskRecoveryTest, CorruptionBehindTheBackIsDiscardedAndCountedByReason) {
  auto disk = open(options(12, kSmall));
  ASSERT_TRUE(disk);
  std::vector<BlockId> slots{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::uint64_t> hashes{100, 101, 102, 103, 104,
                                    105, 106, 107, 108, 100};  // slot 9 repeats slot 0's hash
  ASSERT_TRUE(write_blocks(*disk, slots, hashes).ok());
  const fs::path path = disk->path();
  // A file of another namespace, to borrow a slot from.
  auto other_o = options(12, kSmall, "other-model@2");
  other_o.file_name = "other.slots";
  {
    auto other = open(other_o);
    ASSERT_TRUE(other);
    ASSERT_TRUE(write_blocks(*other, {7}, {107}).ok());
  }
  disk.reset();
  test::flip_byte_behind_the_back(path, 1 * 8192 + 100);        // slot 1: payload bit rot
  test::flip_byte_behind_the_back(path, 2 * 8192 + 8192 - 20);  // slot 2: header bit rot
  edit_header(*open(options(12, kSmall)), 3,
              [](std::uint64_t* h) { h[1] = (h[1] & ~0xFFFFFFFFULL) | 2; });          // version 2
  edit_header(*open(options(12, kSmall)), 4, [](std::uint64_t* h) { h[2] = 8192; });  // block bytes
  copy_range(path, 5 * 8192 + 4096, path, 6 * 8192 + 4096, 4096);  // slot 6 <- slot 5's header
  copy_range(dir_ / "other.slots", 7 * 8192, path, 7 * 8192,
             8192);  // slot 7 <- another namespace's slot 7
  disk = open(options(12, kSmall));
  ASSERT_TRUE(disk);
  EXPECT_EQ(disk->state(), DiskFileState::kReopened);
  for (bool verify : {false, true}) {
    SCOPED_TRACE(verify ? "verify_payloads" : "headers only");
    test::LogCapture log;
    const Recovery rec = disk->recover({.verify_payloads = verify});
    const auto& s = rec.summary;
    std::vector<RecoveredSlot> expected{{0, 100}, {5, 105}, {8, 108}};
    if (!verify) expected.insert(expected.begin() + 1, RecoveredSlot{1, 101});
    EXPECT_EQ(rec.slots, expected);
    EXPECT_EQ(s.count(SlotDiscard::kPayloadChecksum), verify ? 1U : 0U);
    EXPECT_EQ(s.count(SlotDiscard::kHeaderChecksum), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kFormatVersion), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kGeometry), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kWrongSlot), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kFingerprint), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kDuplicate), 1U);
    EXPECT_EQ(s.count(SlotDiscard::kAbsent), 2U);
    EXPECT_EQ(s.recovered + s.discarded_total(), 12U);
    EXPECT_NE(log.text().find("fingerprint 1"), std::string::npos)
        << log.text();  // the one summary line
  }
  // Header-only recovery returned slot 1; its read still verifies the payload and refuses it.
  SlotBuffer buf(disk->slot_bytes());
  const io::IoStatus r = disk->read_slot(1, buf.span(), 101);
  EXPECT_EQ(r.code(), EBADMSG);
  EXPECT_NE(r.message().find("checksum mismatch"), std::string::npos) << r.message();
}

// ---- another layout, another namespace, another size ----

TEST_F(DiskRecoveryTest, AnotherLayoutOrNamespaceRecoversNothing) {
  struct Case {
    const char* what;
    LayoutConfig config;
    std::string ns;
    SlotDiscard reason;
  };
  const Case cases[] = {
      {"another namespace", kSmall, "model@2", SlotDiscard::kFingerprint},
      {"no namespace", kSmall, "", SlotDiscard::kFingerprint},
      {"another layout of the same block bytes", kSameBytes, "model@1", SlotDiscard::kFingerprint},
      {"another block size", kOdd, "model@1", SlotDiscard::kGeometry},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir_);
    {
      auto disk = open(options(8));
      ASSERT_TRUE(disk);
      ASSERT_TRUE(write_blocks(*disk, {0, 1, 2}, {1, 2, 3}).ok());
    }
    test::LogCapture log;
    auto disk = open(options(8, c.config, c.ns));
    ASSERT_TRUE(disk);
    EXPECT_EQ(disk->state(), DiskFileState::kReset);
    EXPECT_NE(log.text().find("none of its blocks is served"), std::string::npos) << log.text();
    const Recovery rec = disk->recover();
    EXPECT_TRUE(rec.slots.empty());
    EXPECT_EQ(rec.summary.reset_discard, c.reason);
    EXPECT_EQ(rec.summary.reset_slots, 8U);
    EXPECT_EQ(rec.summary.count(SlotDiscard::kAbsent), 8U);
    disk.reset();
    // The reset is for good: the first namespace finds nothing either.
    auto back = open(options(8));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->state(), DiskFileState::kReset);
    EXPECT_TRUE(back->recover().slots.empty());
  }
}

TEST_F(DiskRecoveryTest, AFileOfAnotherFormatIsReset) {
  fs::create_directory(dir_, tmp_->path());
  fs::permissions(dir_, fs::perms::owner_all);
  {
    std::ofstream f(dir_ / "kvbm.slots");
    f << "not a kvbm pool";
  }
  fs::permissions(dir_ / "kvbm.slots", fs::perms::owner_read | fs::perms::owner_write);
  auto disk = open(options(4));
  ASSERT_TRUE(disk);
  EXPECT_EQ(disk->state(), DiskFileState::kReset);
  const Recovery rec = disk->recover();
  EXPECT_EQ(rec.summary.reset_discard, SlotDiscard::kHeaderChecksum);
  EXPECT_TRUE(rec.slots.empty());
  EXPECT_EQ(fs::file_size(disk->path()), disk->file_bytes());
}

TEST_F(DiskRecoveryTest, AnotherNumberOfSlotsKeepsTheCommonOnes) {
  {
    auto disk = open(options(8));
    ASSERT_TRUE(disk);
    ASSERT_TRUE(write_blocks(*disk, {1, 6, 7}, {11, 16, 17}).ok());
  }
  {
    auto disk = open(options(20));
    ASSERT_TRUE(disk);
    EXPECT_EQ(disk->state(), DiskFileState::kResized);
    EXPECT_EQ(fs::file_size(disk->path()), disk->file_bytes());
    const Recovery rec = disk->recover();
    EXPECT_EQ(rec.slots, (std::vector<RecoveredSlot>{{1, 11}, {6, 16}, {7, 17}}));
    EXPECT_FALSE(disk->header_may_be_live(12)) << "a new slot has no header to invalidate";
    ASSERT_TRUE(write_blocks(*disk, {19}, {29}).ok());
  }
  auto disk = open(options(7));
  ASSERT_TRUE(disk);
  EXPECT_EQ(disk->state(), DiskFileState::kResized);
  const Recovery rec = disk->recover();
  EXPECT_EQ(rec.slots, (std::vector<RecoveredSlot>{{1, 11}, {6, 16}}));
  expect_bytes(*disk, rec.slots);
}

// ---- one owner at a time ----

// fdatasync of a directory fails with this errno; of a file, it works.
int g_dir_sync_errno = 0;
int dir_sync_fails(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = g_dir_sync_errno;
    return -1;
  }
  return io::real_syscalls().fdatasync(fd);
}

TEST_F(DiskRecoveryTest, ANewFileWhoseNameCannotBeMadeDurableIsNotCreated) {
  io::SyscallTable t = io::real_syscalls();
  t.fdatasync = &dir_sync_fails;
  const io::ScopedSyscallOverride o(t);
  g_dir_sync_errno = EIO;
  auto r = DiskStorage::create(options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EIO);
  EXPECT_NE(r.error().message.find("directory"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(dir_ / "kvbm.slots")) << "the file of a failed creation stays";
  // A file system that cannot sync directories at all (EINVAL) is not a failure.
  g_dir_sync_errno = EINVAL;
  auto ok = DiskStorage::create(options());
  EXPECT_TRUE(ok.ok()) << ok.error().message;
}

TEST_F(DiskRecoveryTest, ASecondOpenerGetsAClearErrorNamingTheHolder) {
  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    auto r = DiskStorage::create(options(4));
    const char c = r.ok() ? 1 : 0;
    (void)!::write(to_parent[1], &c, 1);
    char d = 0;
    (void)!::read(to_child[0], &d, 1);  // hold the lock until the parent is done
    ::_exit(0);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  ASSERT_EQ(c, 1) << "the child could not open the pool";
  {
    auto r = DiskStorage::create(options(4));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, EBUSY);
    const std::string& m = r.error().message;
    EXPECT_NE(m.find("in use by process " + std::to_string(child)), std::string::npos) << m;
    EXPECT_NE(m.find("kvbm.slots.lock"), std::string::npos) << m;
    EXPECT_NE(m.find("another directory"), std::string::npos) << m;
  }
  ::close(to_child[1]);  // the child exits and its lock goes with it
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(to_parent[0]);
  auto disk = open(options(4));
  ASSERT_TRUE(disk);
  // In one process too: the first storage holds the directory.
  auto again = DiskStorage::create(options(4));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("in use by process " + std::to_string(::getpid())),
            std::string::npos)
      << again.error().message;
  std::ifstream lock(dir_ / "kvbm.slots.lock");
  pid_t recorded = 0;
  lock >> recorded;
  EXPECT_EQ(recorded, ::getpid());
}

// ---- hygiene ----

TEST_F(DiskRecoveryTest, ForeignOrWorldWritablePlacesAreRefused) {
  fs::create_directory(dir_);
  fs::permissions(dir_, fs::perms::all);  // 0777
  try {
    (void)DiskStorage::create(options());
    ADD_FAILURE() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("world-writable"), std::string::npos) << e.what();
  }
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
  {
    auto disk = open(options());
    ASSERT_TRUE(disk);
  }
  ASSERT_EQ(::chmod((dir_ / "kvbm.slots").c_str(), 0666), 0);
  EXPECT_THROW((void)DiskStorage::create(options()), UsageError);
  ASSERT_EQ(::chmod((dir_ / "kvbm.slots").c_str(), 0600), 0);
  if (::geteuid() == 0) {  // root can hand the file to someone else
    ASSERT_EQ(::chown((dir_ / "kvbm.slots").c_str(), 4242, 4242), 0);
    try {
      (void)DiskStorage::create(options());
      ADD_FAILURE() << "expected UsageError";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to uid 4242"), std::string::npos) << e.what();
    }
    ASSERT_EQ(::chown((dir_ / "kvbm.slots").c_str(), 0, 0), 0);
    ASSERT_EQ(::chown(dir_.c_str(), 4242, 4242), 0);
    EXPECT_THROW((void)DiskStorage::create(options()), UsageError);
    ASSERT_EQ(::chown(dir_.c_str(), 0, 0), 0);
  }
  // A symlink at the file's name is never followed, nor is its target touched.
  const fs::path target = tmp_->path() / "precious";
  std::ofstream(target) << "precious";
  fs::remove(dir_ / "kvbm.slots");
  fs::create_symlink(target, dir_ / "kvbm.slots");
  auto r = DiskStorage::create(options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ELOOP);
  EXPECT_NE(r.error().message.find("symlink"), std::string::npos) << r.error().message;
  std::string content;
  std::ifstream(target) >> content;
  EXPECT_EQ(content, "precious");
  // A missing parent is not created.
  auto deep = options();
  deep.directory = tmp_->path() / "no" / "such";
  EXPECT_THROW((void)DiskStorage::create(deep), UsageError);
}

// ---- seeded mutation of the parser and of whole files ----

TEST_F(DiskRecoveryTest, MutatedHeadersAreNeverAcceptedAsSomethingElse) {
  const std::uint32_t seed = test::test_seed();
  std::mt19937_64 rng(seed);
  auto disk = open(options(64));
  ASSERT_TRUE(disk);
  SlotBuffer sector(DiskStorage::kHeaderSectorBytes);
  SlotBuffer resealed(DiskStorage::kHeaderSectorBytes);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::uint64_t iterations = 0;
  std::uint64_t accepted = 0;
  for (; iterations < 300000 && std::chrono::steady_clock::now() < deadline; ++iterations) {
    const auto slot = static_cast<BlockId>(rng() % 64);
    const std::uint64_t hash = rng();
    const std::uint64_t sum = rng();
    switch (rng() % 4) {
      case 0:  // random bytes
        for (std::size_t i = 0; i < sector.size; ++i) sector.p[i] = static_cast<std::byte>(rng());
        break;
      case 1:  // random bytes under a right magic
        for (std::size_t i = 0; i < sector.size; ++i) sector.p[i] = static_cast<std::byte>(rng());
        disk->seal_header(slot, sum, resealed.span(), hash);
        std::memcpy(sector.p + sector.size - 64, resealed.p + sector.size - 64, 8);
        break;
      default: {  // a valid header with 1 to 8 bits flipped, or one field replaced
        disk->seal_header(slot, sum, sector.span(), hash);
        if (rng() % 2 == 0) {
          const int flips = 1 + static_cast<int>(rng() % 8);
          for (int f = 0; f < flips; ++f) {
            const std::size_t bit = sector.size * 8 - 1 - rng() % (64 * 8);
            sector.p[bit / 8] ^= static_cast<std::byte>(1U << (bit % 8));
          }
        } else {
          const std::uint64_t v = rng();
          std::memcpy(sector.p + sector.size - 64 + 8 * (rng() % 8), &v, 8);
        }
      }
    }
    const auto check_slot = static_cast<BlockId>(rng() % 4 == 0 ? rng() % 64 : slot);
    const SlotHeaderCheck c = disk->check_header(check_slot, sector.span());
    if (!c.ok) continue;
    ++accepted;
    // Accepted only if it is exactly the header this storage would write for it.
    disk->seal_header(check_slot, c.payload_checksum, resealed.span(), c.hash);
    ASSERT_EQ(std::memcmp(sector.p + sector.size - 64, resealed.p + sector.size - 64, 64), 0)
        << "iteration " << iterations << " (seed " << seed << ")";
  }
  // Short and empty spans are safe too.
  EXPECT_FALSE(disk->check_header(0, {}).ok);
  EXPECT_FALSE(disk->check_header(0, sector.span().first(63)).ok);
  std::cout << iterations << " mutated headers, " << accepted
            << " accepted (each identical to a sealed one)\n";
  EXPECT_GT(iterations, 10000U);
}

TEST_F(DiskRecoveryTest, RandomAndMutatedFilesOnlyLoseSlots) {
  const std::uint32_t seed = test::test_seed();
  std::mt19937_64 rng(seed);
  constexpr std::size_t kSlots = 32;
  std::vector<BlockId> slots;
  std::vector<std::uint64_t> hashes;
  for (BlockId s = 0; s < kSlots; ++s) {
    slots.push_back(s);
    hashes.push_back(1000 + s);
  }
  for (int round = 0; round < 12; ++round) {
    fs::remove_all(dir_);
    fs::path path;
    std::uint64_t file_bytes = 0;
    {
      auto disk = open(options(kSlots, round % 2 ? kOdd : kSmall));
      ASSERT_TRUE(disk);
      ASSERT_TRUE(write_blocks(*disk, slots, hashes, round % 2 == 0).ok());
      path = disk->path();
      file_bytes = disk->file_bytes();
    }
    {
      const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      ASSERT_GE(fd, 0);
      const bool random_file = round % 4 == 3;
      const std::size_t edits = random_file ? file_bytes : 1 + rng() % 400;
      std::vector<unsigned char> bytes(random_file ? file_bytes : 1);
      if (random_file) {
        for (auto& b : bytes) b = static_cast<unsigned char>(rng());
        bytes.resize(file_bytes - 4096);  // keep the superblock: the slots themselves are hostile
        ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
      } else {
        for (std::size_t e = 0; e < edits; ++e) {
          // Mostly into header records, where it hurts.
          const std::uint64_t slot_bytes = (file_bytes - 4096) / kSlots;
          const std::uint64_t at = rng() % 2 ? (rng() % kSlots + 1) * slot_bytes - 1 - rng() % 64
                                             : rng() % (file_bytes - 4096);
          unsigned char b = 0;
          ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(at)), 1);
          b ^= static_cast<unsigned char>(1U << (rng() % 8));
          ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(at)), 1);
        }
      }
      ::close(fd);
    }
    auto disk = open(options(kSlots, round % 2 ? kOdd : kSmall));
    ASSERT_TRUE(disk);
    const Recovery rec = disk->recover({.threads = 2});
    EXPECT_EQ(rec.summary.recovered + rec.summary.discarded_total(), kSlots);
    // Whatever was recovered is served with the right bytes or refused on read, never wrong.
    SlotBuffer buf(disk->slot_bytes());
    for (const RecoveredSlot& r : rec.slots) {
      ASSERT_EQ(r.hash, 1000 + r.slot) << "round " << round << " (seed " << seed << ")";
      if (disk->read_slot(r.slot, buf.span(), r.hash)) {
        const auto want = payload_of(r.hash, disk->block_bytes());
        ASSERT_EQ(std::memcmp(buf.p, want.data(), want.size()), 0)
            << "round " << round << " (seed " << seed << ")";
      }
    }
  }
}

// A discarded slot read back is a failure of a kind (kCorrupt, kIo); an
// absent slot or a duplicate holds nothing wrong.
TEST(SlotDiscard, MapsOntoErrorKinds) {
  for (std::size_t r = 0; r < kSlotDiscardReasons; ++r) {
    const auto reason = static_cast<SlotDiscard>(r);
    const auto kind = error_kind_of(reason);
    if (reason == SlotDiscard::kAbsent || reason == SlotDiscard::kDuplicate) {
      EXPECT_EQ(kind, std::nullopt) << to_string(reason);
    } else if (reason == SlotDiscard::kIoError) {
      EXPECT_EQ(kind, ErrorKind::kIo);
    } else {
      EXPECT_EQ(kind, ErrorKind::kCorrupt) << to_string(reason);
    }
  }
}

}  // namespace disk_recovery_test
}  // namespace kvbm
