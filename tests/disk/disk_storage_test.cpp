// Tests of kvbm/disk/disk_storage.h: creation (mode, size, O_DIRECT and its
// fallback, fallocate and its fallback, symlinks refused, clear errors), the
// slot format and its verification.

#include "kvbm/disk/disk_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "disk/disk_test_util.h"
#include "permission_checks.h"
#include "test_util.h"

namespace kvbm {
namespace disk_storage_test {

namespace fs = std::filesystem;
using test::SlotBuffer;
using test::TempDir;

LayoutConfig small_config() {
  return {.num_layers = 3, .outer_dim = 2, .page_size = 5, .inner_dim = 7, .dtype_bytes = 2};
}

// The payload checksum is XXH3-64 whatever vector width computes it (AVX2
// where the CPU has it): every size around XXH3's internal boundaries (the
// short paths, a stripe, a block of stripes, a 64 KiB and a 2 MiB block), whole
// and cut into regions at random points, against xxhash's own result.
TEST(DiskStorageChecksum, IsXxh3OfTheBytesAtEverySizeWholeAndInRegions) {
  std::mt19937_64 rng(27);
  std::vector<std::byte> data((2 << 20) + 129);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 260; ++n) sizes.push_back(n);
  for (std::size_t n : {1023U, 1024U, 1025U, 4096U, 65536U, 65537U, 1U << 20, 2U << 20}) {
    sizes.push_back(n);
  }
  sizes.push_back(data.size());
  for (std::size_t n : sizes) {
    const std::span<const std::byte> bytes(data.data(), n);
    const std::uint64_t want = XXH3_64bits(bytes.data(), n);
    ASSERT_EQ(DiskStorage::checksum(bytes), want) << n << " bytes";
    std::vector<Region> regions;
    std::size_t at = 0;
    while (at < n) {
      const std::size_t piece = std::min<std::size_t>(n - at, 1 + rng() % (n / 3 + 64));
      regions.push_back({reinterpret_cast<std::uintptr_t>(data.data() + at), piece});
      at += piece;
    }
    ASSERT_EQ(DiskStorage::checksum(regions), want) << n << " bytes in " << regions.size();
  }
}

class DiskStorageTest : public ::testing::TestWithParam<test::StorageTarget> {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(GetParam(), why);
    if (!base) KVBM_SKIP_OR_FAIL(why);
    dir_ = std::make_unique<TempDir>(*base);
  }
  DiskStorageOptions options(std::size_t blocks = 4, LayoutConfig config = small_config()) const {
    return {.directory = dir_->path(),
            .config = config,
            .num_blocks = blocks,
            .file_name = {},
            .direct_io = GetParam().direct_io};
  }
  std::unique_ptr<DiskStorage> make(const DiskStorageOptions& o) {
    auto r = DiskStorage::create(o);
    if (!r.ok() && r.error().code == EINVAL && o.direct_io == DirectIo::kRequired) {
      skip_reason_ = "no O_DIRECT: " + o.directory.string() + test::kNoDirectIoHint;
      return nullptr;
    }
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::unique_ptr<TempDir> dir_;
  std::string skip_reason_;
};

#define KVBM_MAKE_OR_SKIP(var, opts)                                  \
  auto var = make(opts);                                              \
  if (!var && !skip_reason_.empty()) KVBM_SKIP_OR_FAIL(skip_reason_); \
  ASSERT_TRUE(var)

TEST_P(DiskStorageTest, CreatesAPreallocatedFileWithMode0600) {
  KVBM_MAKE_OR_SKIP(s, options(5));
  EXPECT_EQ(s->block_bytes(), 420U);
  EXPECT_EQ(s->slot_bytes(), 8192U);  // the data sector, then the header sector
  EXPECT_EQ(s->file_bytes(), 5U * 8192U + DiskStorage::kSuperblockBytes);
  EXPECT_EQ(s->path().parent_path(), dir_->path());
  if (GetParam().direct_io != DirectIo::kPreferred) {
    EXPECT_EQ(s->direct_io(), GetParam().direct_io == DirectIo::kRequired);
  }  // kPreferred on tmpfs: O_DIRECT since Linux 6.6, buffered before
  struct stat st {};
  ASSERT_EQ(::lstat(s->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), s->file_bytes());
  EXPECT_GE(static_cast<std::uint64_t>(st.st_blocks) * 512, s->file_bytes())
      << "fallocate reserves the space";
  const int fl = ::fcntl(s->fd(), F_GETFL);
  EXPECT_EQ((fl & O_DIRECT) != 0, s->direct_io());
  EXPECT_EQ(::fcntl(s->fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST_P(DiskStorageTest, FileIsRemovedOnDestructionUnlessKept) {
  fs::path removed;
  {
    KVBM_MAKE_OR_SKIP(s, options());
    removed = s->path();
    EXPECT_TRUE(fs::exists(removed));
  }
  EXPECT_FALSE(fs::exists(removed));
  auto o = options();
  o.keep_file = true;
  o.file_name = "kept.slots";
  {
    KVBM_MAKE_OR_SKIP(s, o);
    EXPECT_EQ(s->path(), dir_->path() / "kept.slots");
  }
  EXPECT_TRUE(fs::exists(dir_->path() / "kept.slots"));
}

TEST_P(DiskStorageTest, DefaultFileNamesAreUnique) {
  KVBM_MAKE_OR_SKIP(a, options());
  KVBM_MAKE_OR_SKIP(b, options());
  EXPECT_NE(a->path(), b->path());
}

TEST_P(DiskStorageTest, SlotSizesAreAlignedAndGiveTheHeaderASectorOfItsOwn) {
  struct Case {
    LayoutConfig config;
    std::size_t block;
    std::size_t slot;
  };
  const Case cases[] = {
      {small_config(), 420, 8192},
      // 4096 of data fill one sector exactly; the header takes the next
      {{.num_layers = 1, .outer_dim = 1, .page_size = 1, .inner_dim = 2048, .dtype_bytes = 2},
       4096,
       8192},
      // 4098 > 4096: two data sectors
      {{.num_layers = 1, .outer_dim = 1, .page_size = 1, .inner_dim = 2049, .dtype_bytes = 2},
       4098,
       12288},
      // the realistic 32 x 2 x 16 x 8 x 128 x 2 bytes = 2 MiB block
      {{.num_layers = 32, .outer_dim = 2, .page_size = 16, .inner_dim = 1024, .dtype_bytes = 2},
       2 << 20,
       (2 << 20) + 4096},
  };
  for (const Case& c : cases) {
    KVBM_MAKE_OR_SKIP(s, options(2, c.config));
    EXPECT_EQ(s->block_bytes(), c.block);
    EXPECT_EQ(s->slot_bytes(), c.slot);
    EXPECT_EQ(s->slot_offset(1), c.slot);
    const Layout l = s->layout();
    EXPECT_EQ(l.kind(), LayoutKind::kFullyContiguous);
    EXPECT_EQ(l.block_region(1), (Region{c.slot, c.block}));
  }
}

TEST_P(DiskStorageTest, SlotRoundTripAndVerification) {
  KVBM_MAKE_OR_SKIP(s, options(3));
  const std::uint32_t seed = test::test_seed();
  std::mt19937_64 rng(seed);
  SlotBuffer out(s->slot_bytes());
  SlotBuffer in(s->slot_bytes());
  for (std::size_t i = 0; i < s->block_bytes(); ++i) out.p[i] = static_cast<std::byte>(rng());
  std::memset(out.p + s->block_bytes(), 0xAB,
              s->slot_bytes() - s->block_bytes());  // padding is zeroed by write_slot
  ASSERT_TRUE(s->write_slot(2, out.span()));
  ASSERT_TRUE(s->read_slot(2, in.span()));
  EXPECT_EQ(std::memcmp(in.p, out.p, s->block_bytes()), 0);
  for (std::size_t i = s->block_bytes(); i < s->slot_bytes() - DiskStorage::kHeaderBytes; ++i) {
    ASSERT_EQ(in.p[i], std::byte{0}) << "padding byte " << i;
  }
  EXPECT_EQ(DiskStorage::checksum(std::span<const std::byte>(in.p, s->block_bytes())),
            DiskStorage::checksum(std::span<const std::byte>(out.p, s->block_bytes())));

  // A slot never written has no header.
  const io::IoStatus never = s->read_slot(0, in.span());
  ASSERT_FALSE(never);
  EXPECT_EQ(never.code(), EBADMSG);
  EXPECT_NE(never.message().find("never written"), std::string::npos) << never.message();

  // Verification catches flipped data, a flipped header and data of another slot.
  ASSERT_TRUE(s->read_slot(2, in.span()));
  in.p[17] ^= std::byte{0x04};
  const io::IoStatus data = s->verify_slot(2, in.span());
  EXPECT_EQ(data.code(), EBADMSG);
  EXPECT_NE(data.message().find("checksum mismatch"), std::string::npos) << data.message();
  in.p[17] ^= std::byte{0x04};
  ASSERT_TRUE(s->verify_slot(2, in.span()));
  in.p[s->slot_bytes() - 30] ^= std::byte{0x01};  // inside the header (the data checksum field)
  const io::IoStatus header = s->verify_slot(2, in.span());
  EXPECT_EQ(header.code(), EBADMSG);
  EXPECT_NE(header.message().find("header is corrupt"), std::string::npos) << header.message();
  in.p[s->slot_bytes() - 30] ^= std::byte{0x01};
  const io::IoStatus other = s->verify_slot(1, in.span());
  EXPECT_EQ(other.code(), EBADMSG);
  EXPECT_NE(other.message().find("holds the data of block 2"), std::string::npos)
      << other.message();
}

TEST_P(DiskStorageTest, CorruptionOnDiskBehindTheLibrarysBackIsDetected) {
  KVBM_MAKE_OR_SKIP(s, options(3));
  SlotBuffer buf(s->slot_bytes());
  std::memset(buf.p, 0x5A, s->block_bytes());
  ASSERT_TRUE(s->write_slot(1, buf.span()));
  test::flip_byte_behind_the_back(s->path(), s->slot_offset(1) + 123);
  const io::IoStatus r = s->read_slot(1, buf.span());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), EBADMSG);
  EXPECT_NE(r.message().find("checksum mismatch"), std::string::npos) << r.message();
}

TEST_P(DiskStorageTest, SlotIsBoundToTheSequenceHashItWasWrittenFor) {
  KVBM_MAKE_OR_SKIP(s, options(3));
  SlotBuffer buf(s->slot_bytes());
  std::memset(buf.p, 0x3C, s->block_bytes());
  ASSERT_TRUE(s->write_slot(1, buf.span(), 0xAAAA));
  ASSERT_TRUE(s->read_slot(1, buf.span(), 0xAAAA));
  // Valid bytes, valid header, but for another block: never served as this one.
  const io::IoStatus other = s->read_slot(1, buf.span(), 0xBBBB);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.code(), EBADMSG);
  EXPECT_NE(other.message().find("sequence hash 43690, not 48059"), std::string::npos)
      << other.message();
  // A slot rewritten for another hash no longer serves the first.
  ASSERT_TRUE(s->write_slot(1, buf.span(), 0xBBBB));
  EXPECT_EQ(s->read_slot(1, buf.span(), 0xAAAA).code(), EBADMSG);
  EXPECT_TRUE(s->read_slot(1, buf.span(), 0xBBBB));
}

TEST_P(DiskStorageTest, SlotWrittenForAnotherLayoutOfTheSameSizeIsRefused) {
  // Same block bytes (3 x 2 x 5 x 7 x 2 = 420), other dimensions.
  const LayoutConfig other_config{
      .num_layers = 6, .outer_dim = 1, .page_size = 5, .inner_dim = 7, .dtype_bytes = 2};
  ASSERT_EQ(other_config.block_bytes(), small_config().block_bytes());
  KVBM_MAKE_OR_SKIP(s, options(3));
  KVBM_MAKE_OR_SKIP(t, options(3, other_config));
  EXPECT_NE(s->layout_fingerprint(), t->layout_fingerprint());
  EXPECT_EQ(s->layout_fingerprint(), DiskStorage::layout_fingerprint(small_config()));
  SlotBuffer buf(s->slot_bytes());
  std::memset(buf.p, 0x11, s->block_bytes());
  s->seal_slot(2, buf.span(), 7);
  ASSERT_TRUE(s->verify_slot(2, buf.span(), 7));
  const io::IoStatus r = t->verify_slot(2, buf.span(), 7);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), EBADMSG);
  EXPECT_NE(r.message().find("another layout"), std::string::npos) << r.message();
}

