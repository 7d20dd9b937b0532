// src/facade/config.cpp: the names of the offload modes and the checks of
// KvBlockManagerConfig (facade/config.h).

#include "facade/config.h"

#include <algorithm>
#include <array>
#include <cmath>
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
std::vector<std::string> series_names() {
  std::vector<std::string> out;
  for (const TierId t : kTierIds) {
    out.emplace_back(to_string(t));
    if (t == TierId::kG1) continue;
    const std::string down = copy_path_name(facade::kTierKinds[t].above, t);
    out.insert(out.end(), {down, down + "_explicit", down + "_on_eviction"});
    if (facade::kTierKinds[t].storage != facade::StorageKind::kRemote) {
      out.push_back(copy_path_name(t, TierId::kG1));
    }
  }
  return out;
}
/// The families only a KvBlockManager adds (unlabelled by pool: one manager per registry).
constexpr std::array<std::string_view, 3> kManagerFamilies = {
    "kvbm_onboard_blocks_total", "kvbm_onboard_cancelled_total", "kvbm_prefill_seconds_per_token"};

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
void check_registry(const prometheus::Registry& registry) {
  const std::vector<std::string> names = series_names();
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

// A G3 entry's own options: its directory, I/O mode, persistence and engine.
void check_disk(const KvBlockManagerConfig& c, const TierEntry& e, const TierOptionNames& n) {
  if (!e.disk) {
    config_error(n.own.substr(0, n.own.size() - 1),
                 "a G3 entry needs its disk options (at least directory)");
  }
  const DiskTierOptions& d = *e.disk;
  if (d.persistent && !c.move_bytes) {
    config_error(n.own + "persistent",
                 "nothing is written with move_bytes false, so nothing can persist; "
                 "set move_bytes or leave " +
                     n.own + "persistent off");
  }
  if (c.move_bytes && d.directory.empty()) {
    config_error(n.own + "directory", "the disk tier needs an existing directory for its file");
  }
  if (d.direct_io != DirectIo::kPreferred && d.direct_io != DirectIo::kRequired &&
      d.direct_io != DirectIo::kOff) {
    config_error(n.own + "direct_io", "unknown DirectIo " +
                                          std::to_string(static_cast<int>(d.direct_io)) +
                                          "; use kPreferred, kRequired or kOff");
  }
  const std::string queue_depth = n.own + "queue_depth";
  if (d.queue_depth > DiskEngineOptions::kMaxQueueDepth) {
    config_error(queue_depth, std::to_string(d.queue_depth) + " is more than " +
                                  std::to_string(DiskEngineOptions::kMaxQueueDepth) +
                                  "; use 0 (default " +
                                  std::to_string(DiskEngineOptions{}.queue_depth) + ") to " +
                                  std::to_string(DiskEngineOptions::kMaxQueueDepth));
  }
  const std::size_t depth = d.queue_depth != 0 ? d.queue_depth : DiskEngineOptions{}.queue_depth;
  if (d.workers != 0 && (d.workers < depth || d.workers > DiskEngineOptions::kMaxWorkers)) {
    config_error(n.own + "workers",
                 std::to_string(d.workers) + " is fewer than " + queue_depth + " (" +
                     std::to_string(depth) + (d.queue_depth != 0 ? "" : ", the default") +
                     ") or more than " + std::to_string(DiskEngineOptions::kMaxWorkers) +
                     "; use 0 (2 x " + queue_depth + ") or " + std::to_string(depth) + " to " +
                     std::to_string(DiskEngineOptions::kMaxWorkers) + " (fewer workers than " +
                     queue_depth + " could never fill the queue)");
  }
}

// The pooled tiers' sizes and eviction, G3's file and options; fills out.blocks.
void check_tiers(const KvBlockManagerConfig& c, std::size_t bb, CheckedTiers& out) {
  for (const TierEntry& e : c.tiers) {
    const TierOptionNames& n = out.names[e.id];
    if (e.id == TierId::kG4) continue;  // no pool
    out.blocks[e.id] = tier_blocks(e.size, n.size, bb, true);
    check_eviction(e.size.eviction, n.size);
  }
  const std::size_t disk = out.blocks[TierId::kG3];
  if (disk == 0) return;
  const TierOptionNames& n = out.names[TierId::kG3];
  if (out.blocks[TierId::kG2] == 0) {
    config_error(n.size, std::string("a disk tier needs a host tier (G3 is written from and read "
                                     "through G2); ") +
                             (out.named ? "set host.blocks or host.bytes" : "add a G2 entry"));
  }
  // The file: n slots of round_up(block + footer, alignment) bytes (bb is
  // at most kMaxBlockBytes, so the slot does not wrap).
  const std::uint64_t slot = (bb + DiskStorage::kFooterBytes + DiskStorage::kAlignment - 1) /
                             DiskStorage::kAlignment * DiskStorage::kAlignment;
  const TierEntry& g3 = *std::find_if(c.tiers.begin(), c.tiers.end(),
                                      [](const TierEntry& e) { return e.id == TierId::kG3; });
  if (disk > kMaxSpanBytes / slot) {
    config_error(tier_size_option(g3.size, n.size),
                 std::to_string(disk) + " slots of " + std::to_string(slot) +
                     " bytes overflow the disk file's size (a file offset: " +
                     std::to_string(kMaxSpanBytes) + " bytes); use fewer blocks");
  }
  check_disk(c, g3, n);
}

// The boundaries' modes, policies and pipelines, and the duplicate policy.
void check_offload(const KvBlockManagerConfig& c, const CheckedTiers& checked) {
  for (const TierEntry& e : c.tiers) {
    if (e.id == TierId::kG1) continue;  // no boundary above it
    const TierOptionNames& n = checked.names[e.id];
    check_mode(e.mode, n.mode);
    check_min_frequency(e.policy, n.policy);
    const bool pooled = e.id != TierId::kG4;
    if (pooled && e.mode == OffloadMode::kOnEviction && !e.policy.skip_present) {
      config_error(n.policy + ".skip_present",
                   "on_eviction never copies a block " + std::string(to_string(e.id)) +
                       " already holds (it refreshes that copy); leave skip_present true, or "
                       "use write_through to copy present blocks again");
    }
    if (e.pipeline && !pooled) {
      config_error(n.pipeline, "G4 has no pipeline (its writer batches by " + n.own +
                                   "max_batch_blocks); leave it unset");
    }
  }
  check_pipeline(c.pipeline, "pipeline");
  for (const TierEntry& e : c.tiers) {
    if (e.pipeline) check_pipeline(*e.pipeline, checked.names[e.id].pipeline);
  }
  if (c.duplicate_policy != DuplicatePolicy::kReject &&
      c.duplicate_policy != DuplicatePolicy::kAllow) {
    config_error("duplicate_policy", "unknown DuplicatePolicy " +
                                         std::to_string(static_cast<int>(c.duplicate_policy)) +
                                         "; use kReject or kAllow");
  }
}

// The store options the facade sets itself, and the store's sizes and timeouts.
void check_remote_store(const KvBlockManagerConfig& c, const RemoteTierConfig& r,
                        const std::string& own) {
  if (!r.name_space.model.empty() || !r.name_space.dtype.empty() ||
      !r.name_space.user_namespace.empty()) {
    config_error(own + "name_space", "is the facade's: set " + own + "model, " + own +
                                         "dtype and " + own +
                                         "user_namespace instead (the layout is the config's)");
  }
  if (r.metrics_registry) {
    config_error(own + "metrics_registry",
                 "is the facade's: G4's series go to KvBlockManagerConfig.metrics_registry");
  }
  if (r.pool_name != "G4") config_error(own + "pool_name", "is the facade's: leave it \"G4\"");
  if (r.connections_per_server == 0)
    config_error(own + "connections_per_server", "must be at least 1");
  if (r.connect_timeout.count() <= 0) config_error(own + "connect_timeout", "must be positive");
  if (r.command_timeout.count() <= 0) config_error(own + "command_timeout", "must be positive");
  if (r.ttl.count() < 0) config_error(own + "ttl", "must be 0 (never expire) or positive");
  if (r.staging_blocks == 0) config_error(own + "staging_blocks", "must be at least 1");
  if (r.max_batch_blocks == 0) config_error(own + "max_batch_blocks", "must be at least 1");
  std::size_t staging = 0;
  if (__builtin_mul_overflow(r.staging_blocks, c.layout.block_bytes(), &staging) ||
      staging > kMaxSpanBytes) {
    config_error(own + "staging_blocks", std::to_string(r.staging_blocks) +
                                             " blocks of staging memory overflow; give fewer");
  }
}

// The remote tier's options (a G4 entry: URLs, or listeners without them).
void check_remote(const KvBlockManagerConfig& c, const CheckedTiers& checked) {
  const auto g4 = std::find_if(c.tiers.begin(), c.tiers.end(),
                               [](const TierEntry& e) { return e.id == TierId::kG4; });
  if (g4 == c.tiers.end()) return;
  const TierOptionNames& n = checked.names[TierId::kG4];
  if (!g4->remote || g4->remote->urls.empty()) {
    if (!g4->listeners.empty()) {
      config_error(n.listeners, "there is no remote tier to listen to; set " + n.own + "urls");
    }
    config_error(n.own + "urls", "is empty; G4 needs the URL of at least one server");
  }
  const RemoteTierConfig& r = *g4->remote;
  if (checked.blocks[TierId::kG2] == 0) {
    config_error(n.own + "urls",
                 "G4 moves blocks through G2 (pinned host memory) both ways; give "
                 "host.blocks or host.bytes (a G2 entry), or leave " +
                     n.own + "urls empty");
  }
  if (!c.move_bytes) {
    config_error(n.own + "urls",
                 "G4 stores bytes; it needs move_bytes = true (a metadata-only "
                 "manager has none to store)");
  }
  // The store's own grammar (remote_url_error), so that a URL passing here parses there.
  for (std::size_t i = 0; i < r.urls.size(); ++i) {
    if (const std::string why = remote_url_error(r.urls[i]); !why.empty()) {
      config_error(n.own + "urls[" + std::to_string(i) + "]", why);
    }
  }
  if (r.key_prefix.empty()) {
    config_error(n.own + "key_prefix",
                 "is empty; give the first part of every G4 key, e.g. \"kvbm\" (the default)");
  }
  if (r.key_prefix.find(':') != std::string::npos) {
    config_error(n.own + "key_prefix", "'" + r.key_prefix +
                                           "' holds a ':', which separates the parts of a G4 "
                                           "key; use a prefix without ':', e.g. \"kvbm\"");
  }
  if (r.model.empty()) {
    config_error(n.own + "model", "required with " + n.own +
                                      "urls: name the model and its revision (e.g. "
                                      "\"llama-3.1-8b@rev3\"), so that no instance of another "
                                      "model is ever served these blocks");
  }
  check_remote_store(c, r, n.own);
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
  if (c.cuda_device < 0) {
    config_error("cuda_device", std::to_string(c.cuda_device) + " is not a device; use 0 or more");
  }
  if (!std::isfinite(c.prefill_tokens_per_second) || c.prefill_tokens_per_second < 0) {
    config_error("prefill_tokens_per_second",
                 std::to_string(c.prefill_tokens_per_second) +
                     " is not a speed; give the engine's prefill tokens per second, or 0 "
                     "(unknown until report_prefill())");
  }
}

// The metrics registry (a new one when unset) and the listeners.
void check_listeners(KvBlockManagerConfig& c, const CheckedTiers& checked) {
  if (c.metrics_registry) {
    check_registry(*c.metrics_registry);
  } else {
    c.metrics_registry = std::make_shared<prometheus::Registry>();
  }
  for (const TierEntry& e : c.tiers) {
    for (const auto& l : e.listeners) {
      if (!l) config_error(checked.names[e.id].listeners, "a listener is null; pass PoolListeners");
    }
  }
}

// The named fields' spelling of each tier's options (tier_entries_from_fields).
TierArray<TierOptionNames> field_names() {
  TierArray<TierOptionNames> n;
  n[TierId::kG1] = {"device", "", "", "pipeline", "device_listeners", ""};
  n[TierId::kG2] = {"host",     "device_to_host", "device_to_host_policy",
                    "pipeline", "host_listeners", ""};
  n[TierId::kG3] = {
      "disk",           "host_to_disk", "host_to_disk_policy", "host_to_disk_pipeline",
      "disk_listeners", "disk_"};
  n[TierId::kG4] = {"remote",   "host_to_remote",   "host_to_remote_policy",
                    "pipeline", "remote_listeners", "remote."};
  return n;
}

// The first named tier field `c` sets ("" when none): those must stay unset beside entries.
std::string named_field_set(const KvBlockManagerConfig& c) {
  const auto sized = [](const TierConfig& t) { return t.blocks != 0 || t.bytes != 0; };
  if (sized(c.device)) return "device";
  if (sized(c.host)) return "host";
  if (sized(c.disk)) return "disk";
  if (!c.disk_directory.empty()) return "disk_directory";
  if (c.disk_persistent) return "disk_persistent";
  if (c.host_to_disk_pipeline) return "host_to_disk_pipeline";
  if (!c.remote.urls.empty()) return "remote.urls";
  if (!c.device_listeners.empty()) return "device_listeners";
  if (!c.host_listeners.empty()) return "host_listeners";
  if (!c.disk_listeners.empty()) return "disk_listeners";
  if (!c.remote_listeners.empty()) return "remote_listeners";
  return "";
}

// Makes c.tiers the entries to build (translated from the named fields when
// none were given), fastest first; returns how their options are named.
CheckedTiers take_entries(KvBlockManagerConfig& c) {
  CheckedTiers out;
  out.named = c.tiers.empty();
  if (out.named) {
    c.tiers = tier_entries_from_fields(c);
    out.names = field_names();
    return out;
  }
  if (const std::string set = named_field_set(c); !set.empty()) {
    config_error("tiers", "give the tiers as entries or by the named fields, not both: " + set +
                              " is set beside tiers");
  }
  TierArray<bool> seen{};
  for (std::size_t i = 0; i < c.tiers.size(); ++i) {
    const TierId t = c.tiers[i].id;
    const std::string at = "tiers[" + std::to_string(i) + "]";
    const auto level = static_cast<std::size_t>(t);
    if (level < 1 || level > kTierCount) {
      config_error(at + ".id", std::to_string(level) + " is not a tier; use G1 .. G4");
    }
    if (seen[t]) config_error(at + ".id", std::string(to_string(t)) + " has two entries");
    seen[t] = true;
    const char* own = t == TierId::kG3 ? ".disk." : t == TierId::kG4 ? ".remote." : ".";
    out.names[t] = {at + ".size",     at + ".mode",      at + ".policy",
                    at + ".pipeline", at + ".listeners", at + own};
  }
  if (!seen[TierId::kG1]) config_error("tiers", "has no G1 entry; G1 is required");
  std::sort(c.tiers.begin(), c.tiers.end(),
            [](const TierEntry& a, const TierEntry& b) { return a.id < b.id; });
  return out;
}

}  // namespace

