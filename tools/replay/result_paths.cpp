#include "replay/result_paths.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace kvbm::replay {

namespace {

// The report's four paths, and the default name of an engine built by hand for each
// (docs/metrics.md, "Names of tiers and paths"); the facade names its engines by
// copy_path_name().
struct ReportPath {
  TierId from, to;
  const char* engine_default;
};
constexpr ReportPath kReportPaths[] = {
    {TierId::kG1, TierId::kG2, "device_to_host"},
    {TierId::kG2, TierId::kG3, "host_to_disk"},
    {TierId::kG2, TierId::kG1, "host_to_device"},
    {TierId::kG3, TierId::kG1, "disk_to_device"},
};

// "G1->G2": the report's name of the path from `from` to `to`.
std::string report_name(TierId from, TierId to) {
  return std::string(to_string(from)) + "->" + std::string(to_string(to));
}

// The report's name of the path an engine named `engine_path` copies along ("" when none).
std::string path_name(const std::string& engine_path) {
  for (const ReportPath& p : kReportPaths) {
    if (engine_path == copy_path_name(p.from, p.to) || engine_path == p.engine_default) {
      return report_name(p.from, p.to);
    }
  }
  return {};
}

}  // namespace

void collect_paths(const KvBlockManagerStats& stats, ReplayResult& r,
                   const std::array<std::uint64_t, 2>& onboarded_blocks) {
  for (const TransferPathStats& t : stats.transfers) {
    auto& p = r.engine_paths[t.path];
    p.name = t.path;
    p.blocks += t.counts.blocks;
    p.bytes += t.counts.bytes;
    p.failed_blocks += t.counts.failed_blocks;
  }

  // The four tier paths. Offloads: what the engines counted on the path (or
  // the boundary's transferred blocks when no engine counts it); onboarding:
  // the OnboardHandle counts.
  r.paths.clear();
  for (const ReportPath& p : kReportPaths) r.paths.push_back({report_name(p.from, p.to), 0, 0, 0});
  bool engine_named[4] = {false, false, false, false};
  for (const auto& [engine, p] : r.engine_paths) {
    const std::string n = path_name(engine);
    for (std::size_t i = 0; i < r.paths.size(); ++i) {
      if (r.paths[i].name == n) {
        r.paths[i].blocks += p.blocks;
        r.paths[i].bytes += p.bytes;
        r.paths[i].failed_blocks += p.failed_blocks;
        engine_named[i] = true;
      }
    }
  }
  // Without counting engines (metadata only), the offloads every mechanism of
  // the boundary made: write-through, on-eviction and explicit.
  const TierId uppers[2] = {TierId::kG1, TierId::kG2};
  for (std::size_t i = 0; i < 2; ++i) {
    const BoundaryStats* b = stats.boundary(uppers[i]);
    if (!engine_named[i]) {
      r.paths[i].blocks = b != nullptr ? b->counts.transferred : 0;
      r.paths[i].bytes = r.paths[i].blocks * r.block_bytes;
    }
    r.lost_to_lag[i] = b != nullptr ? b->counts.evicted : 0;
  }
  for (std::size_t i = 0; i < 2; ++i) {
    // Onboarding may share an engine with another path (G2->G1 and G1->G2 on
    // one host engine); the handle counts are exact for each direction.
    auto& p = r.paths[2 + i];
    if (!engine_named[2 + i] || p.blocks != onboarded_blocks[i]) {
      p.blocks = onboarded_blocks[i];
      p.bytes = onboarded_blocks[i] * r.block_bytes;
    }
  }
  if (!r.move_bytes) {
    for (auto& p : r.paths) p.bytes = 0;  // nothing was copied
  }
}

}  // namespace kvbm::replay
