// replay/replay.h: replays a trace through a KvBlockManager (or several).
//
// With instances > 1 each request goes to one of several managers (engine
// instances), in trace order; with remote_urls they share G4, and a block one
// instance computed is found by the others there (OnboardCounts::from(TierId::kG4)).
//
// For each request, in trace order:
//
//   1. onboard(hashes): the longest prefix held in any tier; G1 hits are
//      held, G2 and G3 blocks are copied into fresh G1 blocks. The prefix's
//      bytes are verified against the pattern of their sequence hash.
//   2. The blocks after the prefix are allocated in G1 (all of them; a block
//      still cached in G1 after a miss is registered again and deduplicated).
//      When G1 cannot give them all, the offload pipelines are drained and the
//      allocation retried; then the request takes what fits for its leading
//      blocks and the rest count as uncached.
//   3. "Compute": each new block's regions are filled with bytes derived from
//      its sequence hash (replay/pattern.h), then staged and registered with
//      register_blocks(), which offloads them by the G1 -> G2 mode.
//   4. Release: the prefix first, then the new blocks, front to back (the most
//      recent block is released last).
//
// Bytes are written and verified only with move_bytes and when G1 is host
// memory (KvBlockManager::device_emulated()); on a real GPU the replay moves
// bytes between tiers but cannot look at them, and says so in one log line.
//
// With realtime, request i starts no earlier than its timestamp divided by
// `speed` after the replay's start (at most a century after it); `stop` ends
// the wait within 10 ms.
//
// Thread-safety: run_replay() is a plain function; it builds and owns its
// manager. The progress callback runs on the calling thread.

#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvbm/kv_block_manager.h"
#include "kvbm/tier_array.h"
#include "replay/cluster.h"
#include "replay/savings.h"
#include "replay/trace.h"

namespace prometheus {
class Registry;
}

