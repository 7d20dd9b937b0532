// kvbm/disk/disk_storage.h: the bytes of a disk pool, one file of block slots.
//
// A DiskStorage owns one preallocated file of num_blocks slots in a directory
// the user names; block b lives in slot b at offset b x slot_bytes(): its
// bytes, zero padding and a 4 KiB header sector (checksums, sequence hash,
// layout and namespace fingerprint). write_slot() seals and writes a slot;
// read_slot() verifies header, identity and checksum, so a slot never written,
// written for another slot, block, layout or namespace, or changed behind the
// library's back is reported, never returned. Scratch mode (default) creates a
// new file (O_EXCL) and removes it at destruction unless keep_file; persistent
// mode keeps it, locks the directory against other processes, writes in a
// crash-consistent order and recover()s whole blocks. docs/disk_tier.md has
// the format, the modes, how the file is opened, the write order and recovery.
//
// Errors: a bad option, or a directory that is missing (scratch mode), not a
// directory, a symlink, or (persistent) another user's or world-writable
// throws UsageError. What the caller cannot rule out beforehand (permission,
// an existing file in scratch mode, a locked directory, no space, EIO) is an
// IoError in create()'s Result. write_slot and read_slot return IoStatus; a
// corrupt slot is EBADMSG.
//
// Lifetime: engines hold a reference to the storage; destroy them first.
// Thread-safety: const members may run concurrently, write_slot and read_slot
// included, on different blocks; reading a block while it is written returns a
// checksum error or either version, never a mix that verifies. recover() must
// not run beside writes.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "kvbm/disk/disk_options.h"
#include "kvbm/disk/disk_recovery.h"
#include "kvbm/error.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/storage/layout.h"

namespace kvbm {

/// How to build a disk pool.
struct DiskStorageOptions {
  /// Scratch mode: must exist. Persistent mode: created 0700 when missing
  /// (its parent must exist); must belong to this user and not be world-writable.
  std::filesystem::path directory{};
  LayoutConfig config{};       ///< the dimensions of one block
  std::size_t num_blocks = 0;  ///< slots in the file
  /// Empty: "kvbm-<pid>-<n>.slots" (scratch; must not exist yet) or
  /// "kvbm.slots" (persistent). A plain name, no '/'.
  std::string file_name{};
  DirectIo direct_io = DirectIo::kPreferred;
  bool keep_file = false;  ///< scratch mode: keep the file (after fdatasync) at destruction
  /// Keep the file across restarts and crashes: open it when it exists,
  /// never remove it, write in the crash-consistent order; see recover().
  bool persistent = false;
  /// Part of the fingerprint every slot records, beside the layout: name the
  /// model and its revision (for example "llama-3-8b@a1b2c3"), so that a file
  /// written for other weights of the same shape is never served. At most
  /// kMaxNamespaceBytes bytes.
  std::string namespace_id{};
};

/// The outcome of checking one header sector (DiskStorage::check_header).
struct SlotHeaderCheck {
  bool ok = false;                            ///< every check passed
  SlotDiscard reason = SlotDiscard::kAbsent;  ///< why not, when !ok
  std::uint64_t hash = 0;                     ///< the recorded sequence hash (when ok)
  std::uint64_t payload_checksum = 0;         ///< the recorded payload checksum (when ok)
};

/// One preallocated file of self-describing, checksummed block slots.
class DiskStorage {
 public:
  static constexpr std::size_t kAlignment = 4096;  ///< slot alignment and size granularity
  /// Bytes of the header sector at the end of every slot.
  static constexpr std::size_t kHeaderSectorBytes = kAlignment;
  /// Bytes after a block's data that a slot reserves: round_up(block + this,
  /// kAlignment) = slot_bytes(). (The header sector; the name predates it.)
  static constexpr std::size_t kFooterBytes = kHeaderSectorBytes;
  /// Bytes of the header record, at the end of the header sector.
  static constexpr std::size_t kHeaderBytes = 64;
  /// Bytes of the superblock after the last slot.
  static constexpr std::size_t kSuperblockBytes = kAlignment;
  static constexpr std::uint32_t kFormatVersion = 3;
  static constexpr std::size_t kMaxWriteRegions = 1023;  ///< IOV_MAX - 1 (the tail)
  static constexpr std::size_t kMaxNamespaceBytes = 1024;

