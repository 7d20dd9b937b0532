// Recovery of a kept disk pool file (kvbm/disk/disk_recovery.h).
//
// Reader threads take chunks of slots from a shared counter. Small slots are
// read whole, a run of them in one sequential pread (the disk streams, the
// header sectors come with it); large ones by their header sector alone, one
// 4 KiB pread each, `threads` in flight. Every header goes through
// check_header(), which trusts no byte of the file: a hostile file can only
// make slots be discarded. The work is bounded by num_blocks().

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "disk/disk_format.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/logging.h"

namespace kvbm {

std::optional<ErrorKind> error_kind_of(SlotDiscard reason) noexcept {
  switch (reason) {
    case SlotDiscard::kAbsent:
    case SlotDiscard::kDuplicate:
      return std::nullopt;
    case SlotDiscard::kIoError:
      return ErrorKind::kIo;
    case SlotDiscard::kHeaderChecksum:
    case SlotDiscard::kFormatVersion:
    case SlotDiscard::kGeometry:
    case SlotDiscard::kWrongSlot:
    case SlotDiscard::kFingerprint:
    case SlotDiscard::kPayloadChecksum:
      return ErrorKind::kCorrupt;
  }
  return ErrorKind::kInternal;
}

std::string_view to_string(SlotDiscard reason) noexcept {
  switch (reason) {
    case SlotDiscard::kAbsent:
      return "absent";
    case SlotDiscard::kHeaderChecksum:
      return "header_checksum";
    case SlotDiscard::kFormatVersion:
      return "format_version";
    case SlotDiscard::kGeometry:
      return "geometry";
    case SlotDiscard::kWrongSlot:
      return "wrong_slot";
    case SlotDiscard::kFingerprint:
      return "fingerprint";
    case SlotDiscard::kPayloadChecksum:
      return "payload_checksum";
    case SlotDiscard::kIoError:
      return "io_error";
    case SlotDiscard::kDuplicate:
      return "duplicate";
  }
  return "unknown";
}

std::string_view to_string(DiskFileState state) noexcept {
  switch (state) {
    case DiskFileState::kCreated:
      return "created";
    case DiskFileState::kReopened:
      return "reopened";
    case DiskFileState::kResized:
      return "resized";
    case DiskFileState::kReset:
      return "reset";
  }
  return "unknown";
}

std::uint64_t RecoverySummary::discarded_total() const noexcept {
  std::uint64_t n = 0;
  for (const auto d : discarded) n += d;
  return n;
}

std::string RecoverySummary::to_string() const {
  std::string out(kvbm::to_string(file));
  if (file == DiskFileState::kReset) {
    out += " (" + std::string(kvbm::to_string(reset_discard)) + ": " + reset_reason + ")";
  }
  out += "; " + std::to_string(scanned) + " slots scanned, " + std::to_string(recovered) +
         " recovered, " + std::to_string(discarded_total()) + " discarded";
  std::string reasons;
  for (std::size_t i = 0; i < kSlotDiscardReasons; ++i) {
    if (discarded[i] == 0) continue;
    if (!reasons.empty()) reasons += ", ";
    reasons += std::string(kvbm::to_string(static_cast<SlotDiscard>(i))) + " " +
               std::to_string(discarded[i]);
  }
  if (!reasons.empty()) out += " (" + reasons + ")";
  const double s = std::chrono::duration<double>(elapsed).count();
  char tail[128];
  std::snprintf(tail, sizeof tail, " in %.3f s (%.0f slots/s, %.1f MB read)", s,
                s > 0 ? static_cast<double>(scanned) / s : 0.0,
                static_cast<double>(bytes_read) / 1e6);
  return out + tail;
}

namespace {

struct FreeAligned {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};

constexpr std::uint8_t kOk = 0xFF;

/// How recovery reads the file: a run of whole slots per chunk, or header sectors alone.
struct ScanPlan {
  bool whole_slots = false;
  std::size_t per_chunk = 0;     // slots in a chunk
  std::size_t buffer_bytes = 0;  // one reader's buffer
  std::size_t chunks = 0;
  std::size_t threads = 0;  // readers, the calling thread included
};

ScanPlan plan_scan(const RecoveryOptions& options, std::size_t slot_bytes, std::size_t num_blocks) {
  ScanPlan p;
  p.whole_slots = options.verify_payloads || slot_bytes <= options.sequential_slot_limit;
  p.per_chunk =
      p.whole_slots ? std::max<std::size_t>(1, RecoveryOptions::kChunkBytes / slot_bytes) : 64;
  p.buffer_bytes = p.whole_slots ? p.per_chunk * slot_bytes : DiskStorage::kHeaderSectorBytes;
  p.chunks = (num_blocks + p.per_chunk - 1) / p.per_chunk;
  p.threads = std::min(options.threads, p.chunks);
  return p;
}

/// One scan of every slot's header (and payload, when verified): reader threads
/// take chunks from a shared counter and record each slot's status and hash.
class SlotScan {
 public:
  SlotScan(const DiskStorage& storage, const ScanPlan& plan, bool verify_payloads)
      : storage_(storage),
        plan_(plan),
        verify_payloads_(verify_payloads),
        status_(storage.num_blocks(), static_cast<std::uint8_t>(SlotDiscard::kIoError)),
        hashes_(storage.num_blocks(), 0) {
    for (std::size_t t = 0; t < plan_.threads; ++t) {
      void* p = std::aligned_alloc(DiskStorage::kAlignment, plan_.buffer_bytes);
      if (p == nullptr) throw std::bad_alloc();
      buffers_.emplace_back(static_cast<std::byte*>(p));
    }
  }

