// kvbm/disk/disk_recovery.h: what DiskStorage::recover() finds in a kept file.
//
// A persistent disk pool (DiskStorageOptions::persistent) keeps its file
// across restarts. recover() reads the header sector of every slot and
// returns the slots that hold a whole block of this storage's layout and
// namespace, as (slot, sequence hash), with a summary of what it discarded
// and why. The caller (the facade) registers the recovered slots in its G3
// pool as inactive blocks and hands every other slot to the free list.
//
// Plain values, no I/O: this header is what a caller of recover() reads.
// See docs/disk_tier.md for the format and the write order that make a
// recovered slot trustworthy.

#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/storage/layout.h"

namespace kvbm {

/// Why recovery did not accept a slot.
enum class SlotDiscard : std::uint8_t {
  kAbsent,  ///< no header: never written, invalidated before a rewrite, or torn before its header
  kHeaderChecksum,   ///< a header whose own checksum fails (bit rot, a torn or foreign sector)
  kFormatVersion,    ///< a whole header of another format version
  kGeometry,         ///< a header recording another block size
  kWrongSlot,        ///< a header recording another slot number (a misplaced or copied sector)
  kFingerprint,      ///< written for another layout or namespace
  kPayloadChecksum,  ///< the payload does not match the header's checksum (only with
                     ///< verify_payloads)
  kIoError,          ///< the header (or payload) could not be read
  kDuplicate,  ///< a second whole slot for a sequence hash already recovered from a lower slot
};

/// Number of SlotDiscard values (arrays indexed by a SlotDiscard are this long).
inline constexpr std::size_t kSlotDiscardReasons = 9;
static_assert(static_cast<std::size_t>(SlotDiscard::kDuplicate) + 1 == kSlotDiscardReasons,
              "a SlotDiscard was added or removed: update kSlotDiscardReasons and to_string()");

/// Returns the ErrorKind of a discarded slot read back (kCorrupt for a slot
/// that fails a check, kIo for a read error); none for kAbsent and
/// kDuplicate, which hold nothing wrong.
[[nodiscard]] std::optional<ErrorKind> error_kind_of(SlotDiscard reason) noexcept;

/// Returns the reason's name as the summary line prints it ("absent", "header_checksum", ...).
[[nodiscard]] std::string_view to_string(SlotDiscard reason) noexcept;

/// What DiskStorage::create() found at the file's path.
enum class DiskFileState : std::uint8_t {
  kCreated,   ///< no file: a new, empty one was created
  kReopened,  ///< a file of this layout, namespace and size: its slots may be recovered
  kResized,   ///< a file of this layout and namespace with another number of slots: resized, the
              ///< common slots kept
  kReset,  ///< a file of another format, layout, namespace or geometry: emptied, nothing recovered
};

/// Returns the state's name ("created", "reopened", "resized", "reset").
[[nodiscard]] std::string_view to_string(DiskFileState state) noexcept;

/// One recovered block: the slot (the G3 block id) and the sequence hash of its bytes.
struct RecoveredSlot {
  BlockId slot = 0;
  std::uint64_t hash = 0;
  friend bool operator==(const RecoveredSlot&, const RecoveredSlot&) = default;
};

/// What recover() did.
struct RecoverySummary {
  DiskFileState file = DiskFileState::kCreated;  ///< what create() found
  std::string reset_reason{};                    ///< why the file was reset (kReset only)
  std::uint64_t scanned = 0;                     ///< slots looked at: num_blocks()
  std::uint64_t recovered = 0;                   ///< slots returned
  /// Slots discarded, by SlotDiscard (every slot of a created or reset file is kAbsent).
  std::array<std::uint64_t, kSlotDiscardReasons> discarded{};
  /// kReset: why the whole file was refused (kHeaderChecksum: no valid
  /// superblock, kFormatVersion, kGeometry or kFingerprint) and how many
  /// slots its superblock recorded (0 when unreadable).
  SlotDiscard reset_discard = SlotDiscard::kAbsent;
  std::uint64_t reset_slots = 0;
  std::uint64_t bytes_read = 0;         ///< bytes read from the file
  std::chrono::nanoseconds elapsed{0};  ///< wall time of recover()

  /// Returns the slots discarded for `reason`.
  [[nodiscard]] std::uint64_t count(SlotDiscard reason) const noexcept {
    return discarded[static_cast<std::size_t>(reason)];
  }
  /// Returns the slots discarded for any reason: scanned - recovered.
  [[nodiscard]] std::uint64_t discarded_total() const noexcept;
  /// Returns the one-line summary recover() logs, e.g. "disk pool 'p': reopened;
  /// 100000 slots scanned, 99990 recovered, 10 discarded (absent 8, header_checksum 2)
  /// in 0.41 s (243902 slots/s, 410 MB read)".
  [[nodiscard]] std::string to_string() const;
};

/// The result of DiskStorage::recover().
struct Recovery {
  std::vector<RecoveredSlot> slots;  ///< ascending slot order; every hash appears once
  RecoverySummary summary;
};

/// How recover() reads.
struct RecoveryOptions {
  /// Reader threads (each with one buffer of up to kChunkBytes); 1 to 64.
  std::size_t threads = 8;
  /// Also read every payload whose header is whole and check its checksum
  /// (reads the whole file). Off: recovery reads headers only, and the
  /// payload is verified when it is read (every read verifies it).
  bool verify_payloads = false;
  /// Slots of at most this many bytes are read in runs of whole slots
  /// (one sequential read of up to kChunkBytes); larger ones by their
  /// header sector alone (one 4 KiB read each).
  std::size_t sequential_slot_limit = std::size_t{64} * 1024;
  /// Log the summary line at info level (off: at debug; a DiskPoolReader
  /// refreshing its index often).
  bool log_summary = true;
  /// Bytes of one sequential read.
  static constexpr std::size_t kChunkBytes = 4 << 20;
};

}  // namespace kvbm
