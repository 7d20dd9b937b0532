// kvbm/io/syscalls.h: the one indirection every disk syscall goes through
// (and the remote tier's sendmsg, so a test can see how its values are sent:
// through its kvbm::Env's table when one is given, kvbm/env.h).
//
// The disk tier never calls open, pread, pwrite, fallocate, ... directly: it
// calls through the SyscallTable in force, which holds plain function
// pointers to the real calls by default. A test installs a replacement table
// with ScopedSyscallOverride to inject EINTR, short reads and writes, EIO,
// ENOSPC or corrupted bytes, and restores the previous table when the scope
// ends. A replacement that wants the real behaviour for some calls forwards
// to real_syscalls().
//
// The entries keep POSIX semantics: -1 and errno on failure. Integer types are
// spelled with <cstdint> types so this header needs no POSIX headers
// (std::int64_t is off_t and ssize_t on the LP64 Linux targets kvbm supports).
//
// On top of the table: File, a move-only owner of a file descriptor (-1 when
// empty) whose noexcept destructor closes it and reports a failed close
// through kvbm::logger() instead of throwing; pread_full, pwrite_full and
// pwritev_full, which retry EINTR and continue short transfers until every byte moved or a
// real error occurred; and IoError / IoStatus, the values I/O failures are
// reported as (see docs/error_model.md).
//
// Thread-safety: syscalls() is one acquire load and may be called from any
// thread. ScopedSyscallOverride swaps the table atomically; the override must
// outlive every call that may still be using it (stop or drain the engines
// that do I/O before it goes out of scope). Overrides nest and must be
// destroyed in reverse order of construction.

#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvbm/error.h"

struct iovec;   // <sys/uio.h>
struct msghdr;  // <sys/socket.h>
struct stat;    // <sys/stat.h>

namespace kvbm::io {

/// Function pointers for every syscall the disk path makes. POSIX semantics.
struct SyscallTable {
  int (*openat)(int dirfd, const char* path, int flags, unsigned mode);
  int (*close)(int fd);
  std::int64_t (*pread)(int fd, void* buf, std::size_t count, std::int64_t offset);
  std::int64_t (*pwrite)(int fd, const void* buf, std::size_t count, std::int64_t offset);
  std::int64_t (*pwritev)(int fd, const struct iovec* iov, int iovcnt, std::int64_t offset);
  int (*fallocate)(int fd, int mode, std::int64_t offset, std::int64_t length);
  int (*ftruncate)(int fd, std::int64_t length);
  int (*fdatasync)(int fd);
  /// fcntl with an int argument (F_GETFL, F_SETFL).
  int (*fcntl)(int fd, int cmd, int arg);
  int (*unlinkat)(int dirfd, const char* path, int flags);
  /// flock(2): LOCK_EX | LOCK_NB and friends.
  int (*flock)(int fd, int operation);
  /// fstat(2).
  int (*fstat)(int fd, struct stat* st);
  /// mkdirat(2).
  int (*mkdirat)(int dirfd, const char* path, unsigned mode);
  /// sendmsg(2): the remote tier's requests (src/remote/redis_connection.cpp).
  std::int64_t (*sendmsg)(int fd, const struct msghdr* msg, int flags);
};

/// Returns the table of the real syscalls.
[[nodiscard]] const SyscallTable& real_syscalls() noexcept;

/// Returns the table in force: the real one unless a test has overridden it.
[[nodiscard]] const SyscallTable& syscalls() noexcept;

/// Installs a copy of `table` for the lifetime of this object, then restores
/// the table that was in force before. Meant for tests.
class ScopedSyscallOverride {
 public:
  explicit ScopedSyscallOverride(const SyscallTable& table) noexcept;
  ~ScopedSyscallOverride();
  ScopedSyscallOverride(const ScopedSyscallOverride&) = delete;
  ScopedSyscallOverride& operator=(const ScopedSyscallOverride&) = delete;

 private:
  SyscallTable table_;
  const SyscallTable* previous_;
};

/// An I/O failure: the errno value and what was being done, in words.
struct IoError {
  int code = 0;         ///< errno value (EIO, ENOSPC, ...; EBADMSG for a corrupt slot)
  std::string message;  ///< what failed, where, and strerror(code)
};

/// The outcome of an I/O operation that returns nothing on success.
class [[nodiscard]] IoStatus {
 public:
  /// Success.
  IoStatus() noexcept = default;
  /// Failure. Precondition: error.code != 0.
  IoStatus(IoError error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  /// Returns true on success.
  [[nodiscard]] bool ok() const noexcept { return error_.code == 0; }
  explicit operator bool() const noexcept { return ok(); }
  /// Returns the errno value; 0 on success.
  [[nodiscard]] int code() const noexcept { return error_.code; }
  /// Returns the failure's message; empty on success.
  [[nodiscard]] const std::string& message() const noexcept { return error_.message; }
  /// Returns the error. Precondition: !ok().
  [[nodiscard]] const IoError& error() const {
    KVBM_CHECK(!ok(), "IoStatus::error() called on a successful status; check ok() first");
    return error_;
  }

 private:
  IoError error_;
};

/// Returns "<what>: <strerror(code)>" (thread-safe).
[[nodiscard]] IoError make_io_error(int code, const std::string& what);

/// A move-only owner of a file descriptor. Empty (-1) when default-built,
/// moved from, released or closed.
class File {
 public:
  File() noexcept = default;
  /// Takes ownership of `fd` (-1 for none).
  explicit File(int fd) noexcept : fd_(fd) {}
  /// Closes the descriptor; a failed close is logged, never thrown.
  ~File() { reset(); }
  File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  File& operator=(File&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  /// Returns the descriptor, or -1 when empty.
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Returns true when the object owns a descriptor.
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  /// Gives up ownership without closing; returns the descriptor.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor now and reports the outcome. The object is empty
  /// afterwards even when close fails (Linux releases the descriptor anyway,
  /// so close is never retried).
  IoStatus close();

 private:
  void reset() noexcept;
  int fd_ = -1;
};

/// openat through the table, retrying EINTR. The error names `path`.
[[nodiscard]] Result<File, IoError> open_file(int dirfd, const char* path, int flags,
                                              unsigned mode);

/// Reads exactly `size` bytes at `offset` into `buf`: retries EINTR, continues
/// after short reads. Reaching end of file first fails with ENODATA.
IoStatus pread_full(int fd, void* buf, std::size_t size, std::int64_t offset);

/// Writes exactly `size` bytes at `offset` from `buf`: retries EINTR,
/// continues after short writes. A write that makes no progress fails with EIO.
IoStatus pwrite_full(int fd, const void* buf, std::size_t size, std::int64_t offset);

/// Writes every byte of the `iovcnt` buffers in `iov`, in order, at `offset`
/// with pwritev: retries EINTR, continues after short writes (advancing
/// `iov` in place, so its contents are unspecified afterwards). A write that
/// makes no progress fails with EIO. Precondition: 0 <= iovcnt <= IOV_MAX.
IoStatus pwritev_full(int fd, struct iovec* iov, int iovcnt, std::int64_t offset);

}  // namespace kvbm::io
