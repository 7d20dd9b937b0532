#include "kvbm/io/syscalls.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <system_error>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"

namespace kvbm::io {
namespace {

static_assert(sizeof(off_t) == sizeof(std::int64_t) && sizeof(ssize_t) == sizeof(std::int64_t),
              "kvbm's disk path assumes a 64-bit off_t and ssize_t (LP64 Linux)");

int real_openat(int dirfd, const char* path, int flags, unsigned mode) {
  return ::openat(dirfd, path, flags, static_cast<mode_t>(mode));
}
int real_close(int fd) { return ::close(fd); }
std::int64_t real_pread(int fd, void* buf, std::size_t count, std::int64_t offset) {
  return ::pread(fd, buf, count, static_cast<off_t>(offset));
}
std::int64_t real_pwrite(int fd, const void* buf, std::size_t count, std::int64_t offset) {
  return ::pwrite(fd, buf, count, static_cast<off_t>(offset));
}
std::int64_t real_pwritev(int fd, const struct iovec* iov, int iovcnt, std::int64_t offset) {
  return ::pwritev(fd, iov, iovcnt, static_cast<off_t>(offset));
}
int real_fallocate(int fd, int mode, std::int64_t offset, std::int64_t length) {
  return ::fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(length));
}
int real_ftruncate(int fd, std::int64_t length) {
  return ::ftruncate(fd, static_cast<off_t>(length));
}
int real_fdatasync(int fd) { return ::fdatasync(fd); }
int real_fcntl(int fd, int cmd, int arg) { return ::fcntl(fd, cmd, arg); }
int real_unlinkat(int dirfd, const char* path, int flags) { return ::unlinkat(dirfd, path, flags); }
int real_flock(int fd, int operation) { return ::flock(fd, operation); }
int real_fstat(int fd, struct stat* st) { return ::fstat(fd, st); }
int real_mkdirat(int dirfd, const char* path, unsigned mode) {
  return ::mkdirat(dirfd, path, static_cast<mode_t>(mode));
}
std::int64_t real_sendmsg(int fd, const struct msghdr* msg, int flags) {
  return ::sendmsg(fd, msg, flags);
}

constexpr SyscallTable kRealTable{
    .openat = real_openat,
    .close = real_close,
    .pread = real_pread,
    .pwrite = real_pwrite,
    .pwritev = real_pwritev,
    .fallocate = real_fallocate,
    .ftruncate = real_ftruncate,
    .fdatasync = real_fdatasync,
    .fcntl = real_fcntl,
    .unlinkat = real_unlinkat,
    .flock = real_flock,
    .fstat = real_fstat,
    .mkdirat = real_mkdirat,
    .sendmsg = real_sendmsg,
};

std::atomic<const SyscallTable*> g_table{&kRealTable};

std::string transfer_what(const char* op, std::size_t size, std::int64_t offset, std::size_t done) {
  std::string what = op;
  what += " of ";
  what += std::to_string(size);
  what += " bytes at offset ";
  what += std::to_string(offset);
  if (done != 0) {
    what += " (after ";
    what += std::to_string(done);
    what += " bytes)";
  }
  return what;
}

}  // namespace

const SyscallTable& real_syscalls() noexcept { return kRealTable; }

const SyscallTable& syscalls() noexcept { return *g_table.load(std::memory_order_acquire); }

ScopedSyscallOverride::ScopedSyscallOverride(const SyscallTable& table) noexcept
    : table_(table), previous_(g_table.exchange(&table_, std::memory_order_acq_rel)) {}

ScopedSyscallOverride::~ScopedSyscallOverride() {
  g_table.store(previous_, std::memory_order_release);
}

IoError make_io_error(int code, const std::string& what) {
  return IoError{code, what + ": " + std::system_category().message(code)};
}

IoStatus File::close() {
  if (fd_ < 0) return {};
  const int fd = std::exchange(fd_, -1);
  if (syscalls().close(fd) != 0) {
    const int err = errno;
    return make_io_error(err, "close(" + std::to_string(fd) + ")");
  }
  return {};
}

void File::reset() noexcept {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (syscalls().close(fd) == 0) return;
  const int err = errno;
  try {
    logger()->warn("close({}) failed: {}", fd, std::system_category().message(err));
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
    // The logger failed (no memory): a destructor reports what it can and never throws.
  }
}

Result<File, IoError> open_file(int dirfd, const char* path, int flags, unsigned mode) {
  for (;;) {
    const int fd = syscalls().openat(dirfd, path, flags, mode);
    if (fd >= 0) return File(fd);
    const int err = errno;
    if (err == EINTR) continue;
    return make_io_error(err, std::string("open ") + path);
  }
}

IoStatus pread_full(int fd, void* buf, std::size_t size, std::int64_t offset) {
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t done = 0;
  while (done < size) {
    const std::int64_t n =
        syscalls().pread(fd, p + done, size - done, offset + static_cast<std::int64_t>(done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0)
      return make_io_error(ENODATA,
                           transfer_what("pread", size, offset, done) + " reached end of file");
    const int err = errno;
    if (err == EINTR) continue;
    return make_io_error(err, transfer_what("pread", size, offset, done));
  }
  return {};
}

IoStatus pwrite_full(int fd, const void* buf, std::size_t size, std::int64_t offset) {
  const auto* p = static_cast<const unsigned char*>(buf);
  std::size_t done = 0;
  while (done < size) {
    const std::int64_t n =
        syscalls().pwrite(fd, p + done, size - done, offset + static_cast<std::int64_t>(done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0)
      return make_io_error(EIO, transfer_what("pwrite", size, offset, done) + " made no progress");
    const int err = errno;
    if (err == EINTR) continue;
    return make_io_error(err, transfer_what("pwrite", size, offset, done));
  }
  return {};
}

IoStatus pwritev_full(int fd, struct iovec* iov, int iovcnt, std::int64_t offset) {
  std::size_t size = 0;
  for (int i = 0; i < iovcnt; ++i) size += iov[i].iov_len;
  std::size_t done = 0;
  int first = 0;
  while (done < size) {
    while (first < iovcnt && iov[first].iov_len == 0) ++first;
    const std::int64_t n = syscalls().pwritev(fd, iov + first, iovcnt - first,
                                              offset + static_cast<std::int64_t>(done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      auto left = static_cast<std::size_t>(n);
      while (left > 0 && first < iovcnt) {
        const std::size_t take = std::min(left, iov[first].iov_len);
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
        iov[first].iov_len -= take;
        left -= take;
        if (iov[first].iov_len == 0) ++first;
      }
      continue;
    }
    if (n == 0)
      return make_io_error(EIO, transfer_what("pwritev", size, offset, done) + " made no progress");
    const int err = errno;
    if (err == EINTR) continue;
    return make_io_error(err, transfer_what("pwritev", size, offset, done));
  }
  return {};
}

}  // namespace kvbm::io