std::vector<TierEntry> tier_entries_from_fields(const KvBlockManagerConfig& c) {
  if (c.disk_persistent && c.disk.blocks == 0 && c.disk.bytes == 0) {
    config_error("disk_persistent",
                 "a persistent disk tier needs a disk tier; set disk.blocks or disk.bytes");
  }
  std::vector<TierEntry> out;
  // Each entry: the tier, its size, the boundary into it, its listeners.
  auto add = [&](TierId id, const TierConfig& size, OffloadMode mode,
                 const OffloadPolicyConfig& policy,
                 const std::vector<std::shared_ptr<PoolListener>>& listeners) -> TierEntry& {
    TierEntry& e = out.emplace_back();
    e.id = id;
    e.size = size;
    e.mode = mode;
    e.policy = policy;
    e.listeners = listeners;
    return e;
  };
  const auto sized = [](const TierConfig& t) { return t.blocks != 0 || t.bytes != 0; };
  add(TierId::kG1, c.device, OffloadMode::kNone, {}, c.device_listeners);
  if (sized(c.host)) {
    add(TierId::kG2, c.host, c.device_to_host, c.device_to_host_policy, c.host_listeners);
  }
  if (sized(c.disk)) {
    TierEntry& e =
        add(TierId::kG3, c.disk, c.host_to_disk, c.host_to_disk_policy, c.disk_listeners);
    e.pipeline = c.host_to_disk_pipeline;
    DiskTierOptions& d = e.disk.emplace();
    d.directory = c.disk_directory;
    d.direct_io = c.disk_direct_io;
    d.persistent = c.disk_persistent;
    d.name_space = c.disk_namespace;
    d.io_engine = c.disk_io_engine;
    d.workers = c.disk_workers;
    d.queue_depth = c.disk_queue_depth;
  }
  if (!c.remote.urls.empty() || !c.remote_listeners.empty()) {
    add(TierId::kG4, {}, c.host_to_remote, c.host_to_remote_policy, c.remote_listeners).remote =
        c.remote;
  }
  return out;
}

// One runtime: `env`, or an Env on `clock`; afterwards both are set and agree.
void normalise_env(KvBlockManagerConfig& c) {
  if (c.env && c.clock && c.clock != c.env->clock()) {
    config_error("clock",
                 "names another clock than env->clock(); set only env (an Env holds its "
                 "clock: std::make_shared<Env>(clock))");
  }
  if (!c.env) c.env = c.clock ? std::make_shared<Env>(c.clock) : Env::standard();
  c.clock = c.env->clock();
}

CheckedTiers check_config(KvBlockManagerConfig& c) {
  normalise_env(c);
  check_layout(c);
  const std::size_t bb = c.layout.block_bytes();
  CheckedTiers out = take_entries(c);
  check_tiers(c, bb, out);
  check_offload(c, out);
  check_engines(c, bb);
  check_remote(c, out);
  check_listeners(c, out);
  return out;
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
