// replay/hybrid_report.h: what kvbm-replay --model-groups prints and writes.
//
//   print_hybrid   the table of a hybrid replay beside its full-attention baseline (stdout)
//   hybrid_json    the same figures for machines (--json; docs/replay.md lists the keys)
//   run_hybrid_command  the --model-groups / --model-groups-file command itself
//
// Every figure is deterministic except wall_seconds, which only the JSON carries.
//
// Thread-safety: plain functions over values.

#pragma once

#include <atomic>
#include <nlohmann/json_fwd.hpp>
#include <ostream>

#include "replay/hybrid_replay.h"
#include "replay/options.h"
#include "replay/report.h"

namespace kvbm::replay {

/// Prints the per-group table of a hybrid replay and its baseline.
void print_hybrid(std::ostream& out, const TraceSummary& trace, const HybridReplayResult& r);

/// Returns the result as a JSON object.
[[nodiscard]] nlohmann::json hybrid_json(const HybridReplayResult& r);

/// The configuration of the command line's hybrid replay: the model (preset or file;
/// throws UsageError when the file is malformed), G1 from --device-blocks (trace blocks
/// of the baseline's layout) or --device-bytes, G2 and G3 likewise when given
/// (--host-*, --disk-*), --eviction, --g1-g2, --g2-g3.
[[nodiscard]] HybridReplayConfig hybrid_config(const Options& o, std::uint32_t trace_block_tokens);

/// Returns "" or what is wrong with --model-groups / --model-groups-file among the other
/// options (an unknown preset, both given, G3 without G2, or an option the hybrid replay
/// lacks).
[[nodiscard]] std::string check_model_groups(const Options& o);

/// Runs the hybrid replay of the options over `trace` and prints it (text or --json) on
/// `out`; returns the exit code (0, 1 when a pool is not balanced, 130 when stopped).
[[nodiscard]] int run_hybrid_command(const Options& o, const Trace& trace, const TraceSummary& ts,
                                     std::ostream& out, const std::atomic<bool>* stop);

}  // namespace kvbm::replay
