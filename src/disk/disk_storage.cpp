#include "kvbm/disk/disk_storage.h"

#include <fcntl.h>
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

#include <spdlog/spdlog.h>

#include "disk/disk_format.h"
#include "io/bulk_xxh3.h"
#include "kvbm/logging.h"

namespace kvbm {
namespace {

void put_le32(unsigned char* out, std::uint32_t v) noexcept {
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

io::IoError prefixed(io::IoError error, const std::string& prefix) {
  error.message = prefix + error.message;
  return error;
}

}  // namespace

std::uint64_t DiskStorage::slot_offset(BlockId block) const {
  KVBM_CHECK(block < num_blocks_, "disk block ", block, " is out of range; the pool has ",
             num_blocks_, " blocks");
  return std::uint64_t{block} * slot_bytes_;
}

Layout DiskStorage::layout() const {
  return Layout::fully_contiguous(config_, num_blocks_, 0, slot_bytes_);
}

std::uint64_t DiskStorage::checksum(std::span<const std::byte> data) noexcept {
  return io::bulk_xxh3(data);
}

void DiskStorage::check_writable() const {
  KVBM_CHECK(!read_only_, "disk pool '", path_.string(),
             "' was opened read-only (DiskStorage::open_read_only): only its owner writes it");
}

void DiskStorage::check_buffer(std::span<const std::byte> slot) const {
  KVBM_CHECK(slot.size() == slot_bytes_, "a slot buffer must hold slot_bytes() = ", slot_bytes_,
             " bytes, not ", slot.size());
  KVBM_CHECK(reinterpret_cast<std::uintptr_t>(slot.data()) % kAlignment == 0,
             "a slot buffer must be aligned to DiskStorage::kAlignment (", kAlignment,
             ") for O_DIRECT");
}

std::uint64_t DiskStorage::layout_fingerprint(const LayoutConfig& config,
                                              std::string_view namespace_id) noexcept {
  // "kvbm-layout" then the five dimensions as u32 LE: the same on every host.
  // A namespace follows as its length (u32 LE) and bytes; none leaves the
  // layout's fingerprint as it was before namespaces existed.
  unsigned char bytes[11 + 6 * 4] = {'k', 'v', 'b', 'm', '-', 'l', 'a', 'y', 'o', 'u', 't'};
  put_le32(bytes + 11, config.num_layers);
  put_le32(bytes + 15, config.outer_dim);
  put_le32(bytes + 19, config.page_size);
  put_le32(bytes + 23, config.inner_dim);
  put_le32(bytes + 27, config.dtype_bytes);
  if (namespace_id.empty()) return XXH3_64bits(bytes, 31);
  put_le32(bytes + 31, static_cast<std::uint32_t>(namespace_id.size()));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, bytes, sizeof bytes);
  XXH3_64bits_update(&state, namespace_id.data(), namespace_id.size());
  return XXH3_64bits_digest(&state);
}

io::IoStatus DiskStorage::write_slot(BlockId block, std::span<std::byte> slot,
                                     std::uint64_t hash) const {
  check_writable();
  seal_slot(block, slot, hash);
  if (!persistent_) return pwrite_slot(block, slot);
  // The persistent order (docs/disk_tier.md): the header becomes durable only
  // after the payload it describes, and a live header is durably gone before
  // the payload under it changes.
  if (header_may_be_live(block)) {
    if (auto st = invalidate_header(block); !st) return st;
    if (auto st = sync(); !st) return st;
    note_invalidated(block);
  }
  if (auto st = pwrite_payload(block, slot); !st) return st;
  if (auto st = sync(); !st) return st;
  if (auto st = pwrite_header(block, slot.subspan(payload_bytes())); !st) return st;
  return sync();
}

io::IoStatus DiskStorage::read_slot(BlockId block, std::span<std::byte> slot,
                                    std::uint64_t hash) const {
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
  KVBM_CHECK(tail.size() == tail_bytes(),
             "a slot tail buffer must hold tail_bytes() = ", tail_bytes(), " bytes, not ",
             tail.size());
  const std::size_t header_at = tail.size() - kHeaderSectorBytes;
  std::memset(tail.data(), 0, header_at);
  seal_header(block, data_checksum, tail.subspan(header_at), hash);
}

void DiskStorage::seal_header(BlockId block, std::uint64_t data_checksum,
                              std::span<std::byte> sector, std::uint64_t hash) const {
  (void)slot_offset(block);
  KVBM_CHECK(sector.size() == kHeaderSectorBytes, "a header sector buffer must hold ",
             kHeaderSectorBytes, " bytes, not ", sector.size());
  std::memset(sector.data(), 0, kHeaderSectorBytes - kHeaderBytes);
  detail::SlotHeader h{};
  h.magic = detail::kSlotMagic;
  h.version = kFormatVersion;
  h.header_bytes = kHeaderBytes;
  h.block_bytes = block_bytes_;
  h.slot = block;
  h.checksum = data_checksum;
  h.hash = hash;
  h.fingerprint = layout_fingerprint_;
  h.header_checksum = XXH3_64bits(&h, detail::kHeaderHashedBytes);
  std::memcpy(sector.data() + kHeaderSectorBytes - kHeaderBytes, &h, sizeof h);
}

std::uint64_t DiskStorage::checksum(std::span<const Region> regions) noexcept {
  if (regions.size() == 1) {
    return io::bulk_xxh3({reinterpret_cast<const std::byte*>(regions[0].addr), regions[0].size});
  }
  io::BulkXxh3 h;
  for (const Region& r : regions) h.update(reinterpret_cast<const void*>(r.addr), r.size);
  return h.digest();
}

bool DiskStorage::can_write_from(std::span<const Region> regions) const noexcept {
  if (regions.empty() || regions.size() > kMaxWriteRegions) return false;
  if (!direct_io_) return true;
  if (tail_bytes() % kAlignment != 0) return false;
  return std::all_of(regions.begin(), regions.end(), [](const Region& r) {
    return r.addr % kAlignment == 0 && r.size % kAlignment == 0;
  });
}

namespace {

/// Writes `regions` then `tail` with one pwritev at `offset`.
io::IoStatus pwritev_regions(int fd, std::span<const Region> regions,
                             std::span<const std::byte> tail, std::uint64_t offset,
                             std::size_t block_bytes) {
  std::vector<iovec> iov;
  iov.reserve(regions.size() + 1);
  std::size_t total = 0;
  for (const Region& r : regions) {
    iov.push_back({reinterpret_cast<void*>(r.addr), r.size});
    total += r.size;
  }
  KVBM_CHECK(total == block_bytes, "pwrite_slot_from: the regions hold ", total,
             " bytes, not block_bytes() = ", block_bytes);
  if (!tail.empty()) iov.push_back({const_cast<std::byte*>(tail.data()), tail.size()});
  return io::pwritev_full(fd, iov.data(), static_cast<int>(iov.size()),
                          static_cast<std::int64_t>(offset));
}

}  // namespace

io::IoStatus DiskStorage::pwrite_slot_from(BlockId block, std::span<const Region> regions,
                                           std::span<const std::byte> tail) const {
  check_writable();
  const std::uint64_t offset = slot_offset(block);
  KVBM_CHECK(can_write_from(regions),
             "pwrite_slot_from: these regions cannot be written as they lie (too many, or "
             "not aligned to DiskStorage::kAlignment for O_DIRECT); check can_write_from() first");
  KVBM_CHECK(tail.size() == tail_bytes() &&
                 reinterpret_cast<std::uintptr_t>(tail.data()) % kAlignment == 0,
             "pwrite_slot_from: the tail buffer must hold tail_bytes() = ", tail_bytes(),
             " bytes aligned to DiskStorage::kAlignment");
  auto status = pwritev_regions(file_.get(), regions, tail, offset, block_bytes_);
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) + " to '" +
                                        path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pwrite_payload_from(BlockId block, std::span<const Region> regions,
                                              std::span<const std::byte> tail) const {
  check_writable();
  const std::uint64_t offset = slot_offset(block);
  KVBM_CHECK(
      can_write_from(regions),
      "pwrite_payload_from: these regions cannot be written as they lie (too many, "
      "or not aligned to DiskStorage::kAlignment for O_DIRECT); check can_write_from() first");
  KVBM_CHECK(tail.size() == tail_bytes() &&
                 reinterpret_cast<std::uintptr_t>(tail.data()) % kAlignment == 0,
             "pwrite_payload_from: the tail buffer must hold tail_bytes() = ", tail_bytes(),
             " bytes aligned to DiskStorage::kAlignment");
  auto status = pwritev_regions(file_.get(), regions, tail.first(tail_bytes() - kHeaderSectorBytes),
                                offset, block_bytes_);
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) +
                                        "'s payload to '" + path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pwrite_payload(BlockId block, std::span<const std::byte> slot) const {
  check_writable();
  const std::uint64_t offset = slot_offset(block);
  check_buffer(slot);
  auto status =
      io::pwrite_full(file_.get(), slot.data(), payload_bytes(), static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) +
                                        "'s payload to '" + path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pwrite_header(BlockId block, std::span<const std::byte> sector) const {
  check_writable();
  const std::uint64_t offset = header_offset(block);
  KVBM_CHECK(sector.size() == kHeaderSectorBytes &&
                 reinterpret_cast<std::uintptr_t>(sector.data()) % kAlignment == 0,
             "pwrite_header: the sector buffer must hold ", kHeaderSectorBytes,
             " bytes aligned to DiskStorage::kAlignment");
  set_live(block, true);  // from here on the header may be on disk, whatever the outcome
  auto status = io::pwrite_full(file_.get(), sector.data(), kHeaderSectorBytes,
                                static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) +
                                        "'s header to '" + path_.string() + "': ");
  }
  return {};
}

