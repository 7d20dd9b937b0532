// kvbm/onboard_plan.h: load or recompute, decided per onboarding before any copy starts.
//
// KvBlockManager::plan_onboard(hashes, options) looks where each block of the
// prefix is (the walk onboard() makes; with G4, its round trip, which with a
// deadline is asked off the caller's thread and waited for only until the
// deadline: a G4 that has not answered by then counts as holding nothing) and, from
// the measured costs (kvbm/transfer_costs.h), decides the cut: the leading
// part of the prefix to load, the rest to compute. It takes and copies
// nothing. onboard(hashes, options) makes the same plan and onboards up to
// its cut; the handle's plan() is the plan it followed.
//
// The cut k (blocks of the prefix to hand back) minimizes
//
//     load_time(k) + recompute_time(N - k)       (N = hashes.size())
//
// loading and then computing the rest being sequential. load_time(k) is the
// longest of the copies it needs, which run side by side (one batch per
// source tier): G2 -> G1, G3 -> G1, and for G4 its fetch into G2 followed by
// G2 -> G1; G1 hits are free. recompute_time(m) is the prefill estimate for
// m x block_size tokens. With a deadline, only cuts whose load tail (p99)
// fits in it are taken. Ties go to the longer load (fewer tokens to compute).
//
// Unknowns. A path with no measured batch yet costs nothing in the plan:
// auto then loads what that tier holds (as onboard() always did), and the
// plan says estimates_known = false. With no prefill estimate (none
// configured, none reported), recomputing counts as slower than any load:
// auto loads all that the deadline allows.
//
// Modes: kAuto (the above), kLoadAll (every block found, whatever it costs:
// onboard(hashes) without options), kRecomputeAll (no copy: only the G1 hits
// at the head of the prefix, which cost nothing, are handed back). The
// deadline is a budget for loads, from the call: the plan takes only cuts
// whose loads fit it, and onboard(hashes, options) holds it while copies run
// (the handle is cut at the call's time + deadline: what arrived is the
// prefix, the rest is abandoned; kvbm/kv_block_manager.h, OnboardHandle).
//
// Thread-safety: plain values.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kvbm/tier.h"
#include "kvbm/tier_array.h"

namespace kvbm {

/// How an onboarding chooses what to load; see the file comment.
enum class OnboardMode : std::uint8_t {
  kAuto,          ///< load what arrives sooner than it could be recomputed
  kLoadAll,       ///< load every block found (onboard(hashes) without options)
  kRecomputeAll,  ///< copy nothing: only the leading G1 hits
};
/// Returns "auto", "load_all" or "recompute_all".
[[nodiscard]] std::string_view to_string(OnboardMode m) noexcept;
/// Parses the names of to_string(); throws UsageError listing them otherwise.
[[nodiscard]] OnboardMode parse_onboard_mode(std::string_view name);

/// What an onboarding is asked to do.
struct OnboardOptions {
  OnboardMode mode = OnboardMode::kAuto;
  /// The longest the loads may take (their p99), from the call; none: no limit.
  std::optional<std::chrono::nanoseconds> deadline;
};

/// An onboarding's plan; see the file comment.
struct OnboardPlan {
  OnboardMode mode = OnboardMode::kAuto;
  std::size_t blocks = 0;                   ///< blocks asked for (hashes.size())
  TierArray<std::size_t> found{};           ///< the prefix found, per tier it is in (probe())
  TierArray<std::size_t> load{};            ///< the part to hand back, per tier (G1: hits, no copy)
  std::size_t compute_blocks = 0;           ///< blocks after it, to compute
  std::size_t compute_tokens = 0;           ///< their tokens (compute_blocks x block_size)
  std::chrono::nanoseconds load_time{};     ///< expected time of the loads
  std::chrono::nanoseconds load_tail{};     ///< their p99
  std::chrono::nanoseconds compute_time{};  ///< expected time to compute the rest
  std::chrono::nanoseconds expected_time{};  ///< load_time + compute_time
  /// False when a path loaded from, or the prefill, had no estimate.
  bool estimates_known = true;
  std::optional<std::chrono::nanoseconds> deadline;  ///< as asked

  /// Returns the blocks handed back: the cut (hits and copies).
  [[nodiscard]] std::size_t loaded() const noexcept { return total(load); }
  /// Returns the blocks copied into G1 (found below it).
  [[nodiscard]] std::size_t copies() const noexcept { return loaded() - load[TierId::kG1]; }
  /// Returns the prefix found in any tier (what load-all hands back).
  [[nodiscard]] std::size_t found_total() const noexcept { return total(found); }
};

}  // namespace kvbm
