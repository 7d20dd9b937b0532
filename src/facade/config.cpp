// src/facade/config.cpp: the names of the offload modes and the checks of
// KvBlockManagerConfig (facade/config.h).

#include "facade/config.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "facade/tiers.h"
#include "kvbm/disk/disk_engine.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/transfer/host_engine.h"

namespace kvbm::detail {
namespace {

/// The most bytes one allocation or file of the manager may span: a file
/// offset (and, for memory, far beyond any machine).
constexpr std::uint64_t kMaxSpanBytes = std::numeric_limits<std::int64_t>::max();
/// The largest block whose disk slot (block, footer, rounded up) stays a file offset.
constexpr std::uint64_t kMaxBlockBytes =
    kMaxSpanBytes - DiskStorage::kFooterBytes - (DiskStorage::kAlignment - 1);

/// The `pool`, `pipeline` and `path` label values of the series a manager
/// may add, read from the tier table: each tier's pool, the copies down into
/// it from the tier above (write-through, explicit, on eviction) and up from
/// it into G1.
std::vector<std::string> series_names(const KvBlockManagerConfig& c) {
  const facade::TierSpecs specs = facade::describe_tiers(c, {1, 1, 1});
  std::vector<std::string> out;
  for (const TierId t : kTierIds) {
    const std::string name(to_string(t));
    out.push_back(name);
    if (t == TierId::kG1) continue;
    const std::string down = copy_path_name(specs[t].above, t);
    out.insert(out.end(), {down, down + "_explicit", down + "_on_eviction"});
    if (specs[t].storage != facade::StorageKind::kRemote) {
      out.push_back(copy_path_name(t, TierId::kG1));
    }
  }
  return out;
}
/// The families only a KvBlockManager adds (unlabelled by pool: one manager per registry).
constexpr std::array<std::string_view, 2> kManagerFamilies = {"kvbm_onboard_blocks_total",
                                                              "kvbm_onboard_cancelled_total"};

std::string blocks_of(std::size_t n, std::size_t block_bytes) {
  return std::to_string(n) + (n == 1 ? " block" : " blocks") + " of " +
         std::to_string(block_bytes) + " bytes";
}

// Resolves a tier's block count from blocks or bytes, and checks what the
// tier spans (blocks x block bytes).
std::size_t tier_blocks(const TierConfig& t, std::string_view name, std::size_t block_bytes,
                        bool required) {
  const std::string tier(name);
  if (t.blocks != 0 && t.bytes != 0) {
    config_error(tier, "set blocks or bytes, not both (blocks " + std::to_string(t.blocks) +
                           ", bytes " + std::to_string(t.bytes) + ")");
  }
  const std::string option = tier_size_option(t, name);
  std::size_t n = t.blocks;
  if (t.bytes != 0) {
    n = t.bytes / block_bytes;
    if (n == 0) {
      config_error(option, std::to_string(t.bytes) + " bytes hold no block of " +
                               std::to_string(block_bytes) +
                               " bytes; give at least one block's worth");
    }
  }
  if (required && n == 0) config_error(option, "must be at least 1");
  if (n > kMaxBlockCount) {
    config_error(option, (t.bytes != 0 ? std::to_string(t.bytes) + " bytes make " : "") +
                             std::to_string(n) + " blocks, more than the maximum of " +
                             std::to_string(kMaxBlockCount) + " blocks per pool; use fewer");
  }
  std::size_t span = 0;
  if (__builtin_mul_overflow(n, block_bytes, &span) || span > kMaxSpanBytes) {
    config_error(option, blocks_of(n, block_bytes) + " overflow what one pool may span (" +
                             std::to_string(kMaxSpanBytes) +
                             " bytes); use fewer blocks or a smaller layout");
  }
  return n;
}

void check_eviction(EvictionPolicy p, std::string_view tier) {
  if (to_string(p) == "unknown") {
    config_error(std::string(tier) + ".eviction",
                 "unknown EvictionPolicy " + std::to_string(static_cast<int>(p)) +
                     "; use kLru (lru), kMultiLevelLru (multi_level_lru) or kLineage (lineage)");
  }
}

void check_mode(OffloadMode m, std::string_view option) {
  if (to_string(m) == "unknown") {
    config_error(option, "unknown OffloadMode " + std::to_string(static_cast<int>(m)) +
                             "; use kNone (none), kWriteThrough (write_through) or kOnEviction "
                             "(on_eviction)");
  }
}

void check_min_frequency(const OffloadPolicyConfig& p, std::string_view policy) {
  if (p.min_frequency > FrequencyTracker::kMaxCount) {
    config_error(std::string(policy) + ".min_frequency",
                 std::to_string(p.min_frequency) + " is more than " +
                     std::to_string(FrequencyTracker::kMaxCount) +
                     " (the tracker's counters saturate there); use 0 to " +
                     std::to_string(FrequencyTracker::kMaxCount));
  }
}

void check_pipeline(const PipelineConfig& p, std::string_view option) {
  try {
    p.validate();
  } catch (const UsageError& e) {
    config_error(option, e.what());
  }
}

// A registry may hold one manager's series: refuse one that already holds
// a series this manager would add (another manager's, or a pool, pipeline
// or engine of the same name).
void check_registry(const KvBlockManagerConfig& c, const prometheus::Registry& registry) {
  const std::vector<std::string> names = series_names(c);
  for (const auto& family : registry.Collect()) {
    if (family.metric.empty()) continue;
    if (std::find(kManagerFamilies.begin(), kManagerFamilies.end(), family.name) !=
        kManagerFamilies.end()) {
      config_error("metrics_registry",
                   "the registry already holds " + family.name +
                       ", the series of another KvBlockManager; give each manager its own "
                       "registry, or destroy the other manager first");
    }
    if (family.name.rfind("kvbm_", 0) != 0) continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name != "pool" && label.name != "pipeline" && label.name != "path") continue;
        if (std::find(names.begin(), names.end(), label.value) == names.end()) {
          continue;
        }
        config_error("metrics_registry",
                     "the registry already holds " + family.name + "{" + label.name + "=\"" +
                         label.value +
                         "\"}, a series of this manager (of another KvBlockManager, "
                         "or a pool, pipeline or engine of that name); give the manager its "
                         "own registry, or destroy the other owner first");
      }
    }
  }
}

}  // namespace

