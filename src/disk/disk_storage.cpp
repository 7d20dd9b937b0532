#include "kvbm/disk/disk_storage.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "kvbm/logging.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm {
namespace {

constexpr std::uint64_t kMagic = 0x544F4C534D42564BULL;  // "KVBMSLOT" read as little-endian bytes

/// The last 64 bytes of every slot.
struct SlotFooter {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t footer_bytes;
  std::uint64_t block_bytes;
  std::uint64_t slot;
  std::uint64_t checksum;  // XXH3-64 of the block's bytes
  std::uint64_t hash;                // the sequence hash the bytes belong to
  std::uint64_t layout_fingerprint;  // DiskStorage::layout_fingerprint() of the writer
  std::uint64_t footer_checksum;  // XXH3-64 of the bytes above
};
static_assert(sizeof(SlotFooter) == DiskStorage::kFooterBytes);
constexpr std::size_t kFooterHashedBytes = offsetof(SlotFooter, footer_checksum);

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void put_le32(unsigned char* out, std::uint32_t v) noexcept {
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::string default_file_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "kvbm-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + ".slots";
}

io::IoError prefixed(io::IoError error, const std::string& prefix) {
  error.message = prefix + error.message;
  return error;
}

}  // namespace

Result<std::unique_ptr<DiskStorage>, io::IoError> DiskStorage::create(const DiskStorageOptions& options) {
  options.config.validate();
  KVBM_CHECK(options.num_blocks > 0, "DiskStorageOptions::num_blocks is 0; a disk pool needs at least one block");
  KVBM_CHECK(!options.directory.empty(),
             "DiskStorageOptions::directory is empty; name an existing directory on the disk to use");

  std::unique_ptr<DiskStorage> s(new DiskStorage());
  s->config_ = options.config;
  s->num_blocks_ = options.num_blocks;
  s->block_bytes_ = options.config.block_bytes();
  // The slot (block, footer, rounded up) must be a file offset itself, or the
  // rounding below wraps (to 0 for a block of 2^64 - 64 bytes).
  constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  KVBM_CHECK(s->block_bytes_ <= kMaxOffset - kFooterBytes - (kAlignment - 1),
             "DiskStorageOptions::config: a block of ", s->block_bytes_,
             " bytes leaves no room for a disk slot (block + ", kFooterBytes,
             "-byte footer, rounded up to ", kAlignment,
             ") in a file offset; use a smaller layout");
  s->slot_bytes_ = round_up(s->block_bytes_ + kFooterBytes, kAlignment);
  s->layout_fingerprint_ = layout_fingerprint(options.config);
  s->keep_file_ = options.keep_file;
  KVBM_CHECK(s->num_blocks_ <= kMaxOffset / s->slot_bytes_,
             "DiskStorageOptions: num_blocks x slot bytes (", s->num_blocks_, " x ", s->slot_bytes_,
             ") overflows a file offset; use fewer blocks");

  s->file_name_ = options.file_name.empty() ? default_file_name() : options.file_name;
  KVBM_CHECK(s->file_name_ != "." && s->file_name_ != ".." && s->file_name_.find('/') == std::string::npos &&
                 s->file_name_.find('\0') == std::string::npos,
             "DiskStorageOptions::file_name '", s->file_name_,
             "' must be a plain file name (no '/', not '.' or '..'); put the path in `directory`");
  s->path_ = options.directory / s->file_name_;
  const std::string dir = options.directory.string();

  // The directory: never through a symlink in its last component.
  {
    auto opened = io::open_file(AT_FDCWD, dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (!opened) {
      const int err = opened.error().code;
      std::error_code ec;
      const bool is_link = std::filesystem::is_symlink(options.directory, ec);
      KVBM_CHECK(err != ENOENT, "disk pool directory '", dir,
                 "' does not exist; create it (mkdir -p '", dir, "') or name an existing directory");
      KVBM_CHECK(err != ELOOP && !(err == ENOTDIR && is_link), "disk pool directory '", dir,
                 "' is a symlink; kvbm never follows symlinks: pass the real directory it points to");
      KVBM_CHECK(err != ENOTDIR, "disk pool directory '", dir, "' is not a directory; name a directory");
      return prefixed(std::move(opened).error(), "disk pool directory: ");
    }
    s->dir_ = std::move(opened).value();
  }

  // The file: created here and now, 0600; an existing file or symlink is refused.
  {
    auto created = io::open_file(s->dir_.get(), s->file_name_.c_str(),
                                 O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (!created) {
      auto error = std::move(created).error();
      if (error.code == EEXIST) {
        error.message = "disk pool file '" + s->path_.string() +
                        "' already exists (kvbm never opens, follows or replaces an existing file or symlink); "
                        "remove it or choose another file_name: " + error.message;
      }
      return error;
    }
    s->file_ = std::move(created).value();
  }

  // From here on a failure removes the file again.
  auto fail = [&](io::IoError error) -> io::IoError {
    if (io::syscalls().unlinkat(s->dir_.get(), s->file_name_.c_str(), 0) != 0) {
      const int err = errno;
      logger()->warn("could not remove '{}' after a failed creation: {}", s->path_.string(),
                     std::system_category().message(err));
    }
    s->file_ = io::File();  // the destructor has nothing left to remove
    return error;
  };

  if (options.direct_io != DirectIo::kOff) {
    const auto& sys = io::syscalls();
    const int flags = sys.fcntl(s->file_.get(), F_GETFL, 0);
    if (flags < 0) {
      const int err = errno;
      return fail(io::make_io_error(err, "fcntl(F_GETFL) on '" + s->path_.string() + "'"));
    }
    if (sys.fcntl(s->file_.get(), F_SETFL, flags | O_DIRECT) == 0) {
      s->direct_io_ = true;
    } else {
      const int err = errno;
      if (err != EINVAL || options.direct_io == DirectIo::kRequired) {
        return fail(io::make_io_error(
            err, "enabling O_DIRECT on '" + s->path_.string() + "'" +
                     (err == EINVAL ? " (the file system does not support it; use DirectIo::kPreferred or kOff)"
                                    : "")));
      }
      logger()->info("the file system of '{}' does not support O_DIRECT; the disk pool uses buffered I/O", dir);
    }
  }

  const auto bytes = static_cast<std::int64_t>(s->file_bytes());
  for (;;) {
    if (io::syscalls().fallocate(s->file_.get(), 0, 0, bytes) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EOPNOTSUPP || err == ENOSYS) {
      logger()->info("the file system of '{}' does not support fallocate; the disk pool file is sized with "
                     "ftruncate (space is not reserved)", dir);
      for (;;) {
        if (io::syscalls().ftruncate(s->file_.get(), bytes) == 0) break;
        const int terr = errno;
        if (terr == EINTR) continue;
        return fail(io::make_io_error(terr, "ftruncate of '" + s->path_.string() + "' to " + std::to_string(bytes) +
                                                " bytes"));
      }
      break;
    }
    return fail(io::make_io_error(
        err, "fallocate of " + std::to_string(bytes) + " bytes for '" + s->path_.string() + "'" +
                 (err == ENOSPC ? " (not enough free space in the directory; use fewer blocks or another disk)"
                                : "")));
  }
  return s;
}

DiskStorage::~DiskStorage() {
  try {
    if (!file_.valid()) return;
    if (keep_file_) {
      if (io::syscalls().fdatasync(file_.get()) != 0) {
        const int err = errno;
        logger()->warn("fdatasync of kept disk pool file '{}' failed: {}", path_.string(),
                       std::system_category().message(err));
      }
    } else if (io::syscalls().unlinkat(dir_.get(), file_name_.c_str(), 0) != 0) {
      const int err = errno;
      logger()->warn("could not remove disk pool file '{}': {}", path_.string(), std::system_category().message(err));
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws
  }
}

std::uint64_t DiskStorage::slot_offset(BlockId block) const {
  KVBM_CHECK(block < num_blocks_, "disk block ", block, " is out of range; the pool has ", num_blocks_, " blocks");
  return std::uint64_t{block} * slot_bytes_;
}

Layout DiskStorage::layout() const { return Layout::fully_contiguous(config_, num_blocks_, 0, slot_bytes_); }

std::uint64_t DiskStorage::checksum(std::span<const std::byte> data) noexcept {
  return XXH3_64bits(data.data(), data.size());
}

void DiskStorage::check_buffer(std::span<const std::byte> slot) const {
  KVBM_CHECK(slot.size() == slot_bytes_, "a slot buffer must hold slot_bytes() = ", slot_bytes_, " bytes, not ",
             slot.size());
  KVBM_CHECK(reinterpret_cast<std::uintptr_t>(slot.data()) % kAlignment == 0,
             "a slot buffer must be aligned to DiskStorage::kAlignment (", kAlignment, ") for O_DIRECT");
}

std::uint64_t DiskStorage::layout_fingerprint(const LayoutConfig& config) noexcept {
  // "kvbm-layout" then the five dimensions as u32 LE: the same on every host.
  unsigned char bytes[11 + 5 * 4] = {'k', 'v', 'b', 'm', '-', 'l', 'a', 'y', 'o', 'u', 't'};
  put_le32(bytes + 11, config.num_layers);
  put_le32(bytes + 15, config.outer_dim);
  put_le32(bytes + 19, config.page_size);
  put_le32(bytes + 23, config.inner_dim);
  put_le32(bytes + 27, config.dtype_bytes);
  return XXH3_64bits(bytes, sizeof(bytes));
}

io::IoStatus DiskStorage::write_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash) const {
  seal_slot(block, slot, hash);
  return pwrite_slot(block, slot);
}

io::IoStatus DiskStorage::read_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash) const {
  auto status = pread_slot(block, slot);
  if (!status) return status;
  return verify_slot(block, slot, hash);
}

void DiskStorage::seal_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash) const {
  check_buffer(slot);
  seal_tail(block, checksum(slot.first(block_bytes_)), slot.subspan(block_bytes_), hash);
}

