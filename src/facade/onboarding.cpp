// src/facade/onboarding.cpp: onboarding and probing (facade/onboarding.h).

#include "facade/onboarding.h"

#include <algorithm>
#include <exception>
#include <numeric>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

namespace kvbm::facade {

Onboarding::Onboarding(const Rows& rows, std::shared_ptr<prometheus::Registry> metrics)
    : rows_(rows),
      g1_(static_cast<PoolTier<G1>&>(*rows[TierId::kG1])),
      series_(std::move(metrics), {}, "KvBlockManager onboarding",
              "give each manager its own registry, or destroy the other manager first") {
  const std::string blocks = "kvbm_onboard_blocks_total";
  const std::string help =
      "Blocks handed back by onboarding, by the tier they came from "
      "(outcome=failed: copies that failed)";
  for (const TierId t : kTierIds) {
    Tier* row = rows_[t].get();
    if (row == nullptr) continue;
    (row->remote() ? remote_ : local_).push_back(row);
    counters_.from_tier[t] = series_.counter(
        blocks, help,
        {{"tier", std::string(to_string(t))}, {"outcome", t == TierId::kG1 ? "hit" : "onboarded"}});
  }
  counters_.failed = series_.counter(blocks, help, {{"tier", "below_G1"}, {"outcome", "failed"}});
  counters_.cancelled =
      series_.counter("kvbm_onboard_cancelled_total", "Onboardings cancelled by their caller");
  if (!remote_.empty()) worker_ = std::make_unique<detail::Worker>("remote onboarding stage");
}

OnboardHandle Onboarding::onboard(std::span<const SequenceHash> hashes) {
  auto s = std::make_shared<State>();
  s->counters = counters_;
  return start(std::move(s), hashes, !remote_.empty());
}

// Walks the local tiers, allocates G1 targets and submits the copies; with
// `ask_remote`, the rest of the prefix (after the last block a local tier
// holds) goes to the remote stage on the worker.
OnboardHandle Onboarding::start(std::shared_ptr<State> s, std::span<const SequenceHash> hashes,
                                bool ask_remote) {
  s->g1 = &g1_.pool();
  walk_prefix(hashes, *s);
  std::vector<SequenceHash> rest;
  if (ask_remote && s->walk.size() < hashes.size()) {
    rest.assign(hashes.begin() + static_cast<std::ptrdiff_t>(s->walk.size()), hashes.end());
  }
  const std::size_t below = s->below.size();
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
    const bool posted = worker_->post([this, s, rest = std::move(rest)] {
      s->on_remote(s->cancelling() ? RemoteFetch{} : onboard_rest(*s, rest));
    });
    if (!posted) s->on_remote({});  // shut down: nothing more comes from below
  }
  remember(s);
  return OnboardHandle(std::move(s));
}

// The remote stage, on the worker: walks the rest across the local and
// remote tiers, taking the remote runs into their landing tiers (verified,
// registered, held here), then onboards the rest from the local tiers like
// any prefix and hands it back.
RemoteFetch Onboarding::onboard_rest(const State& parent, std::span<const SequenceHash> rest) {
  RemoteFetch out;
  try {
    std::vector<Taken> fetched;
    std::vector<TierId> from;
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
      if (rows_[from[i]]->remote()) out.origins[i] = from[i];
    }
  } catch (const std::exception& e) {
    out = RemoteFetch{};
    out.error = Error{ErrorKind::kInternal, 0,
                      std::string("onboarding from a remote tier failed: ") + e.what()};
  }
  return out;
}

// Per position of `rest`, from the first: the fastest local tier holding it,
// else the first remote tier that does; returns how many positions are held
// so. With `fetched`, the remote runs are taken into their landing tiers (a
// run ends at the first block that does not arrive intact); without, only
// asked about.
std::size_t Onboarding::walk_rest(std::span<const SequenceHash> rest, std::vector<Taken>* fetched,
                                  std::vector<TierId>& from, std::optional<Error>* error) const {
  const Fastest local = fastest_tiers(rest, false);
  from.clear();
  std::size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && local[pos]) from.push_back(*local[pos++]);
    if (pos == rest.size()) break;
    // The remote tiers are asked only for the run no local tier holds.
    std::size_t run = pos;
    while (run < rest.size() && !local[run]) ++run;
    const auto missing = rest.subspan(pos, run - pos);
    std::size_t held = 0;
    Tier* source = nullptr;
    for (Tier* r : remote_) {
      const std::vector<bool> present = r->presence(missing);
      while (held < present.size() && present[held]) ++held;
      if (held > 0) {
        source = r;
        break;
      }
    }
    if (held == 0) break;
    std::size_t got = held;
    if (fetched != nullptr) {
      Taken t = source->take(missing.first(held), rows_[source->spec().above].get(), error);
      got = t.ids.size();
      fetched->push_back(std::move(t));
    }
    from.insert(from.end(), got, source->id());
    pos += got;
    if (got < held) break;
  }
  return pos;
}

