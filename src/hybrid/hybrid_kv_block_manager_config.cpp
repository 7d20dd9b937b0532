// Each group's KvBlockManagerConfig (kvbm/hybrid/hybrid_kv_block_manager_config.h).

#include "kvbm/hybrid/hybrid_kv_block_manager_config.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "facade/config.h"
#include "kvbm/error.h"

namespace kvbm {

namespace {

[[noreturn]] void hybrid_error(const std::string& option, const std::string& what) {
  detail::throw_usage_error(__FILE__, __LINE__,
                            detail::concat("HybridKvBlockManagerConfig.", option, ": ", what));
}

// The base config with its named tier fields unset: the tiers travel as entries.
KvBlockManagerConfig without_named_tiers(const KvBlockManagerConfig& base) {
  const KvBlockManagerConfig d;
  KvBlockManagerConfig c = base;
  c.device = d.device;
  c.host = d.host;
  c.disk = d.disk;
  c.disk_directory.clear();
  c.disk_persistent = false;
  c.host_to_disk_pipeline.reset();
  c.remote = d.remote;
  c.device_listeners.clear();
  c.host_listeners.clear();
  c.disk_listeners.clear();
  c.remote_listeners.clear();
  c.tiers.clear();
  c.metrics_registry = nullptr;  // each group's manager makes its own
  return c;
}

// The bytes of a pooled tier entry: its bytes, or its blocks of the base layout.
std::size_t tier_bytes(const TierEntry& e, const LayoutConfig& base_layout, std::size_t i) {
  if (e.size.bytes != 0) return e.size.bytes;
  if (e.size.blocks == 0) return 0;
  try {
    base_layout.validate();
  } catch (const UsageError&) {
    hybrid_error("base.tiers[" + std::to_string(i) + "].size.blocks",
                 "a size in blocks needs base.layout to convert it into bytes; give "
                 "size.bytes, or set base.layout");
  }
  return e.size.blocks * base_layout.block_bytes();
}

// Every group's blocks in each pooled tier: the explicit count, else the split.
std::vector<TierArray<std::size_t>> split_blocks(const HybridKvBlockManagerConfig& c,
                                                 const std::vector<TierEntry>& entries,
                                                 const std::vector<LayoutConfig>& layouts) {
  const std::size_t groups = c.groups.size();
  std::size_t row_bytes = 0;  // one block of every group
  for (const auto& l : layouts) row_bytes += l.block_bytes();
  std::vector<TierArray<std::size_t>> out(groups);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TierEntry& e = entries[i];
    if (e.id == TierId::kG4) continue;
    const std::size_t split = tier_bytes(e, c.base.layout, i) / row_bytes;
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t given = c.group_blocks.empty() ? 0 : c.group_blocks[g][e.id];
      out[g][e.id] = given != 0 ? given : split;
      if (out[g][e.id] == 0) {
        hybrid_error("base tier " + std::string(to_string(e.id)),
                     "holds no block of group " + std::to_string(g) +
                         " (one block of every group "
                         "takes " +
                         std::to_string(row_bytes) +
                         " bytes); give it more bytes or "
                         "set group_blocks");
      }
    }
  }
  return out;
}

// G3 of group `spec`: its own directory and namespace.
void place_disk(DiskTierOptions& d, const KvCacheGroupSpec& spec) {
  d.name_space = spec.namespace_for(d.name_space);
  std::error_code ec;
  // A missing base directory is left to the facade's check, which names it.
  if (d.directory.empty() || !std::filesystem::is_directory(d.directory, ec)) return;
  d.directory /= "group-" + std::to_string(to_index(spec.id)) + "-" + spec.kind_label();
  std::filesystem::create_directory(d.directory, ec);
  if (ec) {
    hybrid_error("base disk directory", "cannot make " + d.directory.string() + ": " +
                                            ec.message() +
                                            "; give an existing, writable directory");
  }
}

}  // namespace

LayoutConfig group_layout(const KvCacheGroupSpec& group) {
  const KvLayout& k = group.layout;
  const std::uint32_t b = group.tokens_per_block;
  if (!group.layers.empty() && k.num_kv_heads > 0 && k.head_size > 0 &&
      (k.head_size_v == 0 || k.head_size_v == k.head_size) &&
      (k.dtype_bytes == 1 || k.dtype_bytes == 2 || k.dtype_bytes == 4 || k.dtype_bytes == 8)) {
    LayoutConfig l{.num_layers = static_cast<std::uint32_t>(group.layers.size()),
                   .outer_dim = k.mla ? 1u : 2u,
                   .page_size = b,
                   .inner_dim = k.num_kv_heads * k.head_size,
                   .dtype_bytes = k.dtype_bytes};
    if (l.block_bytes() == group.bytes_per_block) return l;
  }
  const std::uint64_t per_token = (group.bytes_per_block + b - 1) / b;
  KVBM_CHECK(per_token <= UINT32_MAX, "group_layout: group ", to_index(group.id), " has ",
             group.bytes_per_block, " bytes per block; at most ", UINT32_MAX, " per token");
  return LayoutConfig{.num_layers = 1,
                      .outer_dim = 1,
                      .page_size = b,
                      .inner_dim = static_cast<std::uint32_t>(per_token),
                      .dtype_bytes = 1};
}

std::vector<KvBlockManagerConfig> group_configs(const HybridKvBlockManagerConfig& c) {
  validate_groups(c.groups);
  if (!c.group_blocks.empty() && c.group_blocks.size() != c.groups.size()) {
    hybrid_error("group_blocks", "has " + std::to_string(c.group_blocks.size()) + " rows for " +
                                     std::to_string(c.groups.size()) +
                                     " groups; give one per group, or none");
  }
  const std::vector<TierEntry> entries =
      c.base.tiers.empty() ? detail::tier_entries_from_fields(c.base) : c.base.tiers;
  std::vector<LayoutConfig> layouts;
  for (const auto& g : c.groups) layouts.push_back(group_layout(g));
  const auto blocks = split_blocks(c, entries, layouts);
  const KvBlockManagerConfig shared = without_named_tiers(c.base);
  std::vector<KvBlockManagerConfig> out;
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    KvBlockManagerConfig gc = shared;
    gc.layout = layouts[g];
    gc.tiers = entries;
    for (TierEntry& e : gc.tiers) {
      if (e.id != TierId::kG4) e.size = TierConfig{blocks[g][e.id], 0, e.size.eviction};
      if (e.disk) place_disk(*e.disk, c.groups[g]);
      if (e.remote) e.remote->user_namespace = c.groups[g].namespace_for(e.remote->user_namespace);
      if (c.events && e.id != TierId::kG4) {
        e.listeners.push_back(c.events->listener(events::tier_medium(e.id), c.groups[g]));
      }
    }
    out.push_back(std::move(gc));
  }
  return out;
}

}  // namespace kvbm
