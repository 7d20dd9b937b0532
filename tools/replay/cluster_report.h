// replay/cluster_report.h: what kvbm-replay prints for a replay behind a router.
//
//   print_cluster        the router's lines under the summary (load spread,
//                        simulated time to first token, the index's figures)
//   cluster_json         the same for --json ("cluster")
//   print_cluster_sweep  a --sweep-instances run as a table
//   cluster_sweep_svg    its plot: block hit ratio against the instance
//                        count, one line per router (all tiers solid, G1
//                        alone dashed)
//
// Thread-safety: plain functions over values.

#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "replay/replay.h"

namespace kvbm::replay {

/// Prints the router's figures of `r` (nothing when it had no router).
void print_cluster(std::ostream& out, const ReplayResult& r);

/// Returns the figures as a JSON object.
[[nodiscard]] nlohmann::json cluster_json(const ClusterFigures& f);

/// One replay of a --sweep-instances run.
struct ClusterSweepPoint {
  std::uint32_t instances = 1;
  std::string router;  ///< "kv", "round_robin", "random"
  ReplayResult result;
};

/// Prints the sweep as a table, one row per replay.
void print_cluster_sweep(std::ostream& out, const std::vector<ClusterSweepPoint>& points);

/// Returns a standalone SVG document; see the file comment.
[[nodiscard]] std::string cluster_sweep_svg(const std::vector<ClusterSweepPoint>& points,
                                            const std::string& title);

}  // namespace kvbm::replay
