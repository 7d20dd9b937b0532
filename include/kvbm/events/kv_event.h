// kvbm/events/kv_event.h: KV cache events and their wire encoding.
//
// A router that places requests by prefix reuse needs to know which blocks
// each worker holds. kvbm tells it with three events, per tier ("medium"):
//
//   BlockStored       blocks registered under new sequence hashes
//   BlockRemoved      registered blocks that left the pool
//   AllBlocksCleared  the worker dropped everything it held
//
// Events travel in batches (KvEventBatch) encoded as msgpack in the layout
// vLLM's KV event publisher uses, so a router that reads vLLM's events reads
// these. Two layouts exist because vLLM changed its own:
//
//   WireLayout::kMap    (the default; vLLM since its events dropped
//                       array_like) the batch stays a positional array
//                       [ts, events, data_parallel_rank]; each event is a map
//                       whose "type" key names its class, then one key per field
//   WireLayout::kArray  (vLLM before that) every struct a positional array, an
//                       event's class name first: ["BlockStored", hashes,
//                       parent, tokens, block_size, lora_id, medium, lora_name]
//
// A hybrid model's events name their KV cache group as vLLM's do: a
// BlockStored its group_idx, kv_cache_spec_kind and
// kv_cache_spec_sliding_window, a BlockRemoved its group_idx (see
// kvbm/events/event_group.h). Unset, they are left out of the wire form (as
// msgspec's omit_defaults leaves out a None), so a dense model's events are
// byte for byte what they were; set, they follow vLLM's field order (after
// lora_name and extra_keys, which kvbm writes as nil in the array layout).
//
// kvbm/events/kv_event_decoder.h reads both, and vLLM's own batches.
// docs/events.md has the byte-level description and the subscriber's side.
//
// Thread-safety: plain value types and a pure function.

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kvbm/tier.h"

namespace kvbm::events {

/// G1, device memory: vLLM's "GPU" (a nil or absent medium means the same).
inline constexpr const char* kMediumGpu = "GPU";
/// G2, host memory: vLLM's "CPU" (its CPU offloading tier).
inline constexpr const char* kMediumCpu = "CPU";
/// G3, local disk: vLLM's "STORAGE" (its file-system offloading tier, since
/// vLLM 0.27; Dynamo's router maps it, and the older "DISK", to its disk tier).
inline constexpr const char* kMediumDisk = "STORAGE";
/// The name kvbm published for G3 before vLLM settled on "STORAGE"; the
/// decoder turns it into kMediumDisk.
inline constexpr const char* kMediumDiskLegacy = "DISK";
/// G4, the remote store shared by instances. vLLM has no medium for a remote
/// store (it marks its object-store tier "STORAGE" with locality "REMOTE");
/// kvbm names it "REMOTE", which Dynamo's router maps to its external tier.
inline constexpr const char* kMediumRemote = "REMOTE";

/// The medium a tier's events name: kMediumGpu, kMediumCpu, kMediumDisk or kMediumRemote.
[[nodiscard]] constexpr const char* tier_medium(TierId t) noexcept {
  switch (t) {
    case TierId::kG1:
      return kMediumGpu;
    case TierId::kG2:
      return kMediumCpu;
    case TierId::kG3:
      return kMediumDisk;
    default:
      return kMediumRemote;
  }
}

/// Blocks registered under new hashes; block_hashes form one parent chain.
struct BlockStored {
  std::vector<std::uint64_t> block_hashes;         ///< each block's sequence hash, in chain order
  std::optional<std::uint64_t> parent_block_hash;  ///< parent of the first block; nil for a root
  std::vector<std::uint32_t> token_ids;            ///< the blocks' tokens; empty when unknown
  std::uint32_t block_size = 0;                    ///< tokens per block
  std::optional<std::int64_t> lora_id;             ///< LoRA adapter id; nil for the base model
  std::string medium;                              ///< "GPU", "CPU", "STORAGE", "REMOTE", ...
  /// The KV cache group the blocks belong to (vLLM's group_idx); nil for a dense model.
  std::optional<std::uint32_t> group_idx;
  /// The group's kind in vLLM's names ("full_attention", "sliding_window",
  /// "chunked_local_attention", "mamba", ...: kvbm/events/event_group.h); nil when unnamed.
  std::optional<std::string> kv_cache_spec_kind;
  /// W of a sliding-window group (vLLM's kv_cache_spec_sliding_window); nil otherwise.
  std::optional<std::uint32_t> kv_cache_spec_sliding_window;
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};

/// Registered blocks that left the pool.
struct BlockRemoved {
  std::vector<std::uint64_t> block_hashes;
  std::string medium;
  std::optional<std::uint32_t> group_idx;  ///< the blocks' KV cache group; nil for a dense model
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};

/// Everything the worker held is gone. The wire form carries no medium (vLLM's
/// has none); `medium` is kept for in-process sinks only.
struct AllBlocksCleared {
  std::string medium;
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};

/// One KV cache event.
using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

/// Events published together under one sequence number. An empty batch is a
/// heartbeat (KvEventPublisherOptions::heartbeat_interval).
struct KvEventBatch {
  double ts = 0.0;                                 ///< seconds since the Unix epoch
  std::vector<KvEvent> events;                     ///< in the order the pools changed
  std::optional<std::int32_t> data_parallel_rank;  ///< the worker's DP rank; left out when unset
  friend bool operator==(const KvEventBatch&, const KvEventBatch&) = default;
};

/// Which msgpack layout of vLLM's events to write; see the file comment.
enum class WireLayout {
  kArray,  ///< positional arrays throughout (vLLM's original layout)
  kMap,    ///< tagged maps for events inside an array batch (vLLM's current layout)
};

/// Returns `batch` encoded as msgpack in `layout`: the batch is
/// [ts, events, data_parallel_rank], or [ts, events] when the rank is unset
/// (msgspec's omit_defaults leaves out a trailing default).
[[nodiscard]] std::vector<std::uint8_t> encode_kv_event_batch(const KvEventBatch& batch,
                                                              WireLayout layout);

}  // namespace kvbm::events