void DiskStorage::seal_tail(BlockId block, std::uint64_t data_checksum, std::span<std::byte> tail,
                            std::uint64_t hash) const {
  (void)slot_offset(block);
  KVBM_CHECK(tail.size() == tail_bytes(), "a slot tail buffer must hold tail_bytes() = ", tail_bytes(),
             " bytes, not ", tail.size());
  const std::size_t footer_at = tail.size() - kFooterBytes;
  std::memset(tail.data(), 0, footer_at);
  SlotFooter footer{};
  footer.magic = kMagic;
  footer.version = kFormatVersion;
  footer.footer_bytes = kFooterBytes;
  footer.block_bytes = block_bytes_;
  footer.slot = block;
  footer.checksum = data_checksum;
  footer.hash = hash;
  footer.layout_fingerprint = layout_fingerprint_;
  footer.footer_checksum = XXH3_64bits(&footer, kFooterHashedBytes);
  std::memcpy(tail.data() + footer_at, &footer, sizeof footer);
}

std::uint64_t DiskStorage::checksum(std::span<const Region> regions) noexcept {
  if (regions.size() == 1) return XXH3_64bits(reinterpret_cast<const void*>(regions[0].addr), regions[0].size);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const Region& r : regions) XXH3_64bits_update(&state, reinterpret_cast<const void*>(r.addr), r.size);
  return XXH3_64bits_digest(&state);
}