// Cuts the prefix before its `got`-th position below G1 (no G1 room for it);
// the source blocks after the cut are let go.
void Onboarding::cut(State& s, std::size_t got) {
  std::size_t seen_below = 0, seen_hits = 0, pos = 0;
  for (; pos < s.walk.size(); ++pos) {
    if (s.walk[pos] == TierId::kG1) {
      ++seen_hits;
    } else if (seen_below++ == got) {
      break;
    }
  }
  s.walk.resize(pos);
  s.hits.erase(s.hits.begin() + static_cast<std::ptrdiff_t>(seen_hits), s.hits.end());
  std::vector<std::size_t> keep(s.holds.size(), 0);
  for (std::size_t k = 0; k < got; ++k) ++keep[s.below[k].hold];
  for (std::size_t h = 0; h < s.holds.size(); ++h) s.holds[h]->keep_first(keep[h]);
  s.below.resize(got);
}

// One batch per source tier, fastest first; with `remote_stage`, the remote
// stage is pending too (it reports through OnboardState::on_remote).
void Onboarding::submit(const std::shared_ptr<State>& s, bool remote_stage) {
  TierArray<std::vector<TransferPair>> pairs;
  TierArray<std::shared_ptr<std::vector<std::size_t>>> pos;
  for (std::size_t k = 0; k < s->targets.size(); ++k) {
    // Each copy carries the hash asked for: the source was matched by it, and
    // a disk slot is read only if its footer records that hash.
    const OnboardRecord& r = s->below[k];
    pairs[r.from].push_back({r.source, s->targets[k].block_id(), r.hash.value()});
    if (!pos[r.from]) pos[r.from] = std::make_shared<std::vector<std::size_t>>();
    pos[r.from]->push_back(k);
  }
  std::size_t batches = 0;
  for (const auto& p : pairs.items) batches += p.empty() ? 0 : 1;
  s->start_pending(batches, remote_stage);  // every batch counted before any may complete
  for (const TierId t : kTierIds) {
    if (pairs[t].empty()) continue;
    submit_or_refuse(*rows_[t]->up(), pairs[t])
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

// The tier each block of the prefix comes from: the fastest local one that
// holds it, up to the first block none holds (`stop_at_miss`), else nullopt
// there and on to the end. Each tier is asked only about the positions no
// faster tier holds; with `stop_at_miss` the positions go in chunks (16, then
// doubling), and none after a chunk with a block no tier holds is asked about.
Onboarding::Fastest Onboarding::fastest_tiers(std::span<const SequenceHash> hashes,
                                              bool stop_at_miss) const {
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

// Takes the prefix's blocks, each from the fastest tier holding it, one take
// per run of positions from the same tier. A block evicted since the
// presence check ends the prefix there.
void Onboarding::walk_prefix(std::span<const SequenceHash> hashes, State& s) {
  const Fastest tiers = fastest_tiers(hashes, true);
  std::size_t i = 0;
  while (i < tiers.size()) {
    const TierId tier = *tiers[i];
    std::size_t end = i;
    while (end < tiers.size() && tiers[end] == tier) ++end;
    const auto run = hashes.subspan(i, end - i);
    std::size_t got = 0;
    if (tier == TierId::kG1) {
      auto m = g1_.pool().match_blocks(run);
      got = m.size();
      for (auto& b : m) s.hits.push_back(std::move(b));
    } else {
      Taken t = rows_[tier]->take(run, nullptr, nullptr);
      got = t.ids.size();
      for (std::size_t k = 0; k < got; ++k) {
        s.below.push_back({hashes[i + k], tier, t.ids[k], s.holds.size()});
      }
      s.holds.push_back(std::move(t.hold));
    }
    s.walk.insert(s.walk.end(), got, tier);
    if (got < run.size()) break;
    i = end;
  }
}

OnboardCounts Onboarding::probe(std::span<const SequenceHash> hashes) const {
  TierArray<std::size_t> per_tier{};
  const Fastest tiers = fastest_tiers(hashes, true);
  for (const auto& t : tiers) ++per_tier[*t];
  if (!remote_.empty() && tiers.size() < hashes.size()) {
    std::vector<TierId> from;
    (void)walk_rest(hashes.subspan(tiers.size()), nullptr, from);
    for (const TierId t : from) ++per_tier[t];
  }
  return OnboardCounts{.found = per_tier};
}

std::vector<std::optional<TierId>> Onboarding::locate(std::span<const SequenceHash> hashes) const {
  Fastest tiers = fastest_tiers(hashes, false);
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

void Onboarding::wait_all() {
  std::vector<std::weak_ptr<State>> states;
  {
    detail::LockGuard lock(inflight_mu_);
    states = inflight_;
  }
  for (auto& w : states) {
    if (auto p = w.lock()) p->wait();
  }
  if (worker_) worker_->wait_idle();  // also a cancelled onboarding's stage
}

void Onboarding::stop() {
  if (worker_) worker_->stop();
}

}  // namespace kvbm::facade