namespace {

/// One aligned zero sector, for invalidate_header().
const std::byte* zero_sector() {
  alignas(
      DiskStorage::kAlignment) static const std::byte kZeros[DiskStorage::kHeaderSectorBytes] = {};
  return kZeros;
}

}  // namespace

io::IoStatus DiskStorage::invalidate_header(BlockId block) const {
  check_writable();
  const std::uint64_t offset = header_offset(block);
  auto status = io::pwrite_full(file_.get(), zero_sector(), kHeaderSectorBytes,
                                static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "invalidation of disk block " + std::to_string(block) +
                                        "'s header in '" + path_.string() + "': ");
  }
  return {};
}

void DiskStorage::note_invalidated(BlockId block) const noexcept { set_live(block, false); }

void DiskStorage::note_header_live(BlockId block) const noexcept { set_live(block, true); }

bool DiskStorage::header_may_be_live(BlockId block) const noexcept {
  if (block >= num_blocks_) return false;
  return (live_[block / 64].load(std::memory_order_acquire) >> (block % 64) & 1U) != 0;
}

void DiskStorage::set_live(BlockId block, bool live) const noexcept {
  if (block >= num_blocks_) return;
  const std::uint64_t bit = std::uint64_t{1} << (block % 64);
  if (live) {
    live_[block / 64].fetch_or(bit, std::memory_order_acq_rel);
  } else {
    live_[block / 64].fetch_and(~bit, std::memory_order_acq_rel);
  }
}