  /// Creates (scratch) or opens or creates (persistent) the file. Throws
  /// UsageError for bad options or a directory that is missing (scratch), not
  /// a directory, a symlink, or (persistent) not this user's or
  /// world-writable; returns an IoError when a syscall fails (a new file is
  /// removed again then), and EBUSY, naming the holder's pid, when another
  /// storage holds the persistent directory's lock.
  [[nodiscard]] static Result<std::unique_ptr<DiskStorage>, io::IoError> create(
      const DiskStorageOptions& options);
  /// create() with options.persistent set.
  [[nodiscard]] static Result<std::unique_ptr<DiskStorage>, io::IoError> open(
      DiskStorageOptions options);
  /// Opens another process's persistent pool file to read it: no lock, no
  /// creation, no reset or resize, buffered reads. num_blocks comes from the
  /// file's superblock (options.num_blocks is ignored; persistent and
  /// direct_io too). Returns ENOENT when the directory or file does not exist
  /// (yet), EBADMSG when the file is not a pool of this format, geometry,
  /// layout and namespace; throws UsageError as create() does. read_slot()
  /// and recover() work as on the owner's storage (every read verifies the
  /// header, the hash asked for and the checksum, so a slot the owner is
  /// rewriting is reported, never returned); the write members throw
  /// UsageError. DiskPoolReader builds on this.
  [[nodiscard]] static Result<std::unique_ptr<DiskStorage>, io::IoError> open_read_only(
      const DiskStorageOptions& options);

  /// Removes the file unless keep_file or persistent (then fdatasync()s it);
  /// failures are logged, never thrown. Releases the directory's lock.
  ~DiskStorage();
  DiskStorage(const DiskStorage&) = delete;
  DiskStorage& operator=(const DiskStorage&) = delete;

