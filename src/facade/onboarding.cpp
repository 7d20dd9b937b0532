// src/facade/onboarding.cpp: onboarding and probing (facade/onboarding.h).

#include "facade/onboarding.h"

#include <cassert>
#include <exception>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

namespace kvbm::facade {

Onboarding::Onboarding(Pools& pools, const std::array<TierEngines, kTierCount>& engines,
                       std::shared_ptr<BlockRegistry> registry,
                       std::shared_ptr<prometheus::Registry> metrics, RemoteTier* remote)
    : pools_(pools),
      engines_(engines),
      registry_(std::move(registry)),
      remote_(remote),
      series_(std::move(metrics), {}, "KvBlockManager onboarding",
              "give each manager its own registry, or destroy the other manager first") {
  const std::string blocks = "kvbm_onboard_blocks_total";
  const std::string help =
      "Blocks handed back by onboarding, by the tier they came from "
      "(outcome=failed: copies that failed)";
  for_each_index<kTierCount>([&](auto I) {
    counters_.from_tier[I()] = series_.counter(blocks, help,
                                               {{"tier", std::string(tier_name<TierAt<I()>>())},
                                                {"outcome", I() == 0 ? "hit" : "onboarded"}});
  });
  if (remote_ != nullptr) {
    counters_.remote = series_.counter(blocks, help, {{"tier", "G4"}, {"outcome", "onboarded"}});
  }
  counters_.failed = series_.counter(blocks, help, {{"tier", "below_G1"}, {"outcome", "failed"}});
  counters_.cancelled =
      series_.counter("kvbm_onboard_cancelled_total", "Onboardings cancelled by their caller");
}

OnboardHandle Onboarding::onboard(std::span<const SequenceHash> hashes) {
  auto s = std::make_shared<State>();
  s->counters = counters_;
  return start(std::move(s), hashes, remote_ != nullptr);
}

// Walks the local tiers, allocates G1 targets and submits the copies; with
// `ask_remote`, the rest of the prefix (after the last block a local tier
// holds) goes to the remote stage on G4's worker.
OnboardHandle Onboarding::start(std::shared_ptr<State> s, std::span<const SequenceHash> hashes,
                                bool ask_remote) {
  s->g1 = &*std::get<0>(pools_);
  walk_prefix(hashes, *s);
  std::vector<SequenceHash> rest;
  if (ask_remote && s->walk.size() < hashes.size()) {
    rest.assign(hashes.begin() + static_cast<std::ptrdiff_t>(s->walk.size()), hashes.end());
  }
  const std::size_t below = s->below_hashes.size();
  if (below > 0) {
    // G1 targets: all, else as many as fit (the prefix is cut there).
    s->targets = s->g1->allocate_at_most(below);
    const std::size_t got = s->targets.size();
    if (got < below) {
      s->set_no_space(below - got);
      cut(*s, got);
      rest.clear();  // G1 is full: nothing after the cut is asked for
    }
  }
  if (s->targets.empty() && rest.empty()) {
    s->finish();
    return OnboardHandle(std::move(s));
  }
  submit(s, !rest.empty());
  if (!rest.empty()) {
    const bool posted = remote_->post([this, s, rest = std::move(rest)] {
      s->on_remote(s->cancelling() ? RemoteFetch{} : onboard_rest(*s, rest));
    });
    if (!posted) s->on_remote({});  // shut down: nothing more comes from G4
  }
  remember(s);
  return OnboardHandle(std::move(s));
}

// The remote stage, on G4's worker: walks the rest across the local tiers and
// G4, fetching G4's runs into G2 (verified, registered, held here), then
// onboards the rest from the local tiers like any prefix and hands it back.
RemoteFetch Onboarding::onboard_rest(const State& parent, std::span<const SequenceHash> rest) {
  RemoteFetch out;
  try {
    std::vector<ImmutableBlock<G2>> fetched;
    std::vector<std::uint8_t> from;
    std::optional<Error> fetch_error;
    const std::size_t end = walk_rest(rest, &fetched, from, &fetch_error);
    out.error = std::move(fetch_error);
    if (end == 0 || parent.cancelling()) return out;
    auto sub = std::make_shared<State>();  // no counters: the parent counts what it hands back
    OnboardHandle h = start(std::move(sub), rest.first(end), false);
    h.wait();
    out.blocks = h.take_blocks();
    out.origins = h.sources();
    const OnboardCounts c = h.counts();
    out.failed = c.failed;
    out.no_space = c.no_space;
    if (auto e = h.error()) out.error = std::move(e);
    for (std::size_t i = 0; i < out.origins.size(); ++i) {
      if (from[i] == kTierCount) out.origins[i] = TierId::kG4;
    }
  } catch (const std::exception& e) {
    out = RemoteFetch{};
    out.error =
        Error{ErrorKind::kInternal, 0, std::string("onboarding from G4 failed: ") + e.what()};
  }
  return out;
}

// Per position of `rest`, from the first: the fastest local tier holding it,
// else kTierCount when G4 does; returns how many positions are held so. With
// `fetched`, G4's runs are fetched into G2 (and a run ends at the first block
// that does not arrive intact); without, only asked about.
std::size_t Onboarding::walk_rest(std::span<const SequenceHash> rest,
                                  std::vector<ImmutableBlock<G2>>* fetched,
                                  std::vector<std::uint8_t>& from,
                                  std::optional<Error>* error) const {
  const std::vector<std::uint8_t> local = fastest_tiers(rest, false);
  from.clear();
  std::size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && local[pos] < kTierCount) from.push_back(local[pos++]);
    if (pos == rest.size()) break;
    // G4 is asked only for the run no local tier holds.
    std::size_t run = pos;
    while (run < rest.size() && local[run] == kTierCount) ++run;
    const std::size_t held = remote_->present_prefix(rest.subspan(pos, run - pos));
    if (held == 0) break;
    std::size_t got = held;
    if (fetched != nullptr) {
      auto blocks = remote_->fetch_into_g2(rest.subspan(pos, held), error);
      got = blocks.size();
      for (auto& b : blocks) fetched->push_back(std::move(b));
    }
    from.insert(from.end(), got, static_cast<std::uint8_t>(kTierCount));
    pos += got;
    if (got < held) break;
  }
  return pos;
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