void DiskStorage::set_all_live(std::size_t below) const noexcept {
  const std::size_t words = (num_blocks_ + 63) / 64;
  for (std::size_t w = 0; w < words; ++w) {
    const std::size_t first = w * 64;
    std::uint64_t v = 0;
    if (below >= first + 64) {
      v = ~std::uint64_t{0};
    } else if (below > first) {
      v = (std::uint64_t{1} << (below - first)) - 1;
    }
    live_[w].store(v, std::memory_order_release);
  }
}

io::IoStatus DiskStorage::pwrite_slot(BlockId block, std::span<const std::byte> slot) const {
  check_writable();
  const std::uint64_t offset = slot_offset(block);
  check_buffer(slot);
  auto status =
      io::pwrite_full(file_.get(), slot.data(), slot_bytes_, static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "write of disk block " + std::to_string(block) + " to '" +
                                        path_.string() + "': ");
  }
  return {};
}

io::IoStatus DiskStorage::pread_slot(BlockId block, std::span<std::byte> slot) const {
  const std::uint64_t offset = slot_offset(block);
  check_buffer(slot);
  auto status =
      io::pread_full(file_.get(), slot.data(), slot_bytes_, static_cast<std::int64_t>(offset));
  if (!status) {
    return prefixed(status.error(), "read of disk block " + std::to_string(block) + " from '" +
                                        path_.string() + "': ");
  }
  return {};
}

