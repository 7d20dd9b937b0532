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
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "disk/disk_format.h"
#include "kvbm/detail/mutex.h"
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

}  // namespace

Recovery DiskStorage::recover(const RecoveryOptions& options) const {
  KVBM_CHECK(options.threads >= 1 && options.threads <= 64, "RecoveryOptions::threads is ",
             options.threads, "; use 1 to 64");
  const auto start = std::chrono::steady_clock::now();
  const bool whole_slots = options.verify_payloads || slot_bytes_ <= options.sequential_slot_limit;
  const std::size_t per_chunk =
      whole_slots ? std::max<std::size_t>(1, RecoveryOptions::kChunkBytes / slot_bytes_) : 64;
  const std::size_t buffer_bytes = whole_slots ? per_chunk * slot_bytes_ : kHeaderSectorBytes;
  const std::size_t chunks = (num_blocks_ + per_chunk - 1) / per_chunk;
  const std::size_t threads = std::min(options.threads, chunks);

  std::vector<std::uint8_t> status(num_blocks_, static_cast<std::uint8_t>(SlotDiscard::kIoError));
  std::vector<std::uint64_t> hashes(num_blocks_, 0);
  std::vector<std::unique_ptr<std::byte, FreeAligned>> buffers;
  for (std::size_t t = 0; t < threads; ++t) {
    void* p = std::aligned_alloc(kAlignment, buffer_bytes);
    if (p == nullptr) throw std::bad_alloc();
    buffers.emplace_back(static_cast<std::byte*>(p));
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> bytes_read{0};
  struct FirstError {
    detail::Mutex mu;
    std::string text KVBM_GUARDED_BY(mu);
  } first_error;

  auto note_error = [&](const io::IoStatus& st) noexcept {
    try {
      detail::LockGuard lock(first_error.mu);
      if (first_error.text.empty()) first_error.text = st.message();
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
      // bad_alloc: the slots are counted as io_error anyway
    }
  };
  auto classify = [&](BlockId slot, std::span<const std::byte> whole,
                      std::span<const std::byte> sector) noexcept {
    const SlotHeaderCheck check = check_header(slot, sector);
    if (!check.ok) {
      status[slot] = static_cast<std::uint8_t>(check.reason);
      return;
    }
    if (options.verify_payloads && checksum(whole.first(block_bytes_)) != check.payload_checksum) {
      status[slot] = static_cast<std::uint8_t>(SlotDiscard::kPayloadChecksum);
      return;
    }
    status[slot] = kOk;
    hashes[slot] = check.hash;
  };
  auto reader = [&](std::size_t index) noexcept {
    std::byte* buf = buffers[index].get();
    for (;;) {
      const std::size_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      const std::size_t first = c * per_chunk;
      const std::size_t count = std::min(per_chunk, num_blocks_ - first);
      if (whole_slots) {
        const std::size_t bytes = count * slot_bytes_;
        const auto st =
            io::pread_full(file_.get(), buf, bytes, static_cast<std::int64_t>(first * slot_bytes_));
        if (!st) {
          note_error(st);
          continue;  // the chunk's slots stay kIoError
        }
        bytes_read.fetch_add(bytes, std::memory_order_relaxed);
        for (std::size_t i = 0; i < count; ++i) {
          const std::span<const std::byte> whole(buf + i * slot_bytes_, slot_bytes_);
          classify(static_cast<BlockId>(first + i), whole, whole.subspan(payload_bytes()));
        }
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          const auto slot = static_cast<BlockId>(first + i);
          const auto st = io::pread_full(
              file_.get(), buf, kHeaderSectorBytes,
              static_cast<std::int64_t>(std::uint64_t{slot} * slot_bytes_ + payload_bytes()));
          if (!st) {
            note_error(st);
            continue;
          }
          bytes_read.fetch_add(kHeaderSectorBytes, std::memory_order_relaxed);
          classify(slot, {}, std::span<const std::byte>(buf, kHeaderSectorBytes));
        }
      }
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (std::size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(reader, t);
    } catch (const std::exception& e) {  // system_error or bad_alloc: no more threads
      logger()->info("disk pool recovery reads with {} threads, not {}: {}", t, threads, e.what());
      break;  // fewer readers; the chunks are shared, none is lost
    }
  }
  reader(0);
  for (auto& t : pool) t.join();

  Recovery out;
  RecoverySummary& sum = out.summary;
  sum.file = state_;
  sum.reset_reason = reset_reason_;
  sum.reset_discard = reset_discard_;
  sum.reset_slots = reset_slots_;
  sum.scanned = num_blocks_;
  sum.bytes_read = bytes_read.load();
  std::unordered_set<std::uint64_t> seen;
  for (BlockId slot = 0; slot < num_blocks_; ++slot) {
    if (status[slot] == kOk && !seen.insert(hashes[slot]).second) {
      status[slot] = static_cast<std::uint8_t>(SlotDiscard::kDuplicate);
    }
    if (status[slot] == kOk) {
      out.slots.push_back({slot, hashes[slot]});
    } else {
      ++sum.discarded[status[slot]];
    }
    // A header that is not absent may be live on disk (or unknown: I/O
    // error): a rewrite invalidates it first.
    set_live(slot, status[slot] != static_cast<std::uint8_t>(SlotDiscard::kAbsent));
  }
  sum.recovered = out.slots.size();
  sum.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  try {
    logger()->log(options.log_summary ? spdlog::level::info : spdlog::level::debug,
                  "disk pool '{}': {}", path_.string(), sum.to_string());
    std::string first;
    {
      detail::LockGuard lock(first_error.mu);  // the readers are joined; the lock costs nothing
      first.swap(first_error.text);
    }
    if (!first.empty())
      logger()->warn("disk pool '{}': recovery read errors; first: {}", path_.string(), first);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): logging never fails recovery
  }
  return out;
}

}  // namespace kvbm
