// Tests of kvbm/io/syscalls.h: the table indirection, the scoped override,
// pread_full / pwrite_full under EINTR, short transfers and errors, and File.

#include "kvbm/io/syscalls.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "disk/disk_test_util.h"

namespace kvbm::io {
namespace syscalls_test {

// State of the fakes below (one test at a time touches them).
std::atomic<int> g_calls{0};
std::atomic<int> g_eintr_left{0};
std::atomic<std::size_t> g_max_chunk{0};
std::atomic<int> g_fail_errno{0};
std::atomic<int> g_fail_after_calls{-1};
std::atomic<bool> g_zero_progress{false};

void reset_fakes() {
  g_calls = 0;
  g_eintr_left = 0;
  g_max_chunk = 0;
  g_fail_errno = 0;
  g_fail_after_calls = -1;
  g_zero_progress = false;
}

// Shared behaviour of the fake pread/pwrite: EINTR first, then an error after
// N calls, then chunks of at most g_max_chunk bytes.
template <class Real>
std::int64_t fake_io(Real real, int fd, void* buf, std::size_t count, std::int64_t offset) {
  const int call = g_calls++;
  if (g_eintr_left > 0) {
    --g_eintr_left;
    errno = EINTR;
    return -1;
  }
  if (g_fail_after_calls >= 0 && call >= g_fail_after_calls) {
    errno = g_fail_errno;
    return -1;
  }
  if (g_zero_progress) return 0;
  const std::size_t chunk = g_max_chunk == 0 ? count : std::min<std::size_t>(count, g_max_chunk);
  return real(fd, buf, chunk, offset);
}

std::int64_t fake_pwrite(int fd, const void* buf, std::size_t count, std::int64_t offset) {
  return fake_io([](int f, void* b, std::size_t c,
                    std::int64_t o) { return real_syscalls().pwrite(f, b, c, o); },
                 fd, const_cast<void*>(buf), count, offset);
}
std::int64_t fake_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  return fake_io([](int f, void* b, std::size_t c,
                    std::int64_t o) { return real_syscalls().pread(f, b, c, o); },
                 fd, buf, count, offset);
}
int fake_close_eio(int fd) {
  real_syscalls().close(fd);  // the descriptor is gone either way, as on Linux
  errno = EIO;
  return -1;
}
std::atomic<int> g_open_eintr{0};
int fake_openat_eintr(int dirfd, const char* path, int flags, unsigned mode) {
  if (g_open_eintr > 0) {
    --g_open_eintr;
    errno = EINTR;
    return -1;
  }
  return real_syscalls().openat(dirfd, path, flags, mode);
}

SyscallTable faulty_table() {
  SyscallTable t = real_syscalls();
  t.pread = &fake_pread;
  t.pwrite = &fake_pwrite;
  return t;
}

class SyscallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_fakes();
    auto opened = open_file(AT_FDCWD, (dir_.path() / "f").c_str(),
                            O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    file_ = std::move(opened).value();
    data_.resize(10000);
    std::iota(data_.begin(), data_.end(), static_cast<unsigned char>(7));
  }
  std::vector<unsigned char> read_back(std::size_t n, std::int64_t offset = 0) {
    std::vector<unsigned char> out(n);
    EXPECT_EQ(::pread(file_.get(), out.data(), n, offset), static_cast<ssize_t>(n));
    return out;
  }

  test::TempDir dir_{"/tmp"};
  File file_;
  std::vector<unsigned char> data_;
};

TEST_F(SyscallsTest, DefaultTableIsTheRealOne) { EXPECT_EQ(&syscalls(), &real_syscalls()); }

TEST_F(SyscallsTest, OverrideIsScopedAndNests) {
  SyscallTable a = real_syscalls();
  a.pwrite = &fake_pwrite;
  SyscallTable b = real_syscalls();
  b.pread = &fake_pread;
  {
    ScopedSyscallOverride outer(a);
    EXPECT_EQ(syscalls().pwrite, &fake_pwrite);
    EXPECT_NE(syscalls().pread, &fake_pread);
    {
      ScopedSyscallOverride inner(b);
      EXPECT_EQ(syscalls().pread, &fake_pread);
      EXPECT_NE(syscalls().pwrite, &fake_pwrite);
    }
    EXPECT_EQ(syscalls().pwrite, &fake_pwrite);
  }
  EXPECT_EQ(&syscalls(), &real_syscalls());
}

TEST_F(SyscallsTest, WriteFullRetriesEintrAndSucceeds) {
  ScopedSyscallOverride o(faulty_table());
  g_eintr_left = 3;
  ASSERT_TRUE(pwrite_full(file_.get(), data_.data(), data_.size(), 0));
  EXPECT_EQ(g_calls.load(), 4);
  EXPECT_EQ(read_back(data_.size()), data_);
}

TEST_F(SyscallsTest, WriteFullContinuesShortWrites) {
  ScopedSyscallOverride o(faulty_table());
  g_max_chunk = 999;
  ASSERT_TRUE(pwrite_full(file_.get(), data_.data(), data_.size(), 4096));
  EXPECT_EQ(g_calls.load(), 11);  // ceil(10000 / 999)
  EXPECT_EQ(read_back(data_.size(), 4096), data_);
}

