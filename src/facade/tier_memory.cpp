// src/facade/tier_memory.cpp: allocating and laying out each tier (facade/tier_memory.h).

#include "facade/tier_memory.h"

#include <cerrno>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "facade/config.h"
#include "kvbm/error.h"

namespace kvbm::facade {
namespace {

// The per-(layer, outer) bases of a layer-separated layout over one allocation.
Layout make_layout(const LayoutConfig& lc, LayoutKind kind, std::size_t blocks,
                   std::uintptr_t base) {
  if (kind == LayoutKind::kFullyContiguous) return Layout::fully_contiguous(lc, blocks, base);
  std::vector<std::uintptr_t> bases(lc.regions_per_block());
  const std::size_t per_base = blocks * lc.region_bytes();
  for (std::size_t i = 0; i < bases.size(); ++i) bases[i] = base + i * per_base;
  return Layout::layer_separated(lc, blocks, std::move(bases));
}

LayoutKind layout_kind(const KvBlockManagerConfig& c, const TierSpec& spec) {
  return spec.storage == StorageKind::kDevice ? c.device_layout : LayoutKind::kFullyContiguous;
}

// check_config() bounded every product below; what the machine cannot
// allocate is named by its option too.
template <class Make>
std::unique_ptr<Storage> allocate(const KvBlockManagerConfig& c, const std::string& option,
                                  std::size_t blocks, Make make) {
  const std::size_t bb = c.layout.block_bytes();
  try {
    return make(blocks * bb);
  } catch (const std::bad_alloc&) {
    detail::config_error(option, "cannot allocate " + std::to_string(blocks * bb) + " bytes (" +
                                     std::to_string(blocks) + " blocks of " + std::to_string(bb) +
                                     " bytes); use fewer blocks");
  }
}

// Whether a failure to create the disk pool is the configuration's (a path
// or permission the user must fix: UsageError) rather than the machine's (a
// full or failing disk: RuntimeError). A file system without room, or a file
// size limit (ulimit -f), is never the configuration's: it is valid, and
// succeeds once there is room.
bool is_config_errno(int code) noexcept {
  switch (code) {
    case EACCES:        // no permission on the directory or file
    case EPERM:         // likewise (an immutable file, a mount option)
    case EROFS:         // a read-only file system
    case ENOENT:        // the directory does not exist
    case ENOTDIR:       // a path component is no directory
    case EISDIR:        // the file name is a directory
    case ELOOP:         // a symlink, which kvbm never follows
    case EEXIST:        // the scratch file already exists
    case EBUSY:         // the persistent directory is in use by another process
    case EINVAL:        // O_DIRECT required where the file system has none
    case ENAMETOOLONG:  // the path is too long
      return true;
    default:
      return false;
  }
}

// Throws RuntimeError for a disk pool the machine could not create.
[[noreturn]] void throw_disk_runtime_error(const TierSpec& spec, const io::IoError& e) {
  const ErrorKind kind = error_kind_of_errno(e.code);
  const std::string directory = spec.names.own + "directory";
  std::string what = "KvBlockManager: cannot create the G3 disk pool (" +
                     std::to_string(spec.blocks) + " blocks) in '" + spec.disk->directory.string() +
                     "': " + e.message;
  if (kind == ErrorKind::kNoSpace) {
    what +=
        "; the configuration is valid but the file system has no room for the pool (or a file "
        "size limit, ulimit -f, forbids it): free space there, give the disk tier fewer blocks "
        "(KvBlockManagerConfig." +
        spec.names.size + "), or name a " + directory + " on a larger disk";
  } else {
    what +=
        "; the disk or the system failed, not the configuration: check the device, or name "
        "another " +
        directory;
  }
  throw RuntimeError(kind, e.code, what);
}

std::unique_ptr<DiskStorage> create_disk(const KvBlockManagerConfig& c, const TierSpec& spec) {
  const DiskTierOptions& d = *spec.disk;
  const std::string directory = spec.names.own + "directory";
  DiskStorageOptions o;
  o.directory = d.directory;
  o.config = c.layout;
  o.num_blocks = spec.blocks;
  o.direct_io = d.direct_io;
  o.persistent = d.persistent;
  o.namespace_id = d.name_space;
  auto r = [&] {
    try {
      return DiskStorage::create(o);
    } catch (const UsageError& e) {
      detail::config_error(directory, e.what());
    }
  }();
  if (!r.ok()) {
    const io::IoError& e = r.error();
    if (!is_config_errno(e.code)) throw_disk_runtime_error(spec, e);
    detail::config_error(
        directory, "cannot create the disk pool in '" + d.directory.string() + "': " + e.message);
  }
  return std::move(r).value();
}

void build_disk(const KvBlockManagerConfig& c, const TierSpec& spec, TierMemory& out) {
  out.file = create_disk(c, spec);
  out.bounce = allocate(c, "bounce_blocks", c.bounce_blocks,
                        [](std::size_t bytes) { return make_pinned_storage(bytes); });
  out.bounce_layout.emplace(
      Layout::fully_contiguous(c.layout, c.bounce_blocks, out.bounce->base()));
}

}  // namespace

void build_memory(const KvBlockManagerConfig& c, const TierSpec& spec, TierMemory& out) {
  if (spec.storage == StorageKind::kRemote) return;  // the store is the remote tier's own
  const LayoutKind kind = layout_kind(c, spec);
  if (!c.move_bytes) {
    if (spec.storage == StorageKind::kDevice) out.emulated = !cuda_device_available();
    if (spec.storage != StorageKind::kDisk) {
      out.layout.emplace(make_layout(c.layout, kind, spec.blocks, 0x1000));
    }
    return;
  }
  const std::string option = detail::tier_size_option(*spec.size, spec.names.size);
  switch (spec.storage) {
    case StorageKind::kDevice:
      out.memory = allocate(c, option, spec.blocks, [&](std::size_t bytes) {
        try {
          return make_device_storage(bytes, c.cuda_device);
        } catch (const UsageError& e) {  // no such device
          detail::config_error("cuda_device", e.what());
        }
      });
      out.emulated = out.memory->emulated();
      break;
    case StorageKind::kPinnedHost:
      out.memory = allocate(c, option, spec.blocks,
                            [](std::size_t bytes) { return make_pinned_storage(bytes); });
      break;
    case StorageKind::kDisk:
      build_disk(c, spec, out);
      return;
    case StorageKind::kRemote:
      return;
  }
  out.layout.emplace(make_layout(c.layout, kind, spec.blocks, out.memory->base()));
}

}  // namespace kvbm::facade