namespace kvbm::replay {

struct ReplayResult;

/// Everything a replay needs besides the trace.
struct ReplayConfig {
  /// Model dimensions; layout.page_size is set to the trace's block_tokens.
  LayoutConfig layout{
      .num_layers = 2, .outer_dim = 2, .page_size = 512, .inner_dim = 4, .dtype_bytes = 2};
  TierConfig device{.blocks = 1'000};
  TierConfig host{.blocks = 10'000};
  TierConfig disk{.blocks = 50'000};
  OffloadMode device_to_host = OffloadMode::kOnEviction;
  OffloadMode host_to_disk = OffloadMode::kOnEviction;
  /// false (the default): an engine whose forward pass outlasts the copies;
  /// each request's write-through copies complete before its blocks are
  /// released and the next request is admitted, so the figures are the same
  /// on every run and write-through loses no block that has room below.
  /// true: requests go on while the copies run behind them, as fast as the
  /// pipeline goes; a block evicted before its copy starts is lost
  /// (ReplayResult::lost_to_lag), and the figures depend on thread timing.
  bool overlap_offload = false;
  /// The --model preset's name ("" = the layout above), for the report.
  std::string model;
  /// Keep G3 in disk_directory across runs (KvBlockManagerConfig::disk_persistent),
  /// under a namespace naming the replay and its model. With several
  /// instances each keeps its own G3 in disk_directory/instance-<i>
  /// (instance_disk_directory), created when missing: a persistent G3 is
  /// one process's, under a lock, and each instance recovers its own blocks.
  bool persist = false;
  /// Engine instances (1 ..), each a KvBlockManager with its own G1/G2/G3:
  /// request i goes to instance i % instances, or with assign_random to one
  /// drawn by a generator seeded with assign_seed (the same on every run).
  std::size_t instances = 1;
  bool assign_random = false;
  std::uint64_t assign_seed = 1;
  /// A router places the requests instead (replay/cluster.h): the instances
  /// publish their KV events, an indexer consumes them, and the router
  /// chooses by them (kv) or round-robin or at random, with simulated load.
  std::optional<ClusterConfig> router;
  /// G4 shared by every instance: Redis URLs (empty: none, the instances
  /// share nothing). Every block that lands in an instance's G2 is written
  /// through to G4 and has landed before the next request starts.
  std::vector<std::string> remote_urls;
  /// The G4 user namespace; "" = a fresh one per run, so that keys of
  /// earlier runs on the same server are not seen and the figures repeat.
  std::string remote_namespace;
  /// The savings estimate's inputs; block_bytes is filled in by run_replay.
  SavingsInputs savings;
  std::uint32_t min_frequency = 0;       ///< offload policy of both boundaries
  bool hold_queued_blocks = false;       ///< PipelineConfig::hold_queued_blocks
  std::filesystem::path disk_directory;  ///< must exist when disk is configured
  bool move_bytes = true;
  bool realtime = false;
  double speed = 1.0;
  /// Where every series goes (default: a new registry).
  std::shared_ptr<prometheus::Registry> metrics_registry;
  /// Called every `progress_every` requests and once at the end.
  std::function<void(std::size_t done, std::size_t total)> progress;
  std::size_t progress_every = 256;
  /// When set and true, the replay stops before its next request (Ctrl-C); a
  /// realtime wait for the next request's timestamp looks at it every 10 ms.
  const std::atomic<bool>* stop = nullptr;
  /// Called once after the last request, with every block released and the
  /// pipelines drained, while the manager (and its series) still exist.
  std::function<void(KvBlockManager&)> on_finished;
  /// > 0: replay the trace again and again, through the same manager, until
  /// this many seconds have passed (a soak run); on_pass runs after each pass.
  double soak_seconds = 0;
  std::function<void(std::size_t pass, const ReplayResult& so_far, KvBlockManager&)> on_pass;
};

/// The tiers with a pool, in report order: the rows of the per-tier tables
/// (G4, shared by the instances, has its own row where there is one).
inline constexpr std::array<TierId, 3> kPoolTiers = {TierId::kG1, TierId::kG2, TierId::kG3};

/// The bytes moved along one path between tiers.
struct PathStats {
  std::string name;  ///< "G1->G2", "G2->G3", "G2->G1", "G3->G1"
  std::uint64_t blocks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t failed_blocks = 0;
};

/// What a replay did.
struct ReplayResult {
  std::string trace;  ///< trace source
  std::uint32_t block_tokens = 0;
  std::size_t block_bytes = 0;        ///< bytes of one block
  TierArray<std::size_t> capacity{};  ///< blocks per pooled tier (0: absent; G4: 0)
  std::string eviction;
  std::string device_to_host;
  std::string host_to_disk;
  bool move_bytes = false;
  bool hold_queued_blocks = false;
  bool overlap_offload = false;
  std::string model;     ///< the --model preset, or "" (the layout options)
  bool persist = false;  ///< G3 kept across runs
  /// Blocks a persistent G3 held at the start (all instances' together).
  std::uint64_t recovered_blocks = 0;
  SavingsInputs savings_inputs;  ///< the cost model of the savings estimate
  bool device_emulated = false;
  bool bytes_checked = false;  ///< pattern written and verified

  std::uint64_t requests = 0;
  std::uint64_t blocks = 0;               ///< prompt blocks asked for
  std::uint64_t tokens = 0;               ///< prompt tokens asked for
  TierArray<std::uint64_t> hit_blocks{};  ///< prefix blocks found, per tier (G4: only there)
  TierArray<std::uint64_t> hit_tokens{};  ///< their tokens (tier split by block order, see .cpp)
  std::uint64_t computed_blocks = 0;      ///< allocated in G1 and "computed"
  std::uint64_t uncached_blocks = 0;      ///< G1 had no room
  std::uint64_t onboard_failed = 0;       ///< onboarding copies that failed
  std::uint64_t onboard_no_space = 0;     ///< blocks found below G1 that did not fit
  std::uint64_t verified_blocks = 0;
  std::uint64_t verify_failures = 0;     ///< blocks whose bytes were wrong (must be 0)
  TierArray<std::uint64_t> evictions{};  ///< per pooled tier (KvBlockManager::stats())
  std::vector<PathStats> paths;          ///< G1->G2, G2->G3, G2->G1, G3->G1
  /// Write-through copies lost because the source evicted the block before
  /// its copy started (G1->G2, G2->G3); 0 unless overlap_offload.
  std::array<std::uint64_t, 2> lost_to_lag{};
  /// Every counting engine's totals (KvBlockManagerStats::transfers), by its name.
  std::map<std::string, PathStats> engine_paths;
  /// Instances and the shared G4 (ReplayConfig::instances, remote_urls).
  std::size_t instances = 1;
  bool remote = false;
  /// G4's stats, summed over the instances (replay/remote_refusal.h); none without G4.
  std::optional<RemoteStoreStats> remote_stats;
  /// Per instance (only with instances > 1): what it was asked and where it found it.
  struct InstanceFigures {
    std::uint64_t requests = 0;
    std::uint64_t blocks = 0;
    TierArray<std::uint64_t> hit_blocks{};
    std::uint64_t recovered_blocks = 0;  ///< blocks its persistent G3 held at the start
  };
  std::vector<InstanceFigures> per_instance;
  /// The router's figures (ReplayConfig::router).
  std::optional<ClusterFigures> cluster;
  double wall_seconds = 0;
  /// CPU time of the whole process (every thread) over the same span as wall_seconds: the
  /// work the replay did, which a loaded machine stretches far less than the wall time.
  double cpu_seconds = 0;
  std::string audit;  ///< KvBlockManager::audit() at the end ("" = balanced)

  [[nodiscard]] std::uint64_t hits() const noexcept { return total(hit_blocks); }
  [[nodiscard]] std::uint64_t hit_token_count() const noexcept { return total(hit_tokens); }
  [[nodiscard]] double block_hit_ratio() const noexcept {
    return blocks == 0 ? 0.0 : static_cast<double>(hits()) / static_cast<double>(blocks);
  }
  [[nodiscard]] double token_hit_ratio() const noexcept {
    return tokens == 0 ? 0.0 : static_cast<double>(hit_token_count()) / static_cast<double>(tokens);
  }
};

/// Replays `trace` through a KvBlockManager built from `config`. Throws
/// UsageError for an invalid configuration.
[[nodiscard]] ReplayResult run_replay(const Trace& trace, const ReplayConfig& config);

/// Builds the KvBlockManagerConfig run_replay uses (exposed for tests).
[[nodiscard]] KvBlockManagerConfig manager_config(const ReplayConfig& config,
                                                  std::uint32_t block_tokens);

/// Returns the G3 directory of instance `index`: disk_directory itself,
/// unless G3 persists over several instances; then its subdirectory
/// "instance-<index>".
[[nodiscard]] std::filesystem::path instance_disk_directory(const ReplayConfig& config,
                                                            std::size_t index);

}  // namespace kvbm::replay
