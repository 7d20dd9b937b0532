// kvbm/kv_block_manager_config.h: what a KvBlockManager is built from.
//
// KvBlockManagerConfig and its parts (TierConfig, OffloadPolicyConfig,
// RemoteTierConfig, DiskTierOptions, TierEntry, OffloadMode): plain values,
// checked by KvBlockManager::build (kvbm/kv_block_manager.h), which throws
// UsageError naming the first invalid option. docs/offload.md has every
// option. This header names the options only: it includes no pool, engine or
// store implementation, so a program that only writes a config (a launcher, a
// config parser) needs nothing else.
//
// Thread-safety: plain values.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/disk/disk_options.h"
#include "kvbm/duplicate_policy.h"
#include "kvbm/env.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/offload/config.h"
#include "kvbm/pool_listener.h"
#include "kvbm/remote/remote_store.h"
#include "kvbm/storage/layout.h"
#include "kvbm/tier.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// When blocks move down a tier boundary.
enum class OffloadMode : std::uint8_t {
  kNone,          ///< never
  kWriteThrough,  ///< on registration, through the offload pipeline
  kOnEviction,    ///< when the upper pool evicts the block
};
/// Returns "none", "write_through" or "on_eviction".
[[nodiscard]] std::string_view to_string(OffloadMode m) noexcept;
/// Parses the names of to_string(); throws UsageError listing them otherwise.
[[nodiscard]] OffloadMode parse_offload_mode(std::string_view name);

/// The size and eviction of one tier. Give `blocks` or `bytes` (bytes are
/// rounded down to whole blocks); both 0 means the tier is absent.
struct TierConfig {
  std::size_t blocks = 0;
  std::size_t bytes = 0;
  EvictionPolicy eviction = EvictionPolicy::kLru;
};

/// Which blocks move down a boundary, in either mode.
struct OffloadPolicyConfig {
  /// Skip blocks the destination already holds. On-eviction always skips
  /// them (and refreshes their copy there); false is refused in that mode.
  bool skip_present = true;
  /// Offload only blocks seen at least this often (0: all): write-through
  /// filters at enqueue, on-eviction drops an evicted block below it.
  std::uint32_t min_frequency = 0;
};

/// The remote tier G4 (docs/remote.md): Redis (one server, a sharded set, or
/// a Redis Cluster), shared by engine instances. A block is one value keyed by
/// the namespace (model, dtype, layout, user namespace) and its sequence hash,
/// verified by checksum before it is used. G4 has no pool here: the store
/// evicts by its own policy (maxmemory-policy allkeys-lru) and other
/// instances write to it.
///
/// The store's own options (RemoteStoreOptions: the URLs, an ACL user and
/// where its password is, timeouts, backoff, replica reads, TTL) are set here
/// as they are on a RemoteStore; `urls` empty means no G4, and each URL is
/// checked by the store's grammar (remote_url_error) at build(), before
/// anything connects. Three of them are the facade's and must stay unset:
/// `name_space` (made from model, dtype, the layout and user_namespace),
/// `metrics_registry` (KvBlockManagerConfig::metrics_registry) and
/// `pool_name` ("G4").
struct RemoteTierConfig : RemoteStoreOptions {
  /// The model's name and revision (required with urls): blocks are shared
  /// only between instances that name the same model, dtype and layout.
  std::string model;
  /// The element type, e.g. "bf16" (the layout's dtype_bytes cannot tell bf16 from fp16).
  std::string dtype;
  /// Any further separation (tenant, cache salt).
  std::string user_namespace;
  /// Host memory for blocks waiting to be written (copied out of G2 when
  /// they are taken, so that G2 never waits for the network): this many
  /// blocks; a block that finds it full is dropped and counted (no_space).
  std::size_t staging_blocks = 256;
  /// Most blocks per write batch (one pipelined round trip per server).
  std::size_t max_batch_blocks = 64;
};

