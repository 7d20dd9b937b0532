// router/options.h: the command line of kvbm-router (docs/router.md, "The router process").
//
//   kvbm-router --listen 127.0.0.1:8000 --block-size 16 --policy kv
//       --instance 'engine-0=tcp://engine-0:5557;replay=tcp://engine-0:5558'
//       --instance engine-1=tcp://engine-1:5557
//
// parse_router_options() turns argv into RouterProcessOptions, or throws
// std::invalid_argument with a message that names the flag and says what it
// wants. Nothing here opens a socket.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/events/zmq_event_subscriber.h"
#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/router/kv_router.h"

namespace kvbm::router_process {

/// Everything kvbm-router is started with.
struct RouterProcessOptions {
  std::string listen_address = "127.0.0.1";
  int listen_port = 8000;  ///< 0: any free port (printed on stdout)
  int http_threads = 4;    ///< CivetWeb worker threads
  /// The engines' event publishers (EventSource::name is the instance's name).
  std::vector<events::EventSource> instances;
  router::KvRouterOptions router;  ///< policy, block size, weights (metrics_registry unset)
  /// What the index keys blocks by: the engines' hashes (POST /route sends
  /// "hashes"), or their tokens (it sends "token_ids"; the events must carry them).
  router::BlockKey key = router::BlockKey::kEngineHash;
  /// A hybrid model's KV cache groups (--model-groups PRESET or --model-groups-file
  /// PATH, kvbm-replay's presets and file format); empty for a dense model. With
  /// groups the block size is their hash block (hash_block_size()).
  std::vector<KvCacheGroupSpec> groups;
  std::string model_groups;  ///< the preset's name or the file's path; "" for a dense model
  std::chrono::milliseconds silence_timeout{0};  ///< an instance silent this long is stale
  std::chrono::milliseconds replay_timeout{1000};
  /// Routed requests kept for /finish at most; beyond, /route answers 503.
  std::size_t max_in_flight = 1'000'000;
  /// A request body over this many bytes is answered 413 unread.
  std::size_t max_body_bytes = 64u << 20;
  /// A JSON body nested deeper (arrays and objects) is answered 400 unparsed.
  std::size_t max_json_depth = 32;
  /// G4's servers, checked for /health (--remote, as kvbm-replay's; g4_health.h);
  /// empty: no check.
  std::vector<std::string> remote;
  std::chrono::milliseconds remote_check{1000};  ///< between two G4 checks
  bool help = false;
};

/// Parses `--instance NAME=ENDPOINT[;replay=ENDPOINT][;topic=PREFIX]`.
/// Throws std::invalid_argument saying what is wrong.
[[nodiscard]] events::EventSource parse_instance(std::string_view spec);

/// Parses argv (argv[0] is the program). Throws std::invalid_argument.
[[nodiscard]] RouterProcessOptions parse_router_options(int argc, const char* const* argv);

/// Returns the --help text.
[[nodiscard]] std::string router_usage();

}  // namespace kvbm::router_process