// One batch per source tier, in tier order; with `remote_stage`, the remote
// stage is pending too (it reports through OnboardState::on_remote).
void Onboarding::submit(const std::shared_ptr<State>& s, bool remote_stage) {
  std::array<std::vector<TransferPair>, kTierCount> pairs;
  std::array<std::shared_ptr<std::vector<std::size_t>>, kTierCount> pos;
  std::array<std::size_t, kTierCount> next{};
  for (std::size_t k = 0; k < s->targets.size(); ++k) {
    // Each copy carries the hash asked for: the source was matched by it, and
    // a disk slot is read only if its footer records that hash.
    const std::size_t t = s->below_tier[k];
    visit_index<kTierCount - 1>(t - 1, [&](auto I) {
      const auto& src = std::get<I()>(s->sources)[next[t]++];
      assert(src.sequence_hash().value() ==
             s->below_hashes[k].value());  // a recovered block has no parent
      pairs[t].push_back({src.block_id(), s->targets[k].block_id(), s->below_hashes[k].value()});
    });
    if (!pos[t]) pos[t] = std::make_shared<std::vector<std::size_t>>();
    pos[t]->push_back(k);
  }
  std::size_t batches = 0;
  for (const auto& p : pairs) batches += p.empty() ? 0 : 1;
  s->start_pending(batches, remote_stage);  // every batch counted before any may complete
  for (std::size_t t = 1; t < kTierCount; ++t) {
    if (pairs[t].empty()) continue;
    submit_or_refuse(*engines_[t].up, pairs[t])
        ->on_complete([s, p = pos[t]](const TransferOutcome& o) { s->on_batch(o, *p); });
  }
}

void Onboarding::remember(const std::shared_ptr<State>& s) {
  detail::LockGuard lock(inflight_mu_);
  inflight_.push_back(s);
  std::erase_if(inflight_, [](const std::weak_ptr<State>& w) {
    auto p = w.lock();
    return !p || is_terminal(p->status());
  });
}

// The tier each block of the prefix comes from: the fastest that holds it, up
// to the first block no tier holds (`stop_at_miss`), else kTierCount there and
// on to the end.
std::vector<std::uint8_t> Onboarding::fastest_tiers(std::span<const SequenceHash> hashes,
                                                    bool stop_at_miss) const {
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
    if (t == kTierCount && stop_at_miss) break;
    tiers.push_back(static_cast<std::uint8_t>(t));
  }
  return tiers;
}

// Takes the prefix's blocks, each from the fastest tier holding it, one match
// per run of positions from the same tier. A block evicted since the presence
// check ends the prefix there.
void Onboarding::walk_prefix(std::span<const SequenceHash> hashes, State& s) {
  const std::vector<std::uint8_t> tiers = fastest_tiers(hashes, true);
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
  const std::vector<std::uint8_t> tiers = fastest_tiers(hashes, true);
  for (const std::uint8_t tier : tiers) ++per_tier[tier];
  std::size_t remote = 0;
  if (remote_ != nullptr && tiers.size() < hashes.size()) {
    std::vector<std::uint8_t> from;
    (void)walk_rest(hashes.subspan(tiers.size()), nullptr, from);
    for (const std::uint8_t tier : from) {
      if (tier == kTierCount) {
        ++remote;
      } else {
        ++per_tier[tier];
      }
    }
  }
  OnboardCounts c = to_counts(per_tier);
  c.remote = remote;
  return c;
}

void Onboarding::wait_all() {
  std::vector<std::weak_ptr<State>> states;
  {
    detail::LockGuard lock(inflight_mu_);
    states = inflight_;
  }
  for (auto& w : states) {
    if (auto p = w.lock()) p->wait();
  }
}

}  // namespace kvbm::facade