void config_error(std::string_view option, const std::string& what) {
  throw UsageError("KvBlockManagerConfig." + std::string(option) + ": " + what);
}

std::string tier_size_option(const TierConfig& t, std::string_view tier) {
  return std::string(tier) + (t.bytes != 0 ? ".bytes" : ".blocks");
}

namespace {

// The layout and device_layout.
void check_layout(const KvBlockManagerConfig& c) {
  try {
    c.layout.validate();
  } catch (const UsageError& e) {
    config_error("layout", e.what());
  }
  if (c.layout.page_size > kMaxBlockSize) {
    config_error("layout.page_size", std::to_string(c.layout.page_size) +
                                         " tokens per block is more than a pool's maximum of " +
                                         std::to_string(kMaxBlockSize) + "; use smaller blocks");
  }
  const std::size_t bb = c.layout.block_bytes();
  if (bb > kMaxBlockBytes) {
    config_error("layout", "a block of " + std::to_string(bb) + " bytes is more than " +
                               std::to_string(kMaxBlockBytes) +
                               " (a block, its disk footer and alignment must fit a file "
                               "offset); use smaller dimensions");
  }
  if (to_string(c.device_layout) == "unknown") {
    config_error("device_layout", "unknown LayoutKind " +
                                      std::to_string(static_cast<int>(c.device_layout)) +
                                      "; use kLayerSeparated or kFullyContiguous");
  }
}

// The tiers' sizes and the disk tier's options; returns the sizes.
TierBlocks check_tiers(const KvBlockManagerConfig& c, std::size_t bb) {
  TierBlocks n;
  n.device = tier_blocks(c.device, "device", bb, true);
  n.host = tier_blocks(c.host, "host", bb, false);
  n.disk = tier_blocks(c.disk, "disk", bb, false);
  check_eviction(c.device.eviction, "device");
  check_eviction(c.host.eviction, "host");
  check_eviction(c.disk.eviction, "disk");
  if (n.disk > 0 && n.host == 0) {
    config_error("disk",
                 "a disk tier needs a host tier (G3 is written from and read through G2); "
                 "set host.blocks or host.bytes");
  }
  if (n.disk > 0) {
    // The file: n slots of round_up(block + footer, alignment) bytes (bb is
    // at most kMaxBlockBytes, so the slot does not wrap).
    const std::uint64_t slot = (bb + DiskStorage::kFooterBytes + DiskStorage::kAlignment - 1) /
                               DiskStorage::kAlignment * DiskStorage::kAlignment;
    if (n.disk > kMaxSpanBytes / slot) {
      config_error(tier_size_option(c.disk, "disk"),
                   std::to_string(n.disk) + " slots of " + std::to_string(slot) +
                       " bytes overflow the disk file's size (a file offset: " +
                       std::to_string(kMaxSpanBytes) + " bytes); use fewer blocks");
    }
  }
  if (c.disk_persistent && (n.disk == 0 || !c.move_bytes)) {
    config_error("disk_persistent",
                 n.disk == 0
                     ? "a persistent disk tier needs a disk tier; set disk.blocks or disk.bytes"
                     : "nothing is written with move_bytes false, so nothing can persist; "
                       "set move_bytes or leave disk_persistent off");
  }
  if (n.disk > 0 && c.move_bytes && c.disk_directory.empty()) {
    config_error("disk_directory", "the disk tier needs an existing directory for its file");
  }
  if (c.disk_direct_io != DirectIo::kPreferred && c.disk_direct_io != DirectIo::kRequired &&
      c.disk_direct_io != DirectIo::kOff) {
    config_error("disk_direct_io", "unknown DirectIo " +
                                       std::to_string(static_cast<int>(c.disk_direct_io)) +
                                       "; use kPreferred, kRequired or kOff");
  }
  return n;
}

// The boundaries' modes, policies and pipelines, and the duplicate policy.
void check_offload(const KvBlockManagerConfig& c) {
  check_mode(c.device_to_host, "device_to_host");
  check_mode(c.host_to_disk, "host_to_disk");
  check_min_frequency(c.device_to_host_policy, "device_to_host_policy");
  check_min_frequency(c.host_to_disk_policy, "host_to_disk_policy");
  if (c.device_to_host == OffloadMode::kOnEviction && !c.device_to_host_policy.skip_present) {
    config_error("device_to_host_policy.skip_present",
                 "on_eviction never copies a block G2 already holds (it refreshes that copy); "
                 "leave skip_present true, or use write_through to copy present blocks again");
  }
  if (c.host_to_disk == OffloadMode::kOnEviction && !c.host_to_disk_policy.skip_present) {
    config_error("host_to_disk_policy.skip_present",
                 "on_eviction never copies a block G3 already holds (it refreshes that copy); "
                 "leave skip_present true, or use write_through to copy present blocks again");
  }
  check_pipeline(c.pipeline, "pipeline");
  if (c.host_to_disk_pipeline) check_pipeline(*c.host_to_disk_pipeline, "host_to_disk_pipeline");
  if (c.duplicate_policy != DuplicatePolicy::kReject &&
      c.duplicate_policy != DuplicatePolicy::kAllow) {
    config_error("duplicate_policy", "unknown DuplicatePolicy " +
                                         std::to_string(static_cast<int>(c.duplicate_policy)) +
                                         "; use kReject or kAllow");
  }
}

// The remote tier's options (only when it has URLs).
void check_remote(const KvBlockManagerConfig& c, const TierBlocks& n) {
  const RemoteTierConfig& r = c.remote;
  check_mode(c.host_to_remote, "host_to_remote");
  check_min_frequency(c.host_to_remote_policy, "host_to_remote_policy");
  if (r.urls.empty()) return;
  if (n.host == 0) {
    config_error("remote.urls",
                 "G4 moves blocks through G2 (pinned host memory) both ways; give "
                 "host.blocks or host.bytes, or leave remote.urls empty");
  }
  if (!c.move_bytes) {
    config_error("remote.urls",
                 "G4 stores bytes; it needs move_bytes = true (a metadata-only "
                 "manager has none to store)");
  }
  // The store's own grammar (remote_url_error), so that a URL passing here parses there.
  for (std::size_t i = 0; i < r.urls.size(); ++i) {
    if (const std::string why = remote_url_error(r.urls[i]); !why.empty()) {
      config_error("remote.urls[" + std::to_string(i) + "]", why);
    }
  }
  if (r.key_prefix.empty()) {
    config_error("remote.key_prefix",
                 "is empty; give the first part of every G4 key, e.g. \"kvbm\" (the default)");
  }
  if (r.key_prefix.find(':') != std::string::npos) {
    config_error("remote.key_prefix", "'" + r.key_prefix +
                                          "' holds a ':', which separates the parts of a G4 "
                                          "key; use a prefix without ':', e.g. \"kvbm\"");
  }
  if (r.model.empty()) {
    config_error("remote.model",
                 "required with remote.urls: name the model and its revision (e.g. "
                 "\"llama-3.1-8b@rev3\"), so that no instance of another model is ever served "
                 "these blocks");
  }
  // The store options the facade sets itself.
  if (!r.name_space.model.empty() || !r.name_space.dtype.empty() ||
      !r.name_space.user_namespace.empty()) {
    config_error("remote.name_space",
                 "is the facade's: set remote.model, remote.dtype and "
                 "remote.user_namespace instead (the layout is the config's)");
  }
  if (r.metrics_registry) {
    config_error("remote.metrics_registry",
                 "is the facade's: G4's series go to KvBlockManagerConfig.metrics_registry");
  }
  if (r.pool_name != "G4") config_error("remote.pool_name", "is the facade's: leave it \"G4\"");
  if (r.connections_per_server == 0)
    config_error("remote.connections_per_server", "must be at least 1");
  if (r.connect_timeout.count() <= 0) config_error("remote.connect_timeout", "must be positive");
  if (r.command_timeout.count() <= 0) config_error("remote.command_timeout", "must be positive");
  if (r.ttl.count() < 0) config_error("remote.ttl", "must be 0 (never expire) or positive");
  if (r.staging_blocks == 0) config_error("remote.staging_blocks", "must be at least 1");
  if (r.max_batch_blocks == 0) config_error("remote.max_batch_blocks", "must be at least 1");
  std::size_t staging = 0;
  if (__builtin_mul_overflow(r.staging_blocks, c.layout.block_bytes(), &staging) ||
      staging > kMaxSpanBytes) {
    config_error("remote.staging_blocks", std::to_string(r.staging_blocks) +
                                              " blocks of staging memory overflow; give fewer");
  }
}

// The engines' options.
void check_engines(const KvBlockManagerConfig& c, std::size_t bb) {
  if (c.bounce_blocks == 0) config_error("bounce_blocks", "must be at least 1");
  if (std::size_t span = 0;
      __builtin_mul_overflow(c.bounce_blocks, bb, &span) || span > kMaxSpanBytes) {
    config_error("bounce_blocks", blocks_of(c.bounce_blocks, bb) +
                                      " overflow what one buffer may span (" +
                                      std::to_string(kMaxSpanBytes) + " bytes); use fewer");
  }
  if (c.copy_threads > HostEngineOptions::kMaxThreads) {
    config_error("copy_threads", std::to_string(c.copy_threads) + " is more than " +
                                     std::to_string(HostEngineOptions::kMaxThreads) +
                                     "; use 0 (the engine's default) to " +
                                     std::to_string(HostEngineOptions::kMaxThreads));
  }
  if (c.disk_queue_depth > DiskEngineOptions::kMaxQueueDepth) {
    config_error("disk_queue_depth", std::to_string(c.disk_queue_depth) + " is more than " +
                                         std::to_string(DiskEngineOptions::kMaxQueueDepth) +
                                         "; use 0 (default " +
                                         std::to_string(DiskEngineOptions{}.queue_depth) + ") to " +
                                         std::to_string(DiskEngineOptions::kMaxQueueDepth));
  }
  const std::size_t depth =
      c.disk_queue_depth != 0 ? c.disk_queue_depth : DiskEngineOptions{}.queue_depth;
  if (c.disk_workers != 0 &&
      (c.disk_workers < depth || c.disk_workers > DiskEngineOptions::kMaxWorkers)) {
    config_error("disk_workers",
                 std::to_string(c.disk_workers) + " is fewer than disk_queue_depth (" +
                     std::to_string(depth) + (c.disk_queue_depth != 0 ? "" : ", the default") +
                     ") or more than " + std::to_string(DiskEngineOptions::kMaxWorkers) +
                     "; use 0 (2 x disk_queue_depth) or " + std::to_string(depth) + " to " +
                     std::to_string(DiskEngineOptions::kMaxWorkers) +
                     " (fewer workers than disk_queue_depth could never fill the queue)");
  }
  if (c.cuda_device < 0) {
    config_error("cuda_device", std::to_string(c.cuda_device) + " is not a device; use 0 or more");
  }
}

// The metrics registry (a new one when unset) and the listeners.
void check_listeners(KvBlockManagerConfig& c) {
  if (c.metrics_registry) {
    check_registry(c, *c.metrics_registry);
  } else {
    c.metrics_registry = std::make_shared<prometheus::Registry>();
  }
  for (const auto& l : c.device_listeners) {
    if (!l) config_error("device_listeners", "a listener is null; pass PoolListeners");
  }
  for (const auto& l : c.host_listeners) {
    if (!l) config_error("host_listeners", "a listener is null; pass PoolListeners");
  }
  for (const auto& l : c.remote_listeners) {
    if (!l) config_error("remote_listeners", "a listener is null; pass PoolListeners");
  }
  if (!c.remote_listeners.empty() && c.remote.urls.empty()) {
    config_error("remote_listeners", "there is no remote tier to listen to; set remote.urls");
  }
  for (const auto& l : c.disk_listeners) {
    if (!l) config_error("disk_listeners", "a listener is null; pass PoolListeners");
  }
}

}  // namespace

