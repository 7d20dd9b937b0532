// replay/options.h: the command line of kvbm-replay.
//
// parse_options() turns argv into Options without side effects (no file is
// opened), so tests can check every option; usage() is the --help text.
// docs/replay.md describes each option.
//
// Thread-safety: plain functions over values.

#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/eviction/backend.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/router/kv_router.h"

namespace kvbm::replay {

/// A tier size from the command line: blocks, bytes or "unlimited" (G1 only).
struct SizeOption {
  std::size_t blocks = 0;
  std::size_t bytes = 0;
  bool unlimited = false;  ///< room for every unique block of the trace
};

/// Every option of kvbm-replay; the defaults are the tool's defaults.
struct Options {
  std::string trace;                 ///< "" = the shipped conversation trace
  std::uint32_t block_tokens = 512;  ///< tokens per hash id and per block
  // Model layout of one block (block bytes = layers x outer x block_tokens x inner x dtype).
  std::uint32_t layers = 2;
  std::uint32_t outer_dim = 2;
  std::uint32_t inner_dim = 4;
  std::uint32_t dtype_bytes = 2;
  SizeOption device{.blocks = 1'000};
  SizeOption host{.blocks = 10'000};
  SizeOption disk{.blocks = 50'000};
  bool host_given = false;  ///< --host-blocks or --host-bytes was on the command line
  bool disk_given = false;  ///< --disk-blocks or --disk-bytes was on the command line
  EvictionPolicy eviction = EvictionPolicy::kLru;
  std::string model;  ///< a preset (model_preset.h) fixing the layout; "" = the options above
  std::string model_groups;          ///< a hybrid preset (hybrid_preset.h): the hybrid replay
  std::string model_groups_file;     ///< a JSON group list (hybrid_preset.h): the hybrid replay
  std::string hybrid_cache = "all";  ///< all or tails (hybrid_replay.h: register_at_end)
  std::string hybrid_weight;         ///< G1 weight of every non-full group ("" = the model's)
  std::string hybrid_snapshots = "every_block";  ///< every_block, every:K or request_end
  OffloadMode g1_g2 = OffloadMode::kOnEviction;
  OffloadMode g2_g3 = OffloadMode::kOnEviction;
  std::uint32_t min_frequency = 0;
  bool hold_queued_blocks = false;
  bool overlap_offload = false;     ///< write-through copies run behind the requests
  bool persist = false;             ///< keep G3 in --disk-dir across runs (a warm restart)
  std::uint32_t instances = 1;      ///< engine instances, each with its own G1/G2/G3
  bool assign_random = false;       ///< requests to instances at random (seeded), not round robin
  bool assign_given = false;        ///< --assign was on the command line
  std::vector<std::string> remote;  ///< G4 Redis URLs shared by the instances (empty: none)
  std::string remote_namespace;     ///< G4 namespace ("" = fresh per run)
  /// A router places the requests (replay/cluster.h); unset: --assign.
  std::optional<router::RoutePolicy> router;
  bool router_zmq = false;        ///< the events travel over ZeroMQ on loopback
  bool router_no_events = false;  ///< no events: the router remembers where it sent prefixes
  double router_load_weight = router::KvRouterOptions{}.load_weight;  ///< its default
  /// KvRouterOptions::tier_cost for G2, G3, G4 (unset: the router's defaults).
  std::optional<std::array<double, 3>> router_tier_cost;
  std::vector<std::uint32_t> sweep_instances;      ///< instance counts; empty = no cluster sweep
  std::vector<router::RoutePolicy> sweep_routers;  ///< routers of the cluster sweep
  double prefill_tokens_per_s = 0;  ///< savings estimate; 0 = the model's assumed figure
  double g2_gb_per_s = 25;          ///< savings estimate: G2 -> G1 bandwidth
  double g3_gb_per_s = 6;           ///< savings estimate: G3 -> G1 bandwidth
  std::string disk_dir;             ///< "" = a temporary directory, removed at exit
  bool metadata_only = false;
  bool realtime = false;
  double speed = 1.0;
  std::size_t limit = 0;          ///< 0 = every request
  double soak_seconds = 0;        ///< > 0: replay the trace over and over for this long
  std::vector<SizeOption> sweep;  ///< G1 sizes; empty = one replay
  std::string plot = "kvbm-replay-sweep.svg";
  bool plot_given = false;  ///< --plot was on the command line
  bool json = false;
  bool quiet = false;
  bool strict = false;
  std::optional<int> metrics_port;
  std::string metrics_address = "127.0.0.1";
  bool help = false;
};

/// Parses argv[1..argc). Returns the options, or sets `error` (and returns
/// defaults) naming the offending argument.
[[nodiscard]] Options parse_options(int argc, const char* const* argv, std::string& error);

/// Returns the --help text.
[[nodiscard]] std::string usage();

/// Parses "4096", "64KiB", "2GiB", "1.5G", "10MB" (binary unless the suffix is
/// kB/MB/GB/TB). Returns nullopt when malformed.
[[nodiscard]] std::optional<std::size_t> parse_bytes(std::string_view text);

/// Parses a tier size: a block count, a byte size with a unit, or "unlimited".
[[nodiscard]] std::optional<SizeOption> parse_size(std::string_view text, bool allow_unlimited);

/// Returns the shipped trace: the source tree's copy, else the installed one,
/// else "" when neither exists.
[[nodiscard]] std::string default_trace_path();

}  // namespace kvbm::replay
