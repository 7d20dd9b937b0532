// src/facade/onboard_plan.h (internal): an onboarding's plan, the walk over the rows as runs.
//
// A plan cuts a prefix into runs: consecutive positions that come from one
// tier, in position order (Run{tier, first, count}; G1: hits). The Planner
// makes it from presence alone, taking nothing:
//
//   local(hashes)  each position from the fastest local tier holding it, up
//                  to the first position none holds; no round trip, so the
//                  caller's thread walks it;
//   rest(hashes)   the same over every tier: the positions no local tier
//                  holds are asked of the remote tiers (one round trip per
//                  run of them), up to the first position no tier holds; off
//                  the caller's thread (Tier::remote()).
//
// Onboarding (onboarding.h) takes each run in order, one OnboardRecord per
// position, and copies it up to G1 with its tier's engine; probe() counts a
// plan and locate() answers every position (past misses too).
//
// Lifetime: the rows outlive the Planner.
// Thread-safety: every member from any thread (the rows' own).

#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "facade/tier.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/tier.h"

namespace kvbm::facade {

/// Consecutive positions of a prefix that come from one tier.
struct Run {
  TierId tier = TierId::kG1;
  std::size_t first = 0;  ///< its first position
  std::size_t count = 0;  ///< how many positions
  [[nodiscard]] std::size_t end() const noexcept { return first + count; }
  friend bool operator==(const Run&, const Run&) = default;
};

/// A prefix's runs, in position order (the first starts at 0, each where the last ended).
using Plan = std::vector<Run>;

/// The positions a plan covers.
[[nodiscard]] inline std::size_t covered(const Plan& plan) noexcept {
  return plan.empty() ? 0 : plan.back().end();
}

/// Makes plans from the rows; see the file comment.
class Planner {
 public:
  /// `rows`: every present tier (G1 among them), fastest first.
  explicit Planner(const Rows& rows);

  /// True when a remote tier (G4) is present: rest() asks it.
  [[nodiscard]] bool remote() const noexcept { return !remote_.empty(); }
  /// The local tiers' plan of `hashes`.
  [[nodiscard]] Plan local(std::span<const SequenceHash> hashes) const;
  /// Every tier's plan of `hashes` (remote tiers asked; never on the caller's thread).
  [[nodiscard]] Plan rest(std::span<const SequenceHash> hashes) const;
  /// Per position, the fastest tier holding it (remote tiers asked once each
  /// for what no local tier holds), or nullopt.
  [[nodiscard]] std::vector<std::optional<TierId>> locate(
      std::span<const SequenceHash> hashes) const;

 private:
  // Per position, the fastest local tier holding it (nullopt: none does).
  using Fastest = std::vector<std::optional<TierId>>;
  Fastest fastest(std::span<const SequenceHash> hashes, bool stop_at_miss) const;
  std::optional<Run> remote_run(std::span<const SequenceHash> hashes, std::size_t first,
                                std::size_t end) const;

  std::vector<Tier*> local_;   // the present local rows, fastest first (G1 first)
  std::vector<Tier*> remote_;  // the present remote rows, fastest first
};

}  // namespace kvbm::facade
