// src/facade/onboarding.cpp: onboarding and probing (facade/onboarding.h).

#include "facade/onboarding.h"

#include <cassert>
#include <exception>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

namespace kvbm::facade {

Onboarding::Onboarding(Pools& pools, const std::array<TierEngines, kTierCount>& engines,
                       std::shared_ptr<BlockRegistry> registry, prometheus::Registry& metrics)
    : pools_(pools), engines_(engines), registry_(std::move(registry)) {
  auto& fam = prometheus::BuildCounter()
                  .Name("kvbm_onboard_blocks_total")
                  .Help(
                      "Blocks handed back by onboarding, by the tier they came from "
                      "(outcome=failed: copies that failed)")
                  .Register(metrics);
  blocks_family_ = &fam;
  for_each_index<kTierCount>([&](auto I) {
    counters_.from_tier[I()] = &fam.Add({{"tier", std::string(tier_name<TierAt<I()>>())},
                                         {"outcome", I() == 0 ? "hit" : "onboarded"}});
  });
  counters_.failed = &fam.Add({{"tier", "below_G1"}, {"outcome", "failed"}});
  auto& req = prometheus::BuildCounter()
                  .Name("kvbm_onboard_cancelled_total")
                  .Help("Onboardings cancelled by their caller")
                  .Register(metrics);
  cancelled_family_ = &req;
  counters_.cancelled = &req.Add({});
}

Onboarding::~Onboarding() {
  for (auto* counter : counters_.from_tier) blocks_family_->Remove(counter);
  blocks_family_->Remove(counters_.failed);
  cancelled_family_->Remove(counters_.cancelled);
}

OnboardHandle Onboarding::onboard(std::span<const SequenceHash> hashes) {
  auto s = std::make_shared<State>();
  s->g1 = &*std::get<0>(pools_);
  s->counters = counters_;
  walk_prefix(hashes, *s);
  const std::size_t below = s->below_hashes.size();
  if (below == 0) {
    s->finish();
    return OnboardHandle(std::move(s));
  }
  // G1 targets: all, else as many as fit (the prefix is cut there).
  s->targets = s->g1->allocate_at_most(below);
  const std::size_t got = s->targets.size();
  if (got < below) {
    s->set_no_space(below - got);
    cut(*s, got);
  }
  if (got == 0) {
    s->finish();
    return OnboardHandle(std::move(s));
  }
  submit(s);
  remember(s);
  return OnboardHandle(std::move(s));
}

// Cuts the prefix before its `got`-th position below G1 (no G1 room for it).
void Onboarding::cut(State& s, std::size_t got) {
  std::size_t seen_below = 0, seen_hits = 0, pos = 0;
  for (; pos < s.walk.size(); ++pos) {
    if (s.walk[pos] == 0) {
      ++seen_hits;
    } else if (seen_below++ == got) {
      break;
    }
  }
  s.walk.resize(pos);
  s.hits.erase(s.hits.begin() + static_cast<std::ptrdiff_t>(seen_hits), s.hits.end());
  std::array<std::size_t, kTierCount> keep{};
  for (std::size_t k = 0; k < got; ++k) ++keep[s.below_tier[k]];
  for_each_index<kTierCount - 1>([&](auto I) {
    auto& v = std::get<I()>(s.sources);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(keep[I() + 1]), v.end());
  });
  s.below_hashes.resize(got);
  s.below_tier.resize(got);
}