TEST_P(DiskStorageTest, BadBuffersAndIdsAreUsageErrors) {
  KVBM_MAKE_OR_SKIP(s, options(3));
  SlotBuffer buf(s->slot_bytes() + DiskStorage::kAlignment);
  EXPECT_THROW((void)s->write_slot(3, std::span<std::byte>(buf.p, s->slot_bytes())), UsageError);
  EXPECT_THROW((void)s->write_slot(0, std::span<std::byte>(buf.p, s->slot_bytes() - 1)),
               UsageError);
  EXPECT_THROW((void)s->write_slot(0, std::span<std::byte>(buf.p + 512, s->slot_bytes())),
               UsageError);
  EXPECT_THROW((void)s->slot_offset(3), UsageError);
}

TEST_P(DiskStorageTest, MissingDirectorySaysCreateIt) {
  auto o = options();
  o.directory = dir_->path() / "does" / "not" / "exist";
  try {
    (void)DiskStorage::create(o);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
    EXPECT_NE(m.find("create it"), std::string::npos) << m;
    EXPECT_NE(m.find(o.directory.string()), std::string::npos) << m;
  }
}

TEST_P(DiskStorageTest, DirectoryThatIsAFileIsRefused) {
  auto o = options();
  o.directory = dir_->path() / "plain";
  std::ofstream(o.directory) << "x";
  try {
    (void)DiskStorage::create(o);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
}

TEST_P(DiskStorageTest, SymlinkedDirectoryIsRefused) {
  fs::create_directory(dir_->path() / "real");
  fs::create_directory_symlink(dir_->path() / "real", dir_->path() / "link");
  auto o = options();
  o.directory = dir_->path() / "link";
  try {
    (void)DiskStorage::create(o);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("symlink"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir_->path() / "real"));
}

TEST_P(DiskStorageTest, SymlinkOrExistingFileAtTheFileNameIsRefusedAndUntouched) {
  const fs::path target = dir_->path() / "target";
  std::ofstream(target) << "precious";
  fs::create_symlink(target, dir_->path() / "link.slots");
  fs::create_symlink(dir_->path() / "nowhere", dir_->path() / "dangling.slots");
  for (const char* name : {"link.slots", "dangling.slots", "target"}) {
    auto o = options();
    o.file_name = name;
    auto r = DiskStorage::create(o);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code, EEXIST) << name;
    EXPECT_NE(r.error().message.find("already exists"), std::string::npos) << r.error().message;
  }
  std::ifstream in(target);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
  EXPECT_FALSE(fs::exists(dir_->path() / "nowhere"));
  EXPECT_TRUE(fs::is_symlink(dir_->path() / "link.slots"));
}