/// G3's own options: its file and the engine that writes and reads it
/// (docs/disk_tier.md).
struct DiskTierOptions {
  /// Existing directory for the G3 file (created 0600, removed at shutdown
  /// unless persistent).
  std::filesystem::path directory;
  DirectIo direct_io = DirectIo::kPreferred;
  /// Keep G3 across restarts and crashes: see KvBlockManagerConfig::disk_persistent.
  bool persistent = false;
  /// What makes blocks reusable beyond the layout (the model's name and revision, say).
  std::string name_space;
  /// What issues G3's I/O: kAuto (the thread pool, measured faster), kThreadPool or kIoUring.
  DiskIoEngine io_engine = DiskIoEngine::kAuto;
  /// Disk engine workers and queue depth (0: the engine's defaults).
  std::size_t workers = 0;
  std::size_t queue_depth = 0;
};

/// One tier of a KvBlockManagerConfig (KvBlockManagerConfig::tiers): its size,
/// the boundary from the tier above it (G2: from G1; G3 and G4: from G2), its
/// listeners, and the tier's own options.
struct TierEntry {
  TierId id = TierId::kG1;
  /// A pooled tier's size and eviction (G1, G2, G3; at least one block each);
  /// unused for G4.
  TierConfig size;
  /// When blocks move down into this tier (unused for G1).
  OffloadMode mode = OffloadMode::kWriteThrough;
  /// Which blocks move down into it (skip_present, min_frequency).
  OffloadPolicyConfig policy;
  /// The write-through pipeline into it; unset: KvBlockManagerConfig::pipeline.
  /// G4 has none (its writer batches by remote.max_batch_blocks).
  std::optional<PipelineConfig> pipeline;
  /// Extra listeners of its pool (G4: of its writer; see remote_listeners).
  std::vector<std::shared_ptr<PoolListener>> listeners;
  /// G3's own options (required for G3, unused elsewhere).
  std::optional<DiskTierOptions> disk;
  /// G4's own options (required for G4, unused elsewhere).
  std::optional<RemoteTierConfig> remote;
};

