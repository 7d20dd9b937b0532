// replay/report.h: what kvbm-replay prints and writes.
//
//   print_summary   the human-readable table (stdout)
//   result_json     the same numbers for machines (--json)
//   json_text       JSON text that is valid whatever bytes its strings hold
//   sweep_svg       the hit-ratio-versus-G1-capacity plot of a sweep, as SVG
//   convert_to_png  an SVG to PNG through rsvg-convert or ImageMagick, if found
//
// Thread-safety: plain functions over values.

#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "replay/replay.h"

namespace kvbm::replay {

/// The trace's figures printed beside a result.
struct TraceSummary {
  std::string source;
  std::size_t lines = 0;
  std::size_t invalid_lines = 0;
  std::size_t unique_blocks = 0;
};

/// Prints the summary table of one replay.
void print_summary(std::ostream& out, const TraceSummary& trace, const ReplayResult& r);

/// Returns the result as a JSON object (see docs/replay.md for the fields).
[[nodiscard]] nlohmann::json result_json(const ReplayResult& r);
/// Returns {"source", "lines", "invalid_lines", "unique_blocks"}.
[[nodiscard]] nlohmann::json trace_json(const TraceSummary& t);

/// Returns `j` as JSON text indented by `indent` (-1: one line). Strings that
/// are not valid UTF-8 (a trace path may be any bytes) have each invalid byte
/// replaced by U+FFFD, so the text is always valid JSON; the tool writes all
/// its JSON through this.
[[nodiscard]] std::string json_text(const nlohmann::json& j, int indent = 2);

/// One replay of a sweep.
struct SweepPoint {
  std::string label;          ///< "1000", "unlimited"
  std::size_t g1_blocks = 0;  ///< the G1 capacity replayed
  ReplayResult result;
};

/// Returns a standalone SVG document: block hit ratio (G1 alone, and all
/// tiers) against G1 capacity on a logarithmic axis.
[[nodiscard]] std::string sweep_svg(const std::vector<SweepPoint>& points,
                                    const std::string& title);

/// Prints the sweep as a table.
void print_sweep(std::ostream& out, const std::vector<SweepPoint>& points);

/// Converts `svg` to a PNG beside it with rsvg-convert, else ImageMagick's
/// convert, if either is on PATH and succeeds. Returns the PNG's path.
[[nodiscard]] std::optional<std::filesystem::path> convert_to_png(const std::filesystem::path& svg);

/// Returns `s` with &, <, > and " escaped for XML text and attributes.
[[nodiscard]] std::string xml_escape(const std::string& s);

/// Formats 1234567 as "1,234,567".
[[nodiscard]] std::string group_digits(std::uint64_t v);

}  // namespace kvbm::replay