TEST_P(DiskStorageTest, BadOptionsAreUsageErrors) {
  auto o = options(0);
  EXPECT_THROW((void)DiskStorage::create(o), UsageError);
  o = options();
  o.file_name = "sub/file";
  EXPECT_THROW((void)DiskStorage::create(o), UsageError);
  o.file_name = "..";
  EXPECT_THROW((void)DiskStorage::create(o), UsageError);
  o = options();
  o.directory.clear();
  EXPECT_THROW((void)DiskStorage::create(o), UsageError);
  o = options();
  o.config.num_layers = 0;
  EXPECT_THROW((void)DiskStorage::create(o), UsageError);
  EXPECT_TRUE(fs::is_empty(dir_->path()));
}

// A block so large that the slot (block rounded up to 4096, header sector) or the
// file size no longer fits in 64 bits is refused before anything is created.
// Unchecked, round_up(2^64 - 64 + 64, 4096) was 0 and the offset check divided by it.
TEST_P(DiskStorageTest, BlocksTooLargeForASlotAreUsageErrors) {
  LayoutConfig wraps_to_zero;  // 2 x (2^31 - 4) x (2^29 + 1) x 8 = 2^64 - 64 bytes
  wraps_to_zero.num_layers = 1;
  wraps_to_zero.outer_dim = 2;
  wraps_to_zero.page_size = (1U << 31) - 4;
  wraps_to_zero.inner_dim = (1U << 29) + 1;
  wraps_to_zero.dtype_bytes = 8;
  ASSERT_NO_THROW(wraps_to_zero.validate());
  LayoutConfig wraps_small;  // 42007935 x 6700417 x 65537 = 2^64 - 1 bytes
  wraps_small.num_layers = 42007935;
  wraps_small.outer_dim = 1;
  wraps_small.page_size = 6700417;
  wraps_small.inner_dim = 65537;
  wraps_small.dtype_bytes = 1;
  ASSERT_NO_THROW(wraps_small.validate());
  LayoutConfig big_file;  // 2^39-byte blocks: 2^25 of their slots pass 2^63 bytes
  big_file.num_layers = 1U << 10;
  big_file.outer_dim = 2;
  big_file.page_size = 1U << 9;
  big_file.inner_dim = 1U << 19;
  big_file.dtype_bytes = 1;
  for (const auto& [config, blocks, needle] :
       {std::tuple{wraps_to_zero, std::size_t{1}, "slot"},
        std::tuple{wraps_small, std::size_t{1}, "slot"},
        std::tuple{big_file, std::size_t{1} << 25, "file offset"}}) {
    try {
      (void)DiskStorage::create(options(blocks, config));
      ADD_FAILURE() << "expected a UsageError for a block of " << config.block_bytes() << " bytes";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(fs::is_empty(dir_->path()));
}

INSTANTIATE_TEST_SUITE_P(Targets, DiskStorageTest, ::testing::ValuesIn(test::kTargets),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- fallbacks and creation failures, injected through the syscall table ----

int fcntl_setfl_einval(int fd, int cmd, int arg) {
  if (cmd == F_SETFL && (arg & O_DIRECT) != 0) {
    errno = EINVAL;
    return -1;
  }
  return io::real_syscalls().fcntl(fd, cmd, arg);
}
int fallocate_eopnotsupp(int, int, std::int64_t, std::int64_t) {
  errno = EOPNOTSUPP;
  return -1;
}
int fallocate_enospc(int, int, std::int64_t, std::int64_t) {
  errno = ENOSPC;
  return -1;
}
int g_fallocate_eintr = 0;
int fallocate_eintr_then_real(int fd, int mode, std::int64_t off, std::int64_t len) {
  if (g_fallocate_eintr-- > 0) {
    errno = EINTR;
    return -1;
  }
  return io::real_syscalls().fallocate(fd, mode, off, len);
}

class DiskStorageCreationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(test::kTargets[0], why);
    if (!base) KVBM_SKIP_OR_FAIL(why);
    dir_ = std::make_unique<TempDir>(*base);
  }
  DiskStorageOptions options(DirectIo d = DirectIo::kPreferred) const {
    return {.directory = dir_->path(),
            .config = small_config(),
            .num_blocks = 8,
            .file_name = {},
            .direct_io = d};
  }
  std::unique_ptr<TempDir> dir_;
};

TEST_F(DiskStorageCreationTest, ODirectRefusedFallsBackToBufferedWithALogLine) {
  io::SyscallTable t = io::real_syscalls();
  t.fcntl = &fcntl_setfl_einval;
  io::ScopedSyscallOverride o(t);
  test::LogCapture log;
  auto r = DiskStorage::create(options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value()->direct_io());
  EXPECT_EQ(::fcntl(r.value()->fd(), F_GETFL) & O_DIRECT, 0);
  EXPECT_NE(log.text().find("does not support O_DIRECT"), std::string::npos) << log.text();
  SlotBuffer buf(r.value()->slot_bytes());
  std::memset(buf.p, 1, r.value()->block_bytes());
  ASSERT_TRUE(r.value()->write_slot(3, buf.span()));
  ASSERT_TRUE(r.value()->read_slot(3, buf.span()));
}

TEST_F(DiskStorageCreationTest, ODirectRequiredButRefusedFailsAndLeavesNothing) {
  io::SyscallTable t = io::real_syscalls();
  t.fcntl = &fcntl_setfl_einval;
  io::ScopedSyscallOverride o(t);
  auto r = DiskStorage::create(options(DirectIo::kRequired));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().message.find("O_DIRECT"), std::string::npos) << r.error().message;
  EXPECT_TRUE(fs::is_empty(dir_->path()));
}