SlotHeaderCheck DiskStorage::check_header(BlockId slot,
                                          std::span<const std::byte> sector) const noexcept {
  SlotHeaderCheck out;
  if (sector.size() < kHeaderBytes) return out;  // kAbsent
  const detail::SlotHeader h = detail::load_header(sector);
  if (h.magic != detail::kSlotMagic) {
    out.reason = SlotDiscard::kAbsent;
  } else if (h.header_checksum != XXH3_64bits(&h, detail::kHeaderHashedBytes)) {
    out.reason = SlotDiscard::kHeaderChecksum;
  } else if (h.version != kFormatVersion) {
    out.reason = SlotDiscard::kFormatVersion;
  } else if (h.header_bytes != kHeaderBytes || h.block_bytes != block_bytes_) {
    out.reason = SlotDiscard::kGeometry;
  } else if (h.slot != slot) {
    out.reason = SlotDiscard::kWrongSlot;
  } else if (h.fingerprint != layout_fingerprint_) {
    out.reason = SlotDiscard::kFingerprint;
  } else {
    out.ok = true;
    out.hash = h.hash;
    out.payload_checksum = h.checksum;
  }
  return out;
}

io::IoStatus DiskStorage::verify_slot(BlockId block, std::span<const std::byte> slot,
                                      std::uint64_t hash) const {
  KVBM_CHECK(slot.size() == slot_bytes_, "a slot buffer must hold slot_bytes() = ", slot_bytes_,
             " bytes, not ", slot.size());
  const auto sector = slot.subspan(payload_bytes());
  const SlotHeaderCheck check = check_header(block, sector);
  auto bad = [&](const std::string& what) -> io::IoStatus {
    return io::IoError{
        EBADMSG, "disk block " + std::to_string(block) + " in '" + path_.string() + "': " + what};
  };
  if (!check.ok) {
    const detail::SlotHeader h = detail::load_header(sector);
    switch (check.reason) {
      case SlotDiscard::kAbsent:
        return bad("no slot header (never written, invalidated, or overwritten)");
      case SlotDiscard::kHeaderChecksum:
        return bad("slot header is corrupt");
      case SlotDiscard::kFormatVersion:
        return bad("slot format version " + std::to_string(h.version) + ", expected " +
                   std::to_string(kFormatVersion));
      case SlotDiscard::kGeometry:
        return bad("slot holds " + std::to_string(h.block_bytes) + " block bytes, expected " +
                   std::to_string(block_bytes_));
      case SlotDiscard::kWrongSlot:
        return bad("slot holds the data of block " + std::to_string(h.slot));
      case SlotDiscard::kFingerprint:
        return bad("slot was written for another layout or namespace (fingerprint " +
                   std::to_string(h.fingerprint) + ", expected " +
                   std::to_string(layout_fingerprint_) + ")");
      default:
        return bad("slot header refused");
    }
  }
  if (check.hash != hash) {
    return bad("slot holds the bytes of sequence hash " + std::to_string(check.hash) + ", not " +
               std::to_string(hash));
  }
  const std::uint64_t actual = checksum(slot.first(block_bytes_));
  if (actual != check.payload_checksum) {
    return bad("checksum mismatch (stored " + std::to_string(check.payload_checksum) +
               ", computed " + std::to_string(actual) + ")");
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
