// replay/hybrid_preset.h: hybrid models' KV cache groups for kvbm-replay (--model-groups).
//
// A hybrid model's layers fall into KV cache groups (kvbm/groups/): full
// attention, sliding window, chunked local, recurrent state. The presets carry
// published geometries (layers, KV heads, head sizes, windows, chunks, state
// sizes), each cited to its model's config.json; --model-groups-file reads a
// model of one's own from a small JSON list:
//
//   [{"kind": "full", "tokens_per_block": 16, "bytes_per_block": 393216,
//     "layers": [1, 3, 5]},
//    {"kind": "sliding_window", "window": 128, "tokens_per_block": 16,
//     "bytes_per_block": 393216, "layers": [0, 2, 4]}]
//
// Fields of a group: "kind" (full, sliding_window, chunked_local,
// recurrent_state), "window" (sliding_window: W tokens), "chunk"
// (chunked_local: C tokens), "tokens_per_block", "bytes_per_block" (one
// block over all the group's layers; recurrent_state: one state snapshot),
// "layers" (layer indices), and optionally "name" (for the report) and
// "g1_weight" (a number > 0, default 1: see hybrid_replay.h, "G1's bytes").
// Unknown fields are refused, so a misspelt one is not silently ignored. Every
// error names the field (e.g. "groups[1].bytes_per_block: expected an
// integer >= 1, got -4").
//
// Thread-safety: constant data and plain functions.

#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/groups/kv_cache_group_spec.h"

namespace kvbm::replay {

/// A model as KV cache groups, with the share of G1 each group's pool gets.
struct HybridModel {
  std::string name;    ///< the preset's name, or the file's path
  std::string label;   ///< e.g. "gpt-oss-20b: 12 full + 12 sliding-window (128) layers"
  std::string source;  ///< where the geometry is published ("" for a file)
  std::vector<KvCacheGroupSpec> groups;
  /// Per group, its weight in the split of G1's bytes (hybrid_replay.h); 1 = as many
  /// tokens as every other group of weight 1.
  std::vector<double> g1_weights;
};

/// One preset: a name for --model-groups and the model it builds.
struct HybridPreset {
  std::string_view name;
  HybridModel (*build)();
};

/// Every preset, in the order --help lists them.
[[nodiscard]] std::span<const HybridPreset> hybrid_presets() noexcept;

/// Returns "gpt-oss-20b, gemma3-27b, ...": the presets' names.
[[nodiscard]] std::string hybrid_preset_names();

/// Returns the preset named `name`, or nullopt.
[[nodiscard]] std::optional<HybridModel> find_hybrid_preset(std::string_view name);

/// Returns "" when `name` is a preset, else "--model-groups: unknown preset '<name>';
/// known: <names>".
[[nodiscard]] std::string check_hybrid_preset(std::string_view name);

/// Parses a group list (the file comment's format). Throws UsageError naming the
/// field that is wrong, prefixed with `source`; the groups are validated as
/// validate_groups() does.
[[nodiscard]] HybridModel parse_model_groups(std::string_view json_text, const std::string& source);

/// Reads and parses a group file. Throws UsageError when it cannot be read or is malformed.
[[nodiscard]] HybridModel read_model_groups_file(const std::filesystem::path& path);

}  // namespace kvbm::replay
