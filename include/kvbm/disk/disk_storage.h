// kvbm/disk/disk_storage.h: the bytes of a disk pool, one file of block slots.
//
// A DiskStorage owns one preallocated file in a directory the user names. The
// file holds num_blocks slots; block b lives in slot b at offset
// b x slot_bytes(). A slot is the block's bytes followed by zero padding and a
// 64-byte footer at the very end, rounded up to kAlignment (4096) so every
// slot starts and ends on an O_DIRECT boundary:
//
//   [ block bytes | zero padding | footer (64 B) ]   slot_bytes() = round_up(block_bytes + 64, 4096)
//
// The footer holds a magic, the format version, block_bytes, the slot number,
// the XXH3-64 of the block's bytes, the sequence hash the bytes belong to, the
// fingerprint of the layout they were written for (layout_fingerprint()) and
// an XXH3-64 of the footer itself, in host byte order (the file is a cache of
// this process, not an exchange format). write_slot() seals and writes a whole
// slot with one pwrite; read_slot() reads it with one pread and verifies the
// footer, the identity asked for and the checksum (engines call the steps
// separately: seal_slot, pwrite_slot, pread_slot, verify_slot), so a slot that
// was never written, was written for another slot, another block (sequence
// hash) or another layout, or was changed behind the library's back is
// reported, never returned.
//
// Creation is careful with the file system: the directory is opened with
// O_DIRECTORY | O_NOFOLLOW (a symlink there is refused) and the file is
// created inside it with openat(O_CREAT | O_EXCL | O_NOFOLLOW), mode 0600, so
// an existing file or symlink is never opened, followed or replaced. O_DIRECT
// is then switched on with fcntl(F_SETFL); where the file system refuses it
// (tmpfs: EINVAL) the storage falls back to buffered I/O and logs a note
// (DirectIo::kPreferred). The file is fallocate'd to its full size (ftruncate
// where fallocate is not supported) and removed, through the directory's
// descriptor, when the storage is destroyed unless keep_file is set.
// O_NOFOLLOW applies to the directory's last component only: symlinks in its
// parents are followed.
//
// Errors: a bad option, a directory that does not exist, is not a directory or
// is a symlink throw UsageError (fix the configuration); failures the caller
// cannot rule out beforehand (permission, an existing file, no space, EIO)
// come back as an IoError in the Result of create(). write_slot and read_slot
// return IoStatus; a corrupt slot is EBADMSG. All syscalls go through
// kvbm::io::syscalls().
//
// Lifetime: engines hold a reference to the storage; destroy them first.
// Thread-safety: all const members may be called concurrently, including
// write_slot and read_slot on different blocks. Reading a block while it is
// being written returns a checksum error or either version, never a mix that
// verifies.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "kvbm/error.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/storage/layout.h"

namespace kvbm {

/// Whether the disk pool uses O_DIRECT.
enum class DirectIo : std::uint8_t {
  kPreferred,  ///< O_DIRECT where the file system allows it, else buffered I/O (logged)
  kRequired,   ///< O_DIRECT or create() fails with EINVAL
  kOff,        ///< buffered I/O through the page cache
};

/// How to build a disk pool.
struct DiskStorageOptions {
  std::filesystem::path directory{};///< must exist; kvbm does not create it
  LayoutConfig config{};            ///< the dimensions of one block
  std::size_t num_blocks = 0;       ///< slots in the file
  std::string file_name{};          ///< empty: "kvbm-<pid>-<n>.slots"; must not exist yet
  DirectIo direct_io = DirectIo::kPreferred;
  bool keep_file = false;           ///< keep the file (after fdatasync) when the storage is destroyed
};

/// One preallocated file of checksummed block slots.
class DiskStorage {
 public:
  static constexpr std::size_t kAlignment = 4096;   ///< slot alignment and size granularity
  static constexpr std::size_t kFooterBytes = 64;   ///< bytes of the footer at the end of a slot
  static constexpr std::uint32_t kFormatVersion = 2;
  static constexpr std::size_t kMaxWriteRegions = 1023;  ///< IOV_MAX - 1 (the tail)

  /// Creates the file. Throws UsageError for bad options or a directory that
  /// is missing, not a directory or a symlink; returns an IoError when a
  /// syscall fails (nothing is left behind then).
  [[nodiscard]] static Result<std::unique_ptr<DiskStorage>, io::IoError> create(
      const DiskStorageOptions& options);

  /// Removes the file unless keep_file; failures are logged, never thrown.
  ~DiskStorage();
  DiskStorage(const DiskStorage&) = delete;
  DiskStorage& operator=(const DiskStorage&) = delete;

