// Reading another process's persistent disk pool (kvbm/disk/disk_pool_reader.h).

#include "kvbm/disk/disk_pool_reader.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <spdlog/spdlog.h>

#include "disk/disk_format.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm {
namespace {

DiskStorageOptions storage_options(const DiskPoolReaderOptions& o) {
  DiskStorageOptions s;
  s.directory = o.directory;
  s.config = o.config;
  s.file_name = o.file_name;
  s.namespace_id = o.namespace_id;
  s.persistent = true;
  return s;
}

}  // namespace

DiskPoolReader::DiskPoolReader(DiskPoolReaderOptions options) : options_(std::move(options)) {
  options_.config.validate();
  KVBM_CHECK(!options_.directory.empty(),
             "DiskPoolReaderOptions::directory is empty; name the directory of the pool to read");
  KVBM_CHECK(options_.namespace_id.size() <= DiskStorage::kMaxNamespaceBytes,
             "DiskPoolReaderOptions::namespace_id has ", options_.namespace_id.size(),
             " bytes; use at most ", DiskStorage::kMaxNamespaceBytes);
  block_bytes_ = options_.config.block_bytes();
}

DiskPoolReader::~DiskPoolReader() = default;

std::size_t DiskPoolReader::refresh() {
  auto opened = DiskStorage::open_read_only(storage_options(options_));
  if (!opened.ok()) {
    std::string why = opened.error().message;
    logger()->debug("disk pool reader: {}", why);
    detail::LockGuard lock(mu_);
    storage_.reset();
    slots_.clear();
    last_error_ = std::move(why);
    return 0;
  }
  std::shared_ptr<const DiskStorage> storage = std::move(opened).value();
  RecoveryOptions ro;
  ro.log_summary = false;
  const Recovery found = storage->recover(ro);
  std::unordered_map<std::uint64_t, BlockId> slots;
  slots.reserve(found.slots.size());
  for (const RecoveredSlot& r : found.slots) slots.emplace(r.hash, r.slot);
  detail::LockGuard lock(mu_);
  storage_ = std::move(storage);
  slots_ = std::move(slots);
  last_error_.clear();
  return slots_.size();
}

bool DiskPoolReader::contains(std::uint64_t hash) const {
  detail::LockGuard lock(mu_);
  return slots_.contains(hash);
}

std::size_t DiskPoolReader::size() const {
  detail::LockGuard lock(mu_);
  return slots_.size();
}

std::string DiskPoolReader::last_error() const {
  detail::LockGuard lock(mu_);
  return last_error_;
}

bool DiskPoolReader::read(std::uint64_t hash, std::span<std::byte> dst) {
  const std::span<std::byte> one[] = {dst};
  return read(hash, std::span<const std::span<std::byte>>(one));
}

bool DiskPoolReader::read(std::uint64_t hash, std::span<const std::span<std::byte>> segments) {
  std::size_t total = 0;
  for (const auto& s : segments) total += s.size();
  KVBM_CHECK(total == block_bytes_, "DiskPoolReader::read: the destination holds ", total,
             " bytes; a block is ", block_bytes_);
  std::shared_ptr<const DiskStorage> storage;
  BlockId slot = 0;
  {
    detail::LockGuard lock(mu_);
    const auto it = slots_.find(hash);
    if (it == slots_.end() || storage_ == nullptr) return false;
    storage = storage_;
    slot = it->second;
  }
  detail::AlignedBuffer buffer(storage->slot_bytes(), /*zero=*/false);  // read_slot fills it
  if (storage->read_slot(slot, buffer.span(), hash)) {
    const std::byte* from = buffer.p;
    for (const auto& s : segments) {
      std::memcpy(s.data(), from, s.size());
      from += s.size();
    }
    return true;
  }
  detail::LockGuard lock(mu_);
  if (storage_ == storage) {
    const auto it = slots_.find(hash);
    if (it != slots_.end() && it->second == slot) slots_.erase(it);
  }
  return false;
}

}  // namespace kvbm
