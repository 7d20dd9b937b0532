// src/facade/onboard_plan.cpp: an onboarding's plan (facade/onboard_plan.h).

#include "facade/onboard_plan.h"

#include <algorithm>
#include <numeric>

namespace kvbm::facade {
namespace {

// Appends `count` positions from `tier` at the plan's end (to its last run
// when that one is from the same tier).
void extend(Plan& plan, TierId tier, std::size_t count) {
  if (!plan.empty() && plan.back().tier == tier) {
    plan.back().count += count;
  } else {
    plan.push_back({tier, covered(plan), count});
  }
}

}  // namespace

Planner::Planner(const Rows& rows) {
  for (const TierId t : kTierIds) {
    Tier* row = rows[t].get();
    if (row != nullptr) (row->remote() ? remote_ : local_).push_back(row);
  }
}

Plan Planner::local(std::span<const SequenceHash> hashes) const {
  Plan plan;
  for (const auto& t : fastest(hashes, true)) extend(plan, *t, 1);
  return plan;
}

// The positions no local tier holds go to the remote tiers, one run of them
// at a time; the plan ends at the first position no tier holds.
Plan Planner::rest(std::span<const SequenceHash> hashes) const {
  const Fastest local = fastest(hashes, false);
  Plan plan;
  std::size_t pos = 0;
  while (pos < hashes.size()) {
    if (local[pos]) {
      extend(plan, *local[pos++], 1);
      continue;
    }
    std::size_t end = pos;
    while (end < hashes.size() && !local[end]) ++end;
    const std::optional<Run> run = remote_run(hashes, pos, end);
    if (!run) break;
    extend(plan, run->tier, run->count);
    if (run->end() < end) break;
    pos = end;
  }
  return plan;
}

// The leading positions of [first, end) the first remote tier that holds
// `first` holds (one round trip per tier asked); nullopt when none holds it.
std::optional<Run> Planner::remote_run(std::span<const SequenceHash> hashes, std::size_t first,
                                       std::size_t end) const {
  const auto missing = hashes.subspan(first, end - first);
  for (const Tier* r : remote_) {
    const std::vector<bool> present = r->presence(missing);
    std::size_t held = 0;
    while (held < present.size() && present[held]) ++held;
    if (held > 0) return Run{r->id(), first, held};
  }
  return std::nullopt;
}

// The tier each block of the prefix comes from: the fastest local one that
// holds it, up to the first block none holds (`stop_at_miss`), else nullopt
// there and on to the end. Each tier is asked only about the positions no
// faster tier holds; with `stop_at_miss` the positions go in chunks (16, then
// doubling), and none after a chunk with a block no tier holds is asked about.
Planner::Fastest Planner::fastest(std::span<const SequenceHash> hashes, bool stop_at_miss) const {
  constexpr std::size_t kFirstChunk = 16;
  Fastest tiers;
  tiers.reserve(hashes.size());
  std::vector<std::size_t> open;  // positions of the chunk no tier asked so far holds
  std::vector<SequenceHash> asked;
  std::size_t chunk = stop_at_miss ? kFirstChunk : hashes.size();
  for (std::size_t begin = 0; begin < hashes.size(); begin += chunk, chunk *= 2) {
    const std::size_t end = std::min(hashes.size(), begin + chunk);
    tiers.resize(end);
    open.resize(end - begin);
    std::iota(open.begin(), open.end(), begin);
    for (const Tier* t : local_) {
      if (open.empty()) break;
      asked.clear();
      for (const std::size_t i : open) asked.push_back(hashes[i]);
      const std::vector<bool> in = t->presence(asked);
      std::size_t kept = 0;
      for (std::size_t k = 0; k < open.size(); ++k) {
        if (in[k]) {
          tiers[open[k]] = t->id();
        } else {
          open[kept++] = open[k];
        }
      }
      open.resize(kept);
    }
    if (stop_at_miss && !open.empty()) {
      tiers.resize(open.front());  // open is in position order: its first is the first miss
      break;
    }
  }
  return tiers;
}

std::vector<std::optional<TierId>> Planner::locate(std::span<const SequenceHash> hashes) const {
  Fastest tiers = fastest(hashes, false);
  std::vector<std::size_t> open;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    if (!tiers[i]) open.push_back(i);
  }
  std::vector<SequenceHash> asked;
  for (const Tier* r : remote_) {
    if (open.empty()) break;
    asked.clear();
    for (const std::size_t i : open) asked.push_back(hashes[i]);
    const std::vector<bool> in = r->presence(asked);  // one round trip
    std::size_t kept = 0;
    for (std::size_t k = 0; k < open.size(); ++k) {
      if (k < in.size() && in[k]) {
        tiers[open[k]] = r->id();
      } else {
        open[kept++] = open[k];
      }
    }
    open.resize(kept);
  }
  return tiers;
}

}  // namespace kvbm::facade