TierBlocks check_config(KvBlockManagerConfig& c) {
  check_layout(c);
  const std::size_t bb = c.layout.block_bytes();
  const TierBlocks n = check_tiers(c, bb);
  check_offload(c);
  check_engines(c, bb);
  check_remote(c, n);
  check_listeners(c);

  // A boundary without its lower tier moves nothing.
  if (n.host == 0) c.device_to_host = OffloadMode::kNone;
  if (n.disk == 0) c.host_to_disk = OffloadMode::kNone;
  if (c.remote.urls.empty()) c.host_to_remote = OffloadMode::kNone;
  return n;
}

}  // namespace kvbm::detail

namespace kvbm {

std::string_view to_string(OffloadMode m) noexcept {
  switch (m) {
    case OffloadMode::kNone:
      return "none";
    case OffloadMode::kWriteThrough:
      return "write_through";
    case OffloadMode::kOnEviction:
      return "on_eviction";
  }
  return "unknown";
}

OffloadMode parse_offload_mode(std::string_view name) {
  for (const auto m : {OffloadMode::kNone, OffloadMode::kWriteThrough, OffloadMode::kOnEviction}) {
    if (to_string(m) == name) return m;
  }
  KVBM_CHECK(false, "unknown offload mode '", name, "'; use none, write_through or on_eviction");
  return OffloadMode::kNone;
}

}  // namespace kvbm
