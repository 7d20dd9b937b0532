// src/facade/tier_memory.cpp: allocating and laying out each tier (facade/tier_memory.h).

#include "facade/tier_memory.h"

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

std::unique_ptr<DiskStorage> create_disk(const KvBlockManagerConfig& c, std::size_t blocks) {
  DiskStorageOptions o;
  o.directory = c.disk_directory;
  o.config = c.layout;
  o.num_blocks = blocks;
  o.direct_io = c.disk_direct_io;
  o.persistent = c.disk_persistent;
  o.namespace_id = c.disk_namespace;
  auto r = [&] {
    try {
      return DiskStorage::create(o);
    } catch (const UsageError& e) {
      detail::config_error("disk_directory", e.what());
    }
  }();
  if (!r.ok()) {
    detail::config_error(
        "disk_directory",
        "cannot create the disk pool in '" + c.disk_directory.string() + "': " + r.error().message);
  }
  return std::move(r).value();
}

void build_disk(const KvBlockManagerConfig& c, const TierSpec& spec, TierMemory& out) {
  out.file = create_disk(c, spec.blocks);
  out.bounce = allocate(c, "bounce_blocks", c.bounce_blocks,
                        [](std::size_t bytes) { return make_pinned_storage(bytes); });
  out.bounce_layout.emplace(
      Layout::fully_contiguous(c.layout, c.bounce_blocks, out.bounce->base()));
}

}  // namespace

void build_memory(const KvBlockManagerConfig& c, const TierSpec& spec, TierMemory& out) {
  const LayoutKind kind = layout_kind(c, spec);
  if (!c.move_bytes) {
    if (spec.storage == StorageKind::kDevice) out.emulated = !cuda_device_available();
    if (spec.storage != StorageKind::kDisk) {
      out.layout.emplace(make_layout(c.layout, kind, spec.blocks, 0x1000));
    }
    return;
  }
  const std::string option = detail::tier_size_option(*spec.size, spec.option);
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
  }
  out.layout.emplace(make_layout(c.layout, kind, spec.blocks, out.memory->base()));
}

}  // namespace kvbm::facade
