// src/facade/onboard_cut.cpp: where an onboarding stops loading (facade/onboard_cut.h).

#include "facade/onboard_cut.h"

#include <algorithm>
#include <limits>

namespace kvbm::facade {
namespace {

using std::chrono::nanoseconds;

struct LoadTime {
  nanoseconds expected{};
  nanoseconds tail{};
  bool known = true;
};

// Adds `p` (a batch of `n` blocks) to a chain of copies one after another.
void then(LoadTime& chain, const TransferCostPrediction& p, std::size_t n) {
  if (n == 0) return;
  chain.known = chain.known && p.known;
  chain.expected += p.expected;
  chain.tail += p.tail;
}

// The loads of `c` blocks per tier: the copies of each tier side by side, a
// G4 block fetched into G2 and then copied up with G2's engine.
LoadTime load_time(const TierArray<std::size_t>& c, const CutCosts& k) {
  TierArray<LoadTime> per{};
  then(per[TierId::kG2], k.up[TierId::kG2].predict(c[TierId::kG2]), c[TierId::kG2]);
  then(per[TierId::kG3], k.up[TierId::kG3].predict(c[TierId::kG3]), c[TierId::kG3]);
  then(per[TierId::kG4], k.up[TierId::kG4].predict(c[TierId::kG4]), c[TierId::kG4]);
  then(per[TierId::kG4], k.up[TierId::kG2].predict(c[TierId::kG4]), c[TierId::kG4]);
  LoadTime out;
  for (const LoadTime& t : per) {
    out.expected = std::max(out.expected, t.expected);
    out.tail = std::max(out.tail, t.tail);
    out.known = out.known && t.known;
  }
  return out;
}

// Seconds to compute `blocks` blocks; unknown: more than any load.
double compute_seconds(std::size_t blocks, const CutCosts& k) {
  if (blocks == 0) return 0;
  if (!k.prefill.known) return std::numeric_limits<double>::infinity();
  const auto p = k.prefill.predict(blocks * k.block_size);
  return std::chrono::duration<double>(p.expected).count();
}

// The cut of an auto plan: the best k in [first, walk's end]; see the file comment.
std::size_t best_cut(const Plan& walk, std::size_t first, std::size_t blocks, const CutCosts& k,
                     const OnboardOptions& o) {
  TierArray<std::size_t> c{};
  std::size_t best = first;
  double best_cost = std::numeric_limits<double>::infinity();
  auto consider = [&](std::size_t cut) {
    const LoadTime t = load_time(c, k);
    if (cut > first && o.deadline && t.tail > *o.deadline) return;
    const double cost =
        std::chrono::duration<double>(t.expected).count() + compute_seconds(blocks - cut, k);
    if (cost <= best_cost || cut == first) {
      best_cost = cost;
      best = cut;
    }
  };
  std::size_t pos = 0;  // the cut `pos` loads the positions before it
  for (const Run& r : walk) {
    for (std::size_t i = 0; i < r.count; ++i, ++pos) {
      if (pos >= first) consider(pos);
      ++c[r.tier];
    }
  }
  consider(pos);
  return best;
}

}  // namespace

OnboardPlan choose_cut(const Plan& walk, std::size_t blocks, const CutCosts& costs,
                       const OnboardOptions& options) {
  OnboardPlan plan;
  plan.mode = options.mode;
  plan.blocks = blocks;
  plan.deadline = options.deadline;
  for (const Run& r : walk) plan.found[r.tier] += r.count;
  const std::size_t found = covered(walk);
  const std::size_t hits =
      !walk.empty() && walk.front().tier == TierId::kG1 ? walk.front().count : 0;
  std::size_t cut = found;
  if (options.mode == OnboardMode::kRecomputeAll) cut = hits;
  if (options.mode == OnboardMode::kAuto) cut = best_cut(walk, hits, blocks, costs, options);
  for (const Run& r : walk) {
    if (r.first >= cut) break;
    plan.load[r.tier] += std::min(r.end(), cut) - r.first;
  }
  const LoadTime t = load_time(plan.load, costs);
  plan.load_time = t.expected;
  plan.load_tail = t.tail;
  plan.compute_blocks = blocks - cut;
  plan.compute_tokens = plan.compute_blocks * costs.block_size;
  plan.compute_time = costs.prefill.predict(plan.compute_tokens).expected;
  plan.expected_time = plan.load_time + plan.compute_time;
  plan.estimates_known = t.known && costs.prefill.known;
  return plan;
}

}  // namespace kvbm::facade