  [[nodiscard]] const LayoutConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t num_blocks() const noexcept { return num_blocks_; }
  /// Bytes of one block's data.
  [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
  /// Bytes of one slot: data, padding and footer; a multiple of kAlignment.
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Returns the file offset of a block's slot. Throws UsageError when out of range.
  [[nodiscard]] std::uint64_t slot_offset(BlockId block) const;
  /// Size of the file: num_blocks() x slot_bytes().
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return std::uint64_t{num_blocks_} * slot_bytes_; }
  /// Returns true when the file is open with O_DIRECT.
  [[nodiscard]] bool direct_io() const noexcept { return direct_io_; }
  /// Returns the file's path.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Returns the file's descriptor (for diagnostics and tests; do not close it).
  [[nodiscard]] int fd() const noexcept { return file_.get(); }
  /// Returns the pool as a fully contiguous layout whose addresses are file
  /// offsets (base 0, stride slot_bytes()).
  [[nodiscard]] Layout layout() const;

  /// Returns the fingerprint of a layout's dimensions that every slot records:
  /// XXH3-64 of a tag and the five LayoutConfig fields (u32 LE). Slots written
  /// for another layout fail verification.
  [[nodiscard]] static std::uint64_t layout_fingerprint(const LayoutConfig& config) noexcept;
  /// Returns the fingerprint of this storage's layout.
  [[nodiscard]] std::uint64_t layout_fingerprint() const noexcept { return layout_fingerprint_; }

  /// Returns the XXH3-64 checksum a slot stores for `data`.
  [[nodiscard]] static std::uint64_t checksum(std::span<const std::byte> data) noexcept;

  /// Seals and writes a slot: seal_slot() then pwrite_slot(). `slot` is a
  /// staging buffer of slot_bytes(), aligned to kAlignment, whose first
  /// block_bytes() hold the block's data; `hash` is the sequence hash value
  /// the bytes belong to (recorded in the footer). Throws UsageError on a bad
  /// block id or buffer.
  io::IoStatus write_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;
  /// Reads a slot into `slot` (slot_bytes(), aligned) and verifies it:
  /// pread_slot() then verify_slot(). On success the first block_bytes() hold
  /// the bytes of sequence hash `hash`; on failure the buffer's contents are
  /// unspecified. A bad footer, another hash or layout, or a checksum
  /// mismatch is EBADMSG.
  io::IoStatus read_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;

  /// Zeroes the slot's padding and writes its footer (with the checksum of
  /// the first block_bytes() and `hash`) into the buffer. No I/O.
  void seal_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;
  /// Writes a sealed slot buffer with one pwrite (retried on EINTR, continued
  /// when short).
  io::IoStatus pwrite_slot(BlockId block, std::span<const std::byte> slot) const;
  /// Reads a slot into the buffer without verifying it.
  io::IoStatus pread_slot(BlockId block, std::span<std::byte> slot) const;
  /// Bytes of a slot after the data: zero padding and the footer.
  [[nodiscard]] std::size_t tail_bytes() const noexcept { return slot_bytes_ - block_bytes_; }
  /// Returns the checksum of the regions' bytes in order: the same value as
  /// checksum() of them gathered. `regions` are host addresses.
  [[nodiscard]] static std::uint64_t checksum(std::span<const Region> regions) noexcept;
  /// Returns true when pwrite_slot_from() can write these host regions as
  /// they lie (no staging copy): at most kMaxWriteRegions of them and, with
  /// O_DIRECT, every address and size and tail_bytes() a multiple of
  /// kAlignment.
  [[nodiscard]] bool can_write_from(std::span<const Region> regions) const noexcept;
  /// Fills `tail` (tail_bytes(), aligned to kAlignment) with zero padding and
  /// the footer of a block whose data has checksum `data_checksum` and
  /// belongs to sequence hash `hash`. No I/O.
  void seal_tail(BlockId block, std::uint64_t data_checksum, std::span<std::byte> tail,
                 std::uint64_t hash = 0) const;
  /// Writes a slot straight from host `regions` (block_bytes() in total, in
  /// order) followed by a sealed `tail`, with one pwritev (retried on EINTR,
  /// continued when short). Throws UsageError unless can_write_from(regions).
  io::IoStatus pwrite_slot_from(BlockId block, std::span<const Region> regions, std::span<const std::byte> tail) const;
  /// Checks a slot in memory: footer (magic, version, sizes, slot number,
  /// footer checksum), that it was written for this layout and for sequence
  /// hash `hash`, and the data checksum. No I/O.
  io::IoStatus verify_slot(BlockId block, std::span<const std::byte> slot, std::uint64_t hash = 0) const;
  /// fdatasync()s the file.
  io::IoStatus sync() const;

 private:
  DiskStorage() = default;
  void check_buffer(std::span<const std::byte> slot) const;

  LayoutConfig config_{};
  std::size_t num_blocks_ = 0;
  std::size_t block_bytes_ = 0;
  std::size_t slot_bytes_ = 0;
  std::uint64_t layout_fingerprint_ = 0;
  bool direct_io_ = false;
  bool keep_file_ = false;
  std::filesystem::path path_;
  std::string file_name_;
  io::File dir_;
  io::File file_;
};

}  // namespace kvbm