  /// Reads every chunk: the calling thread and up to plan.threads - 1 others (a detail::Worker).
  void run() {
    std::unique_ptr<detail::Worker> pool;
    if (plan_.threads > 1) {
      try {
        pool = std::make_unique<detail::Worker>("disk recovery", plan_.threads - 1);
        for (std::size_t t = 1; t < plan_.threads; ++t) (void)pool->post([this, t] { read(t); });
      } catch (const std::exception& e) {  // system_error or bad_alloc: no more threads
        logger()->info("disk pool recovery reads with {} threads, not {}: {}",
                       pool ? pool->threads() + 1 : 1, plan_.threads, e.what());
        // fewer readers; the chunks are shared, none is lost
      }
    }
    read(0);
    if (pool) pool->stop();
  }

  /// A slot's status: kOk, or the SlotDiscard that keeps it from being recovered.
  [[nodiscard]] std::uint8_t& status(BlockId slot) { return status_[slot]; }
  [[nodiscard]] std::uint64_t hash(BlockId slot) const { return hashes_[slot]; }
  [[nodiscard]] std::uint64_t bytes_read() const noexcept { return bytes_read_.load(); }

  /// Returns the first read error's message ('' when none), once.
  [[nodiscard]] std::string take_first_error() {
    std::string first;
    detail::LockGuard lock(mu_);  // the readers are joined; the lock costs nothing
    first.swap(first_error_);
    return first;
  }

 private:
  // One reader: takes chunks until none is left.
  void read(std::size_t index) noexcept {
    std::byte* buf = buffers_[index].get();
    for (;;) {
      const std::size_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= plan_.chunks) return;
      const std::size_t first = c * plan_.per_chunk;
      const std::size_t count = std::min(plan_.per_chunk, storage_.num_blocks() - first);
      if (plan_.whole_slots) {
        read_whole_slots(buf, first, count);
      } else {
        read_headers(buf, first, count);
      }
    }
  }

  // A run of whole slots in one pread.
  void read_whole_slots(std::byte* buf, std::size_t first, std::size_t count) noexcept {
    const std::size_t slot_bytes = storage_.slot_bytes();
    const std::size_t bytes = count * slot_bytes;
    const auto st =
        io::pread_full(storage_.fd(), buf, bytes, static_cast<std::int64_t>(first * slot_bytes));
    if (!st) {
      note_error(st);
      return;  // the chunk's slots stay kIoError
    }
    bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
    for (std::size_t i = 0; i < count; ++i) {
      const std::span<const std::byte> whole(buf + i * slot_bytes, slot_bytes);
      classify(static_cast<BlockId>(first + i), whole, whole.subspan(storage_.payload_bytes()));
    }
  }

