// Creating and opening a disk pool file: the directory, the lock, the
// superblock, and what an existing file is worth (kvbm/disk/disk_storage.h).

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <system_error>

#include <spdlog/spdlog.h>

#include "disk/disk_format.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/logging.h"

namespace kvbm {
namespace {

constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
constexpr const char* kPersistentFileName = "kvbm.slots";

std::string default_file_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "kvbm-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) +
         ".slots";
}

io::IoError prefixed(io::IoError error, const std::string& prefix) {
  error.message = prefix + error.message;
  return error;
}

/// Refuses (UsageError) a persistent directory, lock file or slot file that
/// another user owns or anybody may write.
void check_owner(int fd, const std::string& what, const std::string& path, bool regular) {
  struct stat st {};
  if (io::syscalls().fstat(fd, &st) != 0) return;  // the I/O that follows reports the problem
  KVBM_CHECK(!regular || S_ISREG(st.st_mode), "persistent disk pool ", what, " '", path,
             "' is not a regular file; remove it or choose another file_name");
  KVBM_CHECK(
      st.st_uid == ::geteuid(), "persistent disk pool ", what, " '", path, "' belongs to uid ",
      st.st_uid, ", not to this process's uid ", ::geteuid(),
      "; kvbm keeps a persistent cache only in its own user's files: use a directory of this user");
  KVBM_CHECK(
      (st.st_mode & S_IWOTH) == 0, "persistent disk pool ", what, " '", path,
      "' is world-writable; anybody could change the cached blocks: chmod o-w it, or use a private "
      "directory (kvbm creates a missing one 0700)");
}

/// Opens the existing persistent pool file, never through a symlink: an empty
/// File when there is none (ENOENT), an IoError for any other failure.
Result<io::File, io::IoError> open_existing_file(int dir, const std::string& name,
                                                 const std::filesystem::path& path) {
  auto opened = io::open_file(dir, name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (opened) return std::move(opened).value();
  if (opened.error().code == ELOOP) {
    return io::IoError{
        ELOOP, "disk pool file '" + path.string() +
                   "' is a symlink; kvbm never follows one: remove it or choose another file_name"};
  }
  if (opened.error().code != ENOENT) return prefixed(std::move(opened).error(), "disk pool file: ");
  return io::File();
}

/// Creates the pool file, 0600; an existing file or symlink is refused (EEXIST).
Result<io::File, io::IoError> create_new_file(int dir, const std::string& name,
                                              const std::filesystem::path& path) {
  auto made =
      io::open_file(dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (made) return std::move(made).value();
  auto error = std::move(made).error();
  if (error.code == EEXIST) {
    error.message =
        "disk pool file '" + path.string() +
        "' already exists (kvbm never opens, follows or replaces an existing file or symlink); "
        "remove it or choose another file_name: " +
        error.message;
  }
  return error;
}

/// Removes the file a failed creation made; a failure is logged, never thrown.
void remove_created(int dir, const std::string& name, const std::filesystem::path& path) {
  if (io::syscalls().unlinkat(dir, name.c_str(), 0) != 0) {
    const int err = errno;
    logger()->warn("could not remove '{}' after a failed creation: {}", path.string(),
                   std::system_category().message(err));
  }
}

/// Switches `fd` to O_DIRECT: true when on, false when the file system does not
/// support it (EINVAL) and `mode` lets buffered I/O stand in; an IoError otherwise.
Result<bool, io::IoError> enable_direct_io(int fd, DirectIo mode, const std::filesystem::path& path,
                                           const std::string& dir) {
  const auto& sys = io::syscalls();
  const int flags = sys.fcntl(fd, F_GETFL, 0);
  if (flags < 0) {
    const int err = errno;
    return io::make_io_error(err, "fcntl(F_GETFL) on '" + path.string() + "'");
  }
  if (sys.fcntl(fd, F_SETFL, flags | O_DIRECT) == 0) return true;
  const int err = errno;
  if (err != EINVAL || mode == DirectIo::kRequired) {
    return io::make_io_error(
        err, "enabling O_DIRECT on '" + path.string() + "'" +
                 (err == EINVAL
                      ? " (the file system does not support it; use DirectIo::kPreferred or kOff)"
                      : ""));
  }
  logger()->info(
      "the file system of '{}' does not support O_DIRECT; the disk pool uses buffered I/O", dir);
  return false;
}

/// fdatasync of the directory of a new persistent pool, so that its name is durable.
/// EINVAL: the file system cannot sync a directory (its names are durable on their own
/// or never); any other failure leaves the name unpromised, so creation fails.
io::IoStatus sync_directory(int dir_fd, const std::string& dir) {
  if (io::syscalls().fdatasync(dir_fd) != 0 && errno != EINVAL) {
    const int err = errno;
    return io::make_io_error(err, "fdatasync of the disk pool directory '" + dir + "'");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<DiskStorage>, io::IoError> DiskStorage::open(DiskStorageOptions options) {
  options.persistent = true;
  return create(options);
}

std::unique_ptr<DiskStorage> DiskStorage::with_geometry(const DiskStorageOptions& options) {
  options.config.validate();
  KVBM_CHECK(
      !options.directory.empty(),
      "DiskStorageOptions::directory is empty; name an existing directory on the disk to use");
  KVBM_CHECK(options.namespace_id.size() <= kMaxNamespaceBytes,
             "DiskStorageOptions::namespace_id has ", options.namespace_id.size(),
             " bytes; use at most ", kMaxNamespaceBytes, " (a model name and revision)");

  std::unique_ptr<DiskStorage> s(new DiskStorage());
  s->config_ = options.config;
  s->block_bytes_ = options.config.block_bytes();
  // The slot (block rounded up, header sector) must be a file offset itself,
  // or the rounding below wraps (to 0 for a block of 2^64 - 64 bytes).
  KVBM_CHECK(s->block_bytes_ <= kMaxOffset - kHeaderSectorBytes - (kAlignment - 1),
             "DiskStorageOptions::config: a block of ", s->block_bytes_,
             " bytes leaves no room for a disk slot (block rounded up to ", kAlignment, ", then a ",
             kHeaderSectorBytes, "-byte header sector) in a file offset; use a smaller layout");
  s->slot_bytes_ = detail::round_up(s->block_bytes_, kAlignment) + kHeaderSectorBytes;
  s->namespace_id_ = options.namespace_id;
  s->layout_fingerprint_ = layout_fingerprint(options.config, options.namespace_id);
  s->keep_file_ = options.keep_file;
  s->persistent_ = options.persistent;
  s->file_name_ = !options.file_name.empty() ? options.file_name
                  : s->persistent_           ? std::string(kPersistentFileName)
                                             : default_file_name();
  KVBM_CHECK(s->file_name_ != "." && s->file_name_ != ".." &&
                 s->file_name_.find('/') == std::string::npos &&
                 s->file_name_.find('\0') == std::string::npos,
             "DiskStorageOptions::file_name '", s->file_name_,
             "' must be a plain file name (no '/', not '.' or '..'); put the path in `directory`");
  s->path_ = options.directory / s->file_name_;
  return s;
}

io::IoStatus DiskStorage::open_directory(const DiskStorageOptions& options) {
  // Never through a symlink in its last component; a persistent one (not
  // read-only) is created 0700 when missing.
  const std::string dir = options.directory.string();
  for (int attempt = 0;; ++attempt) {
    auto opened =
        io::open_file(AT_FDCWD, dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (opened) {
      dir_ = std::move(opened).value();
      return {};
    }
    const int err = opened.error().code;
    if (err == ENOENT && read_only_) {
      return io::IoError{ENOENT, "disk pool directory '" + dir + "' does not exist (yet)"};
    }
    if (err == ENOENT && persistent_ && attempt == 0) {
      if (io::syscalls().mkdirat(AT_FDCWD, dir.c_str(), 0700) == 0 || errno == EEXIST) continue;
      const int merr = errno;
      KVBM_CHECK(merr != ENOENT, "cannot create the persistent disk pool directory '", dir,
                 "': its parent does not exist; create it (mkdir -p) or name another directory");
      return io::make_io_error(merr, "creating the disk pool directory '" + dir + "'");
    }
    std::error_code ec;
    const bool is_link = std::filesystem::is_symlink(options.directory, ec);
    KVBM_CHECK(err != ENOENT, "disk pool directory '", dir,
               "' does not exist; create it (mkdir -p '", dir, "') or name an existing directory");
    KVBM_CHECK(err != ELOOP && !(err == ENOTDIR && is_link), "disk pool directory '", dir,
               "' is a symlink; kvbm never follows symlinks: pass the real directory it points to");
    KVBM_CHECK(err != ENOTDIR, "disk pool directory '", dir,
               "' is not a directory; name a directory");
    return prefixed(std::move(opened).error(), "disk pool directory: ");
  }
}

Result<std::unique_ptr<DiskStorage>, io::IoError> DiskStorage::open_read_only(
    const DiskStorageOptions& options) {
  auto s = with_geometry(options);
  s->read_only_ = true;
  s->persistent_ = true;
  if (auto st = s->open_directory(options); !st) return st.error();
  const std::string dir = options.directory.string();
  check_owner(s->dir_.get(), "directory", dir, false);
  auto opened =
      io::open_file(s->dir_.get(), s->file_name_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (!opened) {
    auto error = std::move(opened).error();
    if (error.code == ENOENT)
      return io::IoError{ENOENT, "disk pool file '" + s->path_.string() + "' does not exist (yet)"};
    return prefixed(std::move(error), "disk pool file: ");
  }
  s->file_ = std::move(opened).value();
  check_owner(s->file_.get(), "file", s->path_.string(), true);
  SlotDiscard reason = SlotDiscard::kAbsent;
  std::string why;
  std::uint64_t slots = 0;
  if (auto st = s->read_superblock(reason, why, slots); !st) return st.error();
  if (!why.empty()) {
    return io::IoError{EBADMSG, "disk pool file '" + s->path_.string() + "' holds " + why +
                                    "; nothing of it can be read as this pool's blocks"};
  }
  if (slots == 0) {
    return io::IoError{EBADMSG, "disk pool file '" + s->path_.string() +
                                    "' records no slots; nothing of it can be read"};
  }
  s->num_blocks_ = slots;
  s->live_ = std::make_unique<std::atomic<std::uint64_t>[]>((s->num_blocks_ + 63) / 64);
  s->state_ = DiskFileState::kReopened;
  return s;
}

Result<std::unique_ptr<DiskStorage>, io::IoError> DiskStorage::create(
    const DiskStorageOptions& options) {
  KVBM_CHECK(options.num_blocks > 0,
             "DiskStorageOptions::num_blocks is 0; a disk pool needs at least one block");
  auto s = with_geometry(options);
  s->num_blocks_ = options.num_blocks;
  KVBM_CHECK(s->num_blocks_ <= (kMaxOffset - kSuperblockBytes) / s->slot_bytes_,
             "DiskStorageOptions: num_blocks x slot bytes (", s->num_blocks_, " x ", s->slot_bytes_,
             ") overflows a file offset; use fewer blocks");
  s->live_ = std::make_unique<std::atomic<std::uint64_t>[]>((s->num_blocks_ + 63) / 64);
  const std::string dir = options.directory.string();
  if (auto st = s->open_directory(options); !st) return st.error();
  if (s->persistent_) {
    check_owner(s->dir_.get(), "directory", dir, false);
    if (auto st = s->take_lock(); !st) return st.error();
  }

  // The file: a scratch file is created here and now, 0600, and an existing
  // file or symlink is refused; a persistent one is opened when it exists.
  bool created = true;
  if (s->persistent_) {
    auto existing = open_existing_file(s->dir_.get(), s->file_name_, s->path_);
    if (!existing) return std::move(existing).error();
    if (existing.value().valid()) {
      s->file_ = std::move(existing).value();
      created = false;
      check_owner(s->file_.get(), "file", s->path_.string(), true);
    }
  }
  if (created) {
    auto made = create_new_file(s->dir_.get(), s->file_name_, s->path_);
    if (!made) return std::move(made).error();
    s->file_ = std::move(made).value();
  }

  // From here on a failure removes a file this call created.
  auto fail = [&](io::IoError error) -> io::IoError {
    if (created) remove_created(s->dir_.get(), s->file_name_, s->path_);
    s->file_ = io::File();  // the destructor has nothing left to remove
    return error;
  };

  if (options.direct_io != DirectIo::kOff) {
    auto direct = enable_direct_io(s->file_.get(), options.direct_io, s->path_, dir);
    if (!direct) return fail(std::move(direct).error());
    s->direct_io_ = direct.value();
  }

  if (created) {
    if (auto st = s->allocate(s->file_bytes()); !st) return fail(st.error());
    if (auto st = s->write_superblock(); !st) return fail(st.error());
    if (s->persistent_) {
      // The file and its name durable before any block is promised.
      if (auto st = s->sync(); !st) return fail(st.error());
      if (auto st = sync_directory(s->dir_.get(), dir); !st) return fail(st.error());
    }
    s->state_ = DiskFileState::kCreated;
    return s;
  }
  if (auto st = s->adopt_existing(); !st) {
    s->file_ = io::File();
    return st.error();
  }
  return s;
}

io::IoStatus DiskStorage::take_lock() {
  const std::string name = file_name_ + ".lock";
  const std::string path = (path_.parent_path() / name).string();
  auto opened =
      io::open_file(dir_.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (!opened) return prefixed(std::move(opened).error(), "disk pool lock file: ");
  lock_ = std::move(opened).value();
  check_owner(lock_.get(), "lock file", path, true);
  for (;;) {
    if (io::syscalls().flock(lock_.get(), LOCK_EX | LOCK_NB) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) return io::make_io_error(err, "flock of '" + path + "'");
    char buf[32] = {};
    const std::int64_t n = io::syscalls().pread(lock_.get(), buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) pid = "unknown";
    lock_ = io::File();
    std::string message =
        "disk pool directory '" + path_.parent_path().string() + "' is in use by process ";
    message += pid;
    message += " (it holds the lock '";
    message += path;
    message +=
        "'); one process owns a persistent disk pool at a time: stop that process, or give this "
        "one "
        "another directory";
    return io::IoError{EBUSY, std::move(message)};
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (io::syscalls().ftruncate(lock_.get(), 0) != 0 ||
      !io::pwrite_full(lock_.get(), pid.data(), pid.size(), 0)) {
    logger()->warn("could not record this process's pid in '{}'", path);  // the lock holds anyway
  }
  return {};
}

io::IoStatus DiskStorage::allocate(std::uint64_t bytes) const {
  const auto size = static_cast<std::int64_t>(bytes);
  for (;;) {
    if (io::syscalls().fallocate(file_.get(), 0, 0, size) == 0) return {};
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EOPNOTSUPP || err == ENOSYS) {
      logger()->info(
          "the file system of '{}' does not support fallocate; the disk pool file is sized with "
          "ftruncate (space is not reserved)",
          path_.parent_path().string());
      for (;;) {
        if (io::syscalls().ftruncate(file_.get(), size) == 0) return {};
        const int terr = errno;
        if (terr == EINTR) continue;
        return io::make_io_error(
            terr, "ftruncate of '" + path_.string() + "' to " + std::to_string(size) + " bytes");
      }
    }
    return io::make_io_error(
        err,
        "fallocate of " + std::to_string(size) + " bytes for '" + path_.string() + "'" +
            (err == ENOSPC
                 ? " (not enough free space in the directory; use fewer blocks or another disk)"
                 : ""));
  }
}

io::IoStatus DiskStorage::write_superblock() const {
  detail::AlignedBuffer sector(kAlignment);
  detail::Superblock sb{};
  sb.magic = detail::kFileMagic;
  sb.version = kFormatVersion;
  sb.superblock_bytes = sizeof sb;
  sb.slot_bytes = slot_bytes_;
  sb.block_bytes = block_bytes_;
  sb.num_blocks = num_blocks_;
  sb.fingerprint = layout_fingerprint_;
  sb.checksum = XXH3_64bits(&sb, detail::kSuperblockHashedBytes);
  std::memcpy(sector.p, &sb, sizeof sb);
  auto st = io::pwrite_full(file_.get(), sector.p, kSuperblockBytes,
                            static_cast<std::int64_t>(std::uint64_t{num_blocks_} * slot_bytes_));
  if (!st) return prefixed(st.error(), "write of the superblock of '" + path_.string() + "': ");
  return {};
}

io::IoStatus DiskStorage::read_superblock(SlotDiscard& reason, std::string& why,
                                          std::uint64_t& slots) const {
  struct stat st {};
  if (io::syscalls().fstat(file_.get(), &st) != 0) {
    const int err = errno;
    return io::make_io_error(err, "fstat of '" + path_.string() + "'");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  slots = 0;
  reason = SlotDiscard::kHeaderChecksum;
  if (size < kSuperblockBytes || size % kAlignment != 0) {
    why = "no kvbm superblock (a size of " + std::to_string(size) + " bytes)";
    return {};
  }
  detail::AlignedBuffer sector(kAlignment);
  if (auto r = io::pread_full(file_.get(), sector.p, kSuperblockBytes,
                              static_cast<std::int64_t>(size - kAlignment));
      !r) {
    return prefixed(r.error(), "read of the superblock of '" + path_.string() + "': ");
  }
  detail::Superblock sb{};
  std::memcpy(&sb, sector.p, sizeof sb);
  if (sb.magic != detail::kFileMagic ||
      sb.checksum != XXH3_64bits(&sb, detail::kSuperblockHashedBytes)) {
    why = "no valid kvbm superblock";
    return {};
  }
  slots = sb.num_blocks;
  if (sb.version != kFormatVersion) {
    reason = SlotDiscard::kFormatVersion;
    why = "format version " + std::to_string(sb.version) + " (this kvbm writes " +
          std::to_string(kFormatVersion) + ")";
  } else if (sb.slot_bytes != slot_bytes_ || sb.block_bytes != block_bytes_ ||
             sb.superblock_bytes != sizeof sb) {
    reason = SlotDiscard::kGeometry;
    why = "blocks of " + std::to_string(sb.block_bytes) + " bytes in slots of " +
          std::to_string(sb.slot_bytes) + " (this pool: " + std::to_string(block_bytes_) + " in " +
          std::to_string(slot_bytes_) + ")";
  } else if (sb.fingerprint != layout_fingerprint_) {
    reason = SlotDiscard::kFingerprint;
    why = "blocks of another layout or namespace (fingerprint " + std::to_string(sb.fingerprint) +
          ", this pool's: " + std::to_string(layout_fingerprint_) + ")";
  } else if (sb.num_blocks > (kMaxOffset - kSuperblockBytes) / slot_bytes_ ||
             sb.num_blocks * slot_bytes_ + kSuperblockBytes != size) {
    reason = SlotDiscard::kGeometry;
    why = "a superblock of " + std::to_string(sb.num_blocks) + " slots in a file of " +
          std::to_string(size) + " bytes";
    slots = 0;
  }
  return {};
}

io::IoStatus DiskStorage::adopt_existing() {
  SlotDiscard reason = SlotDiscard::kAbsent;
  std::string why;
  std::uint64_t slots = 0;
  if (auto st = read_superblock(reason, why, slots); !st) return st;
  if (!why.empty()) return reset_file(reason, std::move(why), slots);
  if (slots == num_blocks_) {
    state_ = DiskFileState::kReopened;
    set_all_live(num_blocks_);
    return {};
  }
  // Another number of slots of the same kind: keep the common ones.
  logger()->info("disk pool file '{}' held {} slots; resized to {}", path_.string(), slots,
                 num_blocks_);
  if (slots > num_blocks_) {
    if (io::syscalls().ftruncate(file_.get(), static_cast<std::int64_t>(std::uint64_t{num_blocks_} *
                                                                        slot_bytes_)) != 0) {
      const int err = errno;
      return io::make_io_error(err, "shrinking '" + path_.string() + "'");
    }
  }
  if (auto r = allocate(file_bytes()); !r) return r;
  if (auto r = write_superblock(); !r) return r;
  if (auto r = sync(); !r) return r;
  state_ = DiskFileState::kResized;
  set_all_live(std::min<std::size_t>(num_blocks_, slots));
  return {};
}

io::IoStatus DiskStorage::reset_file(SlotDiscard reason, std::string why, std::uint64_t old_slots) {
  logger()->warn("disk pool file '{}' holds {}; it is emptied and none of its blocks is served",
                 path_.string(), why);
  if (io::syscalls().ftruncate(file_.get(), 0) != 0) {
    const int err = errno;
    return io::make_io_error(err, "emptying '" + path_.string() + "'");
  }
  if (auto r = allocate(file_bytes()); !r) return r;
  if (auto r = write_superblock(); !r) return r;
  if (auto r = sync(); !r) return r;
  state_ = DiskFileState::kReset;
  reset_discard_ = reason;
  reset_reason_ = std::move(why);
  reset_slots_ = old_slots;
  set_all_live(0);
  return {};
}

DiskStorage::~DiskStorage() {
  try {
    if (!file_.valid() || read_only_) return;
    if (keep_file_ || persistent_) {
      if (io::syscalls().fdatasync(file_.get()) != 0) {
        const int err = errno;
        logger()->warn("fdatasync of kept disk pool file '{}' failed: {}", path_.string(),
                       std::system_category().message(err));
      }
    } else if (io::syscalls().unlinkat(dir_.get(), file_name_.c_str(), 0) != 0) {
      const int err = errno;
      logger()->warn("could not remove disk pool file '{}': {}", path_.string(),
                     std::system_category().message(err));
    }
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
    // No memory for the log line (bad_alloc), or the logger failed: a
    // destructor never throws, and there is nothing left to report with.
  }
}

}  // namespace kvbm