TEST_F(SyscallsTest, WriteFullReportsEioWithOffsetAndProgress) {
  ScopedSyscallOverride o(faulty_table());
  g_max_chunk = 4000;
  g_fail_after_calls = 2;
  g_fail_errno = EIO;
  const IoStatus s = pwrite_full(file_.get(), data_.data(), data_.size(), 8192);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), EIO);
  EXPECT_NE(s.message().find("pwrite of 10000 bytes at offset 8192 (after 8000 bytes)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(std::strerror(EIO)), std::string::npos) << s.message();
}

TEST_F(SyscallsTest, WriteFullReportsEnospc) {
  ScopedSyscallOverride o(faulty_table());
  g_fail_after_calls = 0;
  g_fail_errno = ENOSPC;
  const IoStatus s = pwrite_full(file_.get(), data_.data(), data_.size(), 0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), ENOSPC);
}

TEST_F(SyscallsTest, WriteThatMakesNoProgressFailsInsteadOfSpinning) {
  ScopedSyscallOverride o(faulty_table());
  g_zero_progress = true;
  const IoStatus s = pwrite_full(file_.get(), data_.data(), data_.size(), 0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), EIO);
  EXPECT_NE(s.message().find("made no progress"), std::string::npos) << s.message();
  EXPECT_EQ(g_calls.load(), 1);
}

TEST_F(SyscallsTest, ReadFullRetriesEintrAndContinuesShortReads) {
  ASSERT_TRUE(pwrite_full(file_.get(), data_.data(), data_.size(), 0));
  ScopedSyscallOverride o(faulty_table());
  g_eintr_left = 2;
  g_max_chunk = 333;
  std::vector<unsigned char> out(data_.size());
  ASSERT_TRUE(pread_full(file_.get(), out.data(), out.size(), 0));
  EXPECT_EQ(out, data_);
  EXPECT_EQ(g_calls.load(), 2 + 31);  // two EINTR, then ceil(10000 / 333)
}

TEST_F(SyscallsTest, ReadPastEndOfFileIsEnodata) {
  ASSERT_TRUE(pwrite_full(file_.get(), data_.data(), 100, 0));
  std::vector<unsigned char> out(200);
  const IoStatus s = pread_full(file_.get(), out.data(), out.size(), 0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), ENODATA);
  EXPECT_NE(s.message().find("(after 100 bytes) reached end of file"), std::string::npos)
      << s.message();
}

TEST_F(SyscallsTest, ReadFullReportsEio) {
  ASSERT_TRUE(pwrite_full(file_.get(), data_.data(), data_.size(), 0));
  ScopedSyscallOverride o(faulty_table());
  g_fail_after_calls = 0;
  g_fail_errno = EIO;
  std::vector<unsigned char> out(data_.size());
  const IoStatus s = pread_full(file_.get(), out.data(), out.size(), 0);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), EIO);
  EXPECT_NE(s.message().find("pread"), std::string::npos);
}

TEST_F(SyscallsTest, OpenRetriesEintrAndNamesThePathOnFailure) {
  SyscallTable t = real_syscalls();
  t.openat = &fake_openat_eintr;
  ScopedSyscallOverride o(t);
  g_open_eintr = 2;
  auto ok = open_file(AT_FDCWD, (dir_.path() / "f").c_str(), O_RDONLY | O_CLOEXEC, 0);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok.value().valid());
  auto missing = open_file(AT_FDCWD, (dir_.path() / "nope").c_str(), O_RDONLY | O_CLOEXEC, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos);
}

TEST(FileTest, EmptyByDefaultMoveOnlyAndMovedFromIsEmpty) {
  static_assert(!std::is_copy_constructible_v<File> && !std::is_copy_assignable_v<File>);
  static_assert(std::is_nothrow_move_constructible_v<File> &&
                std::is_nothrow_move_assignable_v<File>);
  static_assert(std::is_nothrow_destructible_v<File>);
  File empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.get(), -1);

  File a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(a.valid());
  const int fd = a.get();
  File b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from is specified empty
  EXPECT_EQ(a.get(), -1);   // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), fd);
  File c;
  c = std::move(b);
  EXPECT_EQ(c.get(), fd);
  EXPECT_TRUE(c.close());
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // really closed
  EXPECT_TRUE(c.close());               // closing an empty File is a no-op
}

TEST(FileTest, ReleaseGivesUpOwnership) {
  File a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int fd = a.release();
  EXPECT_FALSE(a.valid());
  EXPECT_NE(::fcntl(fd, F_GETFD), -1);
  ::close(fd);
}

TEST(FileTest, MoveAssignClosesTheOldDescriptor) {
  File a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int old_fd = a.get();
  a = File(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(::fcntl(old_fd, F_GETFD), -1);
}

TEST(FileTest, FailedCloseIsReportedByCloseAndLoggedByTheDestructor) {
  SyscallTable t = real_syscalls();
  t.close = &fake_close_eio;
  test::LogCapture log;
  {
    ScopedSyscallOverride o(t);
    File a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    const IoStatus s = a.close();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.code(), EIO);
    EXPECT_FALSE(a.valid());
    { File b(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }  // destructor: must not throw, must log
  }
  EXPECT_NE(log.text().find("close("), std::string::npos) << log.text();
  EXPECT_NE(log.text().find(std::strerror(EIO)), std::string::npos) << log.text();
}

TEST(IoStatusTest, SuccessAndFailure) {
  const IoStatus ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), 0);
  EXPECT_THROW((void)ok.error(), UsageError);
  const IoStatus bad = make_io_error(ENOSPC, "writing");
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ENOSPC);
  EXPECT_EQ(bad.message(), std::string("writing: ") + std::strerror(ENOSPC));
}

}  // namespace syscalls_test
}  // namespace kvbm::io