  [[nodiscard]] const LayoutConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t num_blocks() const noexcept { return num_blocks_; }
  /// Bytes of one block's data.
  [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
  /// Bytes of one slot: data, padding and header sector; a multiple of kAlignment.
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Bytes of a slot before its header sector: data and padding.
  [[nodiscard]] std::size_t payload_bytes() const noexcept {
    return slot_bytes_ - kHeaderSectorBytes;
  }
  /// Returns the file offset of a block's slot. Throws UsageError when out of range.
  [[nodiscard]] std::uint64_t slot_offset(BlockId block) const;
  /// Returns the file offset of a block's header sector. Throws UsageError when out of range.
  [[nodiscard]] std::uint64_t header_offset(BlockId block) const {
    return slot_offset(block) + payload_bytes();
  }
  /// Size of the file: num_blocks() x slot_bytes() and the superblock.
  [[nodiscard]] std::uint64_t file_bytes() const noexcept {
    return std::uint64_t{num_blocks_} * slot_bytes_ + kSuperblockBytes;
  }
  /// Returns true when the file is open with O_DIRECT.
  [[nodiscard]] bool direct_io() const noexcept { return direct_io_; }
  /// Returns true in persistent mode.
  [[nodiscard]] bool persistent() const noexcept { return persistent_; }
  /// Returns true when opened with open_read_only().
  [[nodiscard]] bool read_only() const noexcept { return read_only_; }
  /// Returns what create() found at the path (always kCreated in scratch mode).
  [[nodiscard]] DiskFileState state() const noexcept { return state_; }
  /// Returns the file's path.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Returns the file's descriptor (for diagnostics and tests; do not close it).
  [[nodiscard]] int fd() const noexcept { return file_.get(); }
  /// Returns the pool as a fully contiguous layout whose addresses are file
  /// offsets (base 0, stride slot_bytes()).
  [[nodiscard]] Layout layout() const;

  /// Returns the fingerprint every slot records: XXH3-64 of a tag, the five
  /// LayoutConfig fields (u32 LE: layers, outer, tokens per block, inner,
  /// dtype bytes) and, when not empty, the namespace's length (u32 LE) and
  /// bytes. Slots written for another layout or namespace fail verification.
  [[nodiscard]] static std::uint64_t layout_fingerprint(
      const LayoutConfig& config, std::string_view namespace_id = {}) noexcept;
  /// Returns the fingerprint of this storage's layout and namespace.
  [[nodiscard]] std::uint64_t layout_fingerprint() const noexcept { return layout_fingerprint_; }
  /// Returns options.namespace_id.
  [[nodiscard]] const std::string& namespace_id() const noexcept { return namespace_id_; }

  /// Returns the XXH3-64 checksum a slot stores for `data`.
  [[nodiscard]] static std::uint64_t checksum(std::span<const std::byte> data) noexcept;

  /// Reads the header sector of every slot (and, with verify_payloads, the
  /// payloads) and returns the slots that hold a whole block of this layout
  /// and namespace, each sequence hash once (the lowest slot; later ones are
  /// kDuplicate), with a summary, which it also logs in one line. Never
  /// throws for what the file holds: a hostile or corrupt file only makes it
  /// discard slots. I/O errors discard the slots they hit (kIoError).
  /// Postcondition: slots not returned may be overwritten by any write.
  /// Precondition: no write to this storage is in flight.
  /// Throws UsageError for bad options.
  [[nodiscard]] Recovery recover(const RecoveryOptions& options = {}) const;
  /// Checks one header sector (kHeaderSectorBytes) as recovery does: magic,
  /// header checksum, version, block size, slot number, fingerprint. No I/O;
  /// any bytes are safe to pass.
  [[nodiscard]] SlotHeaderCheck check_header(BlockId slot,
                                             std::span<const std::byte> sector) const noexcept;

  /// Seals and writes a slot. `slot` is a staging buffer of slot_bytes(),
  /// aligned to kAlignment, whose first block_bytes() hold the block's data;
  /// `hash` is the sequence hash value the bytes belong to (recorded in the
  /// header). Scratch: seal_slot() then pwrite_slot(). Persistent: the
  /// durable order (invalidate a live header, fdatasync, payload, fdatasync,
  /// header, fdatasync). Throws UsageError on a bad block id or buffer.
  io::IoStatus write_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;
  /// Reads a slot into `slot` (slot_bytes(), aligned) and verifies it:
  /// pread_slot() then verify_slot(). On success the first block_bytes() hold
  /// the bytes of sequence hash `hash`; on failure the buffer's contents are
  /// unspecified. A bad header, another hash, layout or namespace, or a
  /// checksum mismatch is EBADMSG.
  io::IoStatus read_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;

  /// Zeroes the slot's padding and writes its header sector (with the
  /// checksum of the first block_bytes() and `hash`) into the buffer. No I/O.
  void seal_slot(BlockId block, std::span<std::byte> slot, std::uint64_t hash = 0) const;
  /// Writes a sealed slot buffer with one pwrite (retried on EINTR, continued
  /// when short). Scratch-mode order: the header goes with the data.
  io::IoStatus pwrite_slot(BlockId block, std::span<const std::byte> slot) const;
  /// Reads a slot into the buffer without verifying it.
  io::IoStatus pread_slot(BlockId block, std::span<std::byte> slot) const;
  /// Bytes of a slot after the data: zero padding and the header sector.
  [[nodiscard]] std::size_t tail_bytes() const noexcept { return slot_bytes_ - block_bytes_; }
  /// Returns the checksum of the regions' bytes in order: the same value as
  /// checksum() of them gathered. `regions` are host addresses.
  [[nodiscard]] static std::uint64_t checksum(std::span<const Region> regions) noexcept;
  /// Returns true when pwrite_slot_from() and pwrite_payload_from() can write
  /// these host regions as they lie (no staging copy): at most
  /// kMaxWriteRegions of them and, with O_DIRECT, every address and size and
  /// tail_bytes() a multiple of kAlignment.
  [[nodiscard]] bool can_write_from(std::span<const Region> regions) const noexcept;
  /// Fills `tail` (tail_bytes(), aligned to kAlignment) with zero padding and
  /// the header sector of a block whose data has checksum `data_checksum` and
  /// belongs to sequence hash `hash`. No I/O.
  void seal_tail(BlockId block, std::uint64_t data_checksum, std::span<std::byte> tail,
                 std::uint64_t hash = 0) const;
  /// Fills `sector` (kHeaderSectorBytes) with the header sector of a block
  /// whose data has checksum `data_checksum` and belongs to `hash`. No I/O.
  void seal_header(BlockId block, std::uint64_t data_checksum, std::span<std::byte> sector,
                   std::uint64_t hash = 0) const;
  /// Writes a slot straight from host `regions` (block_bytes() in total, in
  /// order) followed by a sealed `tail`, with one pwritev (retried on EINTR,
  /// continued when short). Throws UsageError unless can_write_from(regions).
  io::IoStatus pwrite_slot_from(BlockId block, std::span<const Region> regions,
                                std::span<const std::byte> tail) const;
  /// Checks a slot in memory: header (magic, version, sizes, slot number,
  /// header checksum), that it was written for this layout and namespace and
  /// for sequence hash `hash`, and the data checksum. No I/O.
  io::IoStatus verify_slot(BlockId block, std::span<const std::byte> slot,
                           std::uint64_t hash = 0) const;
  /// fdatasync()s the file.
  io::IoStatus sync() const;

  // ---- the persistent write order, step by step (the disk write engine) ----

  /// Returns true when the slot's header on disk may be live (recovered, not
  /// yet recovered, or written): it must be invalidated, durably, before the
  /// payload is overwritten.
  [[nodiscard]] bool header_may_be_live(BlockId block) const noexcept;
  /// Writes a zero header sector over the slot's header (no sync). Call
  /// note_invalidated() once an fdatasync after it succeeded.
  io::IoStatus invalidate_header(BlockId block) const;
  /// Records that the slot's header is durably invalid.
  void note_invalidated(BlockId block) const noexcept;
  /// Records that the slot's header may be on disk from now on: what
  /// pwrite_header() does first, for an engine that writes the sector itself.
  void note_header_live(BlockId block) const noexcept;
  /// Writes the slot's payload (data and padding, payload_bytes()) from the
  /// first payload_bytes() of a staged slot buffer. No header, no sync.
  io::IoStatus pwrite_payload(BlockId block, std::span<const std::byte> slot) const;
  /// Writes the slot's payload straight from host `regions` followed by the
  /// first tail_bytes() - kHeaderSectorBytes bytes of a sealed `tail` (the
  /// padding). Throws UsageError unless can_write_from(regions).
  io::IoStatus pwrite_payload_from(BlockId block, std::span<const Region> regions,
                                   std::span<const std::byte> tail) const;
  /// Writes a sealed header sector (kHeaderSectorBytes, aligned). Marks the
  /// header live first (whatever the outcome). Call after the payload is durable.
  io::IoStatus pwrite_header(BlockId block, std::span<const std::byte> sector) const;

 private:
  DiskStorage() = default;
  static std::unique_ptr<DiskStorage> with_geometry(const DiskStorageOptions& options);
  io::IoStatus open_directory(const DiskStorageOptions& options);
  void check_buffer(std::span<const std::byte> slot) const;
  void check_writable() const;
  /// Reads and checks the superblock; `why` is empty when the file is a pool of
  /// this format, geometry, layout and namespace (then `slots` is its slot count).
  io::IoStatus read_superblock(SlotDiscard& reason, std::string& why, std::uint64_t& slots) const;
  io::IoStatus write_superblock() const;
  io::IoStatus allocate(std::uint64_t bytes) const;
  io::IoStatus take_lock();
  io::IoStatus adopt_existing();
  io::IoStatus reset_file(SlotDiscard reason, std::string why, std::uint64_t old_slots);
  void set_live(BlockId block, bool live) const noexcept;
  void set_all_live(std::size_t below) const noexcept;

  LayoutConfig config_{};
  std::size_t num_blocks_ = 0;
  std::size_t block_bytes_ = 0;
  std::size_t slot_bytes_ = 0;
  std::uint64_t layout_fingerprint_ = 0;
  std::string namespace_id_;
  bool direct_io_ = false;
  bool keep_file_ = false;
  bool persistent_ = false;
  bool read_only_ = false;
  DiskFileState state_ = DiskFileState::kCreated;
  SlotDiscard reset_discard_ = SlotDiscard::kAbsent;  // how a reset file counts its slots
  std::string reset_reason_;
  std::uint64_t reset_slots_ = 0;  // slots the reset file recorded (0 when unreadable)
  /// One bit per slot: set while the header on disk may be live (persistent
  /// writes invalidate it first).
  std::unique_ptr<std::atomic<std::uint64_t>[]> live_;
  std::filesystem::path path_;
  std::string file_name_;
  io::File dir_;
  io::File lock_;
  io::File file_;
};

}  // namespace kvbm