TEST_F(DiskStorageCreationTest, TmpfsWorksWithOrWithoutODirect) {
  // tmpfs refuses O_DIRECT before Linux 6.6 (the real fallback) and accepts it
  // since; either way the pool works and says which it got.
  if (!test::is_tmpfs("/dev/shm")) KVBM_SKIP_OR_FAIL("no tmpfs: /dev/shm is not a tmpfs here");
  TempDir shm("/dev/shm");
  test::LogCapture log;
  auto o = options();
  o.directory = shm.path();
  auto r = DiskStorage::create(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const bool direct = r.value()->direct_io();
  EXPECT_EQ(log.text().find("does not support O_DIRECT") != std::string::npos, !direct)
      << log.text();
  o.direct_io = DirectIo::kRequired;
  auto required = DiskStorage::create(o);
  EXPECT_EQ(required.ok(), direct);
  if (!direct) {
    EXPECT_EQ(required.error().code, EINVAL);
  }
  SlotBuffer buf(r.value()->slot_bytes());
  std::memset(buf.p, 9, r.value()->block_bytes());
  ASSERT_TRUE(r.value()->write_slot(7, buf.span()));
  ASSERT_TRUE(r.value()->read_slot(7, buf.span()));
  std::cout << "tmpfs O_DIRECT on this kernel: "
            << (direct ? "accepted" : "refused, buffered fallback") << "\n";
}

TEST_F(DiskStorageCreationTest, FallocateUnsupportedFallsBackToFtruncate) {
  io::SyscallTable t = io::real_syscalls();
  t.fallocate = &fallocate_eopnotsupp;
  io::ScopedSyscallOverride o(t);
  test::LogCapture log;
  auto r = DiskStorage::create(options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fs::file_size(r.value()->path()), r.value()->file_bytes());
  EXPECT_NE(log.text().find("ftruncate"), std::string::npos) << log.text();
}

TEST_F(DiskStorageCreationTest, FallocateEintrIsRetried) {
  io::SyscallTable t = io::real_syscalls();
  t.fallocate = &fallocate_eintr_then_real;
  io::ScopedSyscallOverride o(t);
  g_fallocate_eintr = 2;
  auto r = DiskStorage::create(options());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fs::file_size(r.value()->path()), r.value()->file_bytes());
}

TEST_F(DiskStorageCreationTest, NoSpaceIsAnIoErrorAndTheFileIsRemoved) {
  io::SyscallTable t = io::real_syscalls();
  t.fallocate = &fallocate_enospc;
  io::ScopedSyscallOverride o(t);
  auto r = DiskStorage::create(options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOSPC);
  EXPECT_NE(r.error().message.find("not enough free space"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(fs::is_empty(dir_->path()));
}

TEST_F(DiskStorageCreationTest, UnreadableDirectoryIsAnIoError) {
  fs::create_directory(dir_->path() / "locked");
  fs::permissions(dir_->path() / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  auto o = options();
  o.directory = dir_->path() / "locked";
  // Root too: without CAP_DAC_OVERRIDE on this thread the directory's bits apply.
  const test::PermissionChecksOn checks;
  ASSERT_TRUE(checks.active()) << checks.why_not();
  auto r = DiskStorage::create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EACCES);
  fs::permissions(dir_->path() / "locked", fs::perms::owner_all);
}

}  // namespace disk_storage_test
}  // namespace kvbm