// One batch per source tier, in tier order.
void Onboarding::submit(const std::shared_ptr<State>& s) {
  std::array<std::vector<TransferPair>, kTierCount> pairs;
  std::array<std::shared_ptr<std::vector<std::size_t>>, kTierCount> pos;
  std::array<std::size_t, kTierCount> next{};
  for (std::size_t k = 0; k < s->targets.size(); ++k) {
    // Each copy carries the hash asked for: the source was matched by it, and
    // a disk slot is read only if its footer records that hash.
    const std::size_t t = s->below_tier[k];
    visit_index<kTierCount - 1>(t - 1, [&](auto I) {
      const auto& src = std::get<I()>(s->sources)[next[t]++];
      assert(src.sequence_hash().value() == s->below_hashes[k].value());  // a recovered block has no parent
      pairs[t].push_back({src.block_id(), s->targets[k].block_id(), s->below_hashes[k].value()});
    });
    if (!pos[t]) pos[t] = std::make_shared<std::vector<std::size_t>>();
    pos[t]->push_back(k);
  }
  std::size_t batches = 0;
  for (const auto& p : pairs) batches += p.empty() ? 0 : 1;
  s->start_pending(batches);  // every batch counted before any may complete
  for (std::size_t t = 1; t < kTierCount; ++t) {
    if (pairs[t].empty()) continue;
    submit_or_refuse(*engines_[t].up, pairs[t])
        ->on_complete([s, p = pos[t]](const TransferOutcome& o) { s->on_batch(o, *p); });
  }
}

void Onboarding::remember(const std::shared_ptr<State>& s) {
  std::lock_guard lock(inflight_mu_);
  inflight_.push_back(s);
  std::erase_if(inflight_, [](const std::weak_ptr<State>& w) {
    auto p = w.lock();
    return !p || is_terminal(p->status());
  });
}

// The tier each block of the prefix comes from: the fastest that holds it,
// up to the first block no tier holds.
std::vector<std::uint8_t> Onboarding::fastest_tiers(std::span<const SequenceHash> hashes) const {
  std::array<std::vector<bool>, kTierCount> in;
  for_each_index<kTierCount>([&](auto I) {
    using T = TierAt<I()>;
    in[I()] = std::get<I()>(pools_) ? registry_->presence<T>(hashes)
                                    : std::vector<bool>(hashes.size(), false);
  });
  std::vector<std::uint8_t> tiers;
  tiers.reserve(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    std::size_t t = 0;
    while (t < kTierCount && !in[t][i]) ++t;
    if (t == kTierCount) break;
    tiers.push_back(static_cast<std::uint8_t>(t));
  }
  return tiers;
}

// Takes the prefix's blocks, each from the fastest tier holding it, one match
// per run of positions from the same tier. A block evicted since the presence
// check ends the prefix there.
void Onboarding::walk_prefix(std::span<const SequenceHash> hashes, State& s) {
  const std::vector<std::uint8_t> tiers = fastest_tiers(hashes);
  std::size_t i = 0;
  while (i < tiers.size()) {
    std::size_t end = i;
    while (end < tiers.size() && tiers[end] == tiers[i]) ++end;
    const auto run = hashes.subspan(i, end - i);
    std::size_t got = 0;
    visit_index<kTierCount>(tiers[i], [&](auto I) {
      auto m = std::get<I()>(pools_)->match_blocks(run);
      got = m.size();
      if constexpr (I() == 0) {
        for (auto& b : m) s.hits.push_back(std::move(b));
      } else {
        for (auto& b : m) std::get<I() - 1>(s.sources).push_back(std::move(b));
      }
    });
    for (std::size_t k = 0; k < got; ++k) {
      s.walk.push_back(tiers[i]);
      if (tiers[i] != 0) {
        s.below_hashes.push_back(hashes[i + k]);
        s.below_tier.push_back(tiers[i]);
      }
    }
    if (got < run.size()) break;
    i = end;
  }
}

OnboardCounts Onboarding::probe(std::span<const SequenceHash> hashes) const {
  std::array<std::size_t, kTierCount> per_tier{};
  for (const std::uint8_t tier : fastest_tiers(hashes)) ++per_tier[tier];
  return to_counts(per_tier);
}

void Onboarding::wait_all() {
  std::vector<std::weak_ptr<State>> states;
  {
    std::lock_guard lock(inflight_mu_);
    states = inflight_;
  }
  for (auto& w : states) {
    if (auto p = w.lock()) p->wait();
  }
}

}  // namespace kvbm::facade