  // The header sector of each slot, one pread each.
  void read_headers(std::byte* buf, std::size_t first, std::size_t count) noexcept {
    constexpr std::size_t kSector = DiskStorage::kHeaderSectorBytes;
    for (std::size_t i = 0; i < count; ++i) {
      const auto slot = static_cast<BlockId>(first + i);
      const std::uint64_t offset =
          std::uint64_t{slot} * storage_.slot_bytes() + storage_.payload_bytes();
      const auto st =
          io::pread_full(storage_.fd(), buf, kSector, static_cast<std::int64_t>(offset));
      if (!st) {
        note_error(st);
        continue;
      }
      bytes_read_.fetch_add(kSector, std::memory_order_relaxed);
      classify(slot, {}, std::span<const std::byte>(buf, kSector));
    }
  }

  void classify(BlockId slot, std::span<const std::byte> whole,
                std::span<const std::byte> sector) noexcept {
    const SlotHeaderCheck check = storage_.check_header(slot, sector);
    if (!check.ok) {
      status_[slot] = static_cast<std::uint8_t>(check.reason);
      return;
    }
    if (verify_payloads_ &&
        DiskStorage::checksum(whole.first(storage_.block_bytes())) != check.payload_checksum) {
      status_[slot] = static_cast<std::uint8_t>(SlotDiscard::kPayloadChecksum);
      return;
    }
    status_[slot] = kOk;
    hashes_[slot] = check.hash;
  }

  void note_error(const io::IoStatus& st) noexcept {
    try {
      detail::LockGuard lock(mu_);
      if (first_error_.empty()) first_error_ = st.message();
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
      // bad_alloc: the slots are counted as io_error anyway
    }
  }

  const DiskStorage& storage_;
  const ScanPlan plan_;
  const bool verify_payloads_;
  std::vector<std::uint8_t> status_;
  std::vector<std::uint64_t> hashes_;
  std::vector<std::unique_ptr<std::byte, FreeAligned>> buffers_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::uint64_t> bytes_read_{0};
  detail::Mutex mu_;
  std::string first_error_ KVBM_GUARDED_BY(mu_);
};

/// Logs the summary, and the first read error when there was one; never throws.
void log_recovery(const std::filesystem::path& path, const RecoverySummary& sum, SlotScan& scan,
                  bool log_summary) noexcept {
  try {
    logger()->log(log_summary ? spdlog::level::info : spdlog::level::debug, "disk pool '{}': {}",
                  path.string(), sum.to_string());
    const std::string first = scan.take_first_error();
    if (!first.empty())
      logger()->warn("disk pool '{}': recovery read errors; first: {}", path.string(), first);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): logging never fails recovery
  }
}

}  // namespace

Recovery DiskStorage::recover(const RecoveryOptions& options) const {
  KVBM_CHECK(options.threads >= 1 && options.threads <= 64, "RecoveryOptions::threads is ",
             options.threads, "; use 1 to 64");
  const auto start = std::chrono::steady_clock::now();
  SlotScan scan(*this, plan_scan(options, slot_bytes_, num_blocks_), options.verify_payloads);
  scan.run();

  Recovery out;
  RecoverySummary& sum = out.summary;
  sum.file = state_;
  sum.reset_reason = reset_reason_;
  sum.reset_discard = reset_discard_;
  sum.reset_slots = reset_slots_;
  sum.scanned = num_blocks_;
  sum.bytes_read = scan.bytes_read();
  std::unordered_set<std::uint64_t> seen;
  for (BlockId slot = 0; slot < num_blocks_; ++slot) {
    std::uint8_t& status = scan.status(slot);
    if (status == kOk && !seen.insert(scan.hash(slot)).second) {
      status = static_cast<std::uint8_t>(SlotDiscard::kDuplicate);
    }
    if (status == kOk) {
      out.slots.push_back({slot, scan.hash(slot)});
    } else {
      ++sum.discarded[status];
    }
    // A header that is not absent may be live on disk (or unknown: I/O
    // error): a rewrite invalidates it first.
    set_live(slot, status != static_cast<std::uint8_t>(SlotDiscard::kAbsent));
  }
  sum.recovered = out.slots.size();
  sum.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  log_recovery(path_, sum, scan, options.log_summary);
  return out;
}

}  // namespace kvbm