/// Everything KvBlockManager::build needs; see the file comment.
///
/// The tiers are given one of two ways: as `tiers`, one TierEntry per tier,
/// or by the named fields below (device, host, disk and disk_*, device_to_host,
/// host_to_disk, host_to_remote and their policies, host_to_disk_pipeline,
/// remote and the *_listeners), which build() translates into the same
/// entries in one place; an error names the option as it was given. After
/// build(), KvBlockManager::config().tiers holds the entries in use.
struct KvBlockManagerConfig {
  /// Model dimensions of one block; layout.page_size is the block size in tokens.
  LayoutConfig layout;
  /// How G1 memory is laid out (engines allocate per-layer tensors: separated).
  LayoutKind device_layout = LayoutKind::kLayerSeparated;
  TierConfig device;  ///< G1 (required)
  TierConfig host;    ///< G2 (optional)
  TierConfig disk;    ///< G3 (optional; needs G2 and disk_directory)
  /// Existing directory for the G3 file (created 0600, removed at shutdown
  /// unless disk_persistent).
  std::filesystem::path disk_directory;
  DirectIo disk_direct_io = DirectIo::kPreferred;
  /// Keep G3 across restarts and crashes (docs/disk_tier.md): the file
  /// (`kvbm.slots` in disk_directory, which this process then owns through a
  /// lock) is kept at shutdown, and a manager built later on the same
  /// directory recovers every intact block of this layout and namespace into
  /// G3, as cached (inactive) blocks, before build() returns. Needs move_bytes.
  bool disk_persistent = false;
  /// What makes blocks reusable beyond the layout: the model's name and
  /// revision, say. Blocks written under another namespace are never served.
  std::string disk_namespace;
  OffloadMode device_to_host = OffloadMode::kWriteThrough;
  OffloadMode host_to_disk = OffloadMode::kWriteThrough;
  OffloadPolicyConfig device_to_host_policy;
  OffloadPolicyConfig host_to_disk_policy;
  /// G4 (optional; needs G2, move_bytes and remote.model).
  RemoteTierConfig remote;
  /// When G2 blocks go to G4: kWriteThrough, as soon as they are in G2 (other
  /// instances find them at once); kOnEviction, when G2 evicts them.
  OffloadMode host_to_remote = OffloadMode::kWriteThrough;
  /// skip_present asks G4 in one round trip per batch; min_frequency as elsewhere.
  OffloadPolicyConfig host_to_remote_policy;
  PipelineConfig pipeline;  ///< the write-through pipelines (G2 -> G3 too, unless below)
  /// The G2 -> G3 pipeline's own config (a disk wants other batches than a
  /// PCIe link; or hold queued blocks only above G2); unset: `pipeline`.
  std::optional<PipelineConfig> host_to_disk_pipeline;
  DuplicatePolicy duplicate_policy = DuplicatePolicy::kReject;
  /// false: metadata only (no memory, copies complete at once).
  bool move_bytes = true;
  /// Pinned staging blocks for G3 -> G1 reads (1 ..).
  std::size_t bounce_blocks = 32;
  /// Host copy threads (0: the engine's default).
  std::size_t copy_threads = 0;
  /// Disk engine workers and queue depth (0: the engine's defaults).
  std::size_t disk_workers = 0;
  std::size_t disk_queue_depth = 0;
  /// What issues G3's I/O: kAuto (the thread pool, measured faster), kThreadPool
  /// or kIoUring (docs/disk_tier.md, "Choosing the I/O engine").
  DiskIoEngine disk_io_engine = DiskIoEngine::kAuto;
  /// CUDA device for G1.
  int cuda_device = 0;
  /// Where every series goes (default: a new registry).
  std::shared_ptr<prometheus::Registry> metrics_registry;
  /// The runtime every component runs on (kvbm/env.h): the clock of the offload
  /// pipelines' intervals and timeouts and of the remote store's deadlines,
  /// backoff and refresh (remote.env, when unset, takes this one), the
  /// workers, the syscalls. Null: Env::standard(), or an Env on `clock`.
  /// Tests drive time with an Env on a ManualClock.
  std::shared_ptr<Env> env;
  /// Shorthand for an Env on this clock (kvbm/clock.h); null: env's clock. When
  /// both are set they must name the same clock. After build() it is env's clock.
  std::shared_ptr<Clock> clock;
  /// The engine's prefill speed, tokens per second (0: unknown until the
  /// engine calls KvBlockManager::report_prefill()): what recomputing a
  /// prefix costs, against which onboarding plans weigh loading it
  /// (kvbm/onboard_plan.h). Reports, once there are any, replace it.
  double prefill_tokens_per_second = 0;
  /// The tiers, one entry each, in any order (G1 required). When given, the
  /// named tier fields (device, host, disk, disk_*, the modes, policies and
  /// host_to_disk_pipeline, remote, the *_listeners) must stay unset.
  std::vector<TierEntry> tiers;
  /// Extra listeners per pool (e.g. a KV event publisher).
  std::vector<std::shared_ptr<PoolListener>> device_listeners;
  std::vector<std::shared_ptr<PoolListener>> host_listeners;
  std::vector<std::shared_ptr<PoolListener>> disk_listeners;
  /// Listeners of G4 (needs `remote`): on_stored(hashes) runs on the G2 -> G4
  /// writer's thread, once per written batch, with the hashes of the blocks
  /// now in G4 in staging order: those written successfully and those the
  /// presence policy (host_to_remote_policy.skip_present) found there
  /// already (another instance wrote them: stored in the cluster all the
  /// same). Attach KvEventPublisher::listener(events::kMediumRemote,
  /// block_size) to publish G4 BlockStored events. G4 removals are never
  /// reported: the store drops values by TTL and eviction without telling
  /// anyone, so on_removed is not called.
  std::vector<std::shared_ptr<PoolListener>> remote_listeners;
};

}  // namespace kvbm