bool DiskStorage::can_write_from(std::span<const Region> regions) const noexcept {
  if (regions.empty() || regions.size() > kMaxWriteRegions) return false;
  if (!direct_io_) return true;
  if (tail_bytes() % kAlignment != 0) return false;
  return std::all_of(regions.begin(), regions.end(),
                     [](const Region& r) { return r.addr % kAlignment == 0 && r.size % kAlignment == 0; });
}

io::IoStatus DiskStorage::pwrite_slot_from(BlockId block, std::span<const Region> regions,
                                           std::span<const std::byte> tail) const {
  const std::uint64_t offset = slot_offset(block);
  KVBM_CHECK(can_write_from(regions), "pwrite_slot_from: these regions cannot be written as they lie (too many, or "
             "not aligned to DiskStorage::kAlignment for O_DIRECT); check can_write_from() first");
  KVBM_CHECK(tail.size() == tail_bytes() && reinterpret_cast<std::uintptr_t>(tail.data()) % kAlignment == 0,
             "pwrite_slot_from: the tail buffer must hold tail_bytes() = ", tail_bytes(),
             " bytes aligned to DiskStorage::kAlignment");
  std::vector<iovec> iov;
  iov.reserve(regions.size() + 1);
  std::size_t total = 0;
  for (const Region& r : regions) {
    iov.push_back({reinterpret_cast<void*>(r.addr), r.size});
    total += r.size;
  }
  KVBM_CHECK(total == block_bytes_, "pwrite_slot_from: the regions hold ", total, " bytes, not block_bytes() = ",
             block_bytes_);
  iov.push_back({const_cast<std::byte*>(tail.data()), tail.size()});
  auto status = io::pwritev_full(file_.get(), iov.data(), static_cast<int>(iov.size()), static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) + " to '" + path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pwrite_slot(BlockId block, std::span<const std::byte> slot) const {
  const std::uint64_t offset = slot_offset(block);
  check_buffer(slot);
  auto status = io::pwrite_full(file_.get(), slot.data(), slot_bytes_, static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) + " to '" + path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pread_slot(BlockId block, std::span<std::byte> slot) const {
  const std::uint64_t offset = slot_offset(block);
  check_buffer(slot);
  auto status = io::pread_full(file_.get(), slot.data(), slot_bytes_, static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "read of disk block " + std::to_string(block) + " from '" + path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::verify_slot(BlockId block, std::span<const std::byte> slot, std::uint64_t hash) const {
  KVBM_CHECK(slot.size() == slot_bytes_, "a slot buffer must hold slot_bytes() = ", slot_bytes_, " bytes, not ",
             slot.size());
  SlotFooter footer;
  std::memcpy(&footer, slot.data() + slot_bytes_ - kFooterBytes, sizeof footer);
  auto bad = [&](const std::string& what) -> io::IoStatus {
    return io::IoError{EBADMSG, "disk block " + std::to_string(block) + " in '" + path_.string() + "': " + what};
  };
  if (footer.magic != kMagic) return bad("no slot footer (never written, or overwritten)");
  if (footer.footer_checksum != XXH3_64bits(&footer, kFooterHashedBytes)) return bad("slot footer is corrupt");
  if (footer.version != kFormatVersion) {
    return bad("slot format version " + std::to_string(footer.version) + ", expected " +
               std::to_string(kFormatVersion));
  }
  if (footer.footer_bytes != kFooterBytes || footer.block_bytes != block_bytes_) {
    return bad("slot holds " + std::to_string(footer.block_bytes) + " block bytes, expected " +
               std::to_string(block_bytes_));
  }
  if (footer.slot != block) return bad("slot holds the data of block " + std::to_string(footer.slot));
  if (footer.layout_fingerprint != layout_fingerprint_) {
    return bad("slot was written for another layout (fingerprint " + std::to_string(footer.layout_fingerprint) +
               ", expected " + std::to_string(layout_fingerprint_) + ")");
  }
  if (footer.hash != hash) {
    return bad("slot holds the bytes of sequence hash " + std::to_string(footer.hash) + ", not " +
               std::to_string(hash));
  }
  const std::uint64_t actual = checksum(slot.first(block_bytes_));
  if (actual != footer.checksum) {
    return bad("checksum mismatch (stored " + std::to_string(footer.checksum) + ", computed " +
               std::to_string(actual) + ")");
  }
  return {};
}

io::IoStatus DiskStorage::sync() const {
  if (io::syscalls().fdatasync(file_.get()) != 0) {
    const int err = errno;
    return io::make_io_error(err, "fdatasync of '" + path_.string() + "'");
  }
  return {};
}

}  // namespace kvbm
