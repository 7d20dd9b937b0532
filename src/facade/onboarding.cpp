// src/facade/onboarding.cpp: onboarding and probing (facade/onboarding.h).

#include "facade/onboarding.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

namespace kvbm::facade {

Onboarding::Onboarding(const Rows& rows, std::shared_ptr<prometheus::Registry> metrics,
                       std::shared_ptr<const Costs> costs, std::uint32_t block_size)
    : rows_(rows),
      g1_(static_cast<PoolTier<G1>&>(*rows[TierId::kG1])),
      planner_(rows),
      costs_(std::move(costs)),
      block_size_(block_size),
      series_(std::move(metrics), {}, "KvBlockManager onboarding",
              "give each manager its own registry, or destroy the other manager first") {
  const std::string blocks = "kvbm_onboard_blocks_total";
  const std::string help =
      "Blocks handed back by onboarding, by the tier they came from "
      "(outcome=failed: copies that failed)";
  for (const TierId t : kTierIds) {
    if (rows_[t] == nullptr) continue;
    counters_.from_tier[t] = series_.counter(
        blocks, help,
        {{"tier", std::string(to_string(t))}, {"outcome", t == TierId::kG1 ? "hit" : "onboarded"}});
  }
  counters_.failed = series_.counter(blocks, help, {{"tier", "below_G1"}, {"outcome", "failed"}});
  counters_.cancelled =
      series_.counter("kvbm_onboard_cancelled_total", "Onboardings cancelled by their caller");
  counters_.abandoned = series_.counter(
      "kvbm_onboard_abandoned_total",
      "Blocks found below G1 whose copies had not arrived when their onboarding was cut "
      "(take_arrived or a deadline): computed by the caller, never served");
  if (planner_.remote()) worker_ = std::make_unique<detail::Worker>("remote onboarding stage");
}

OnboardHandle Onboarding::onboard(std::span<const SequenceHash> hashes) {
  return start(hashes, std::nullopt, std::nullopt);
}

// The walk's step, then (with a remote tier, unless G1 ran out of room) the
// rest of the prefix goes to the remote stage on the worker. `plan`: the
// plan that cut `hashes`, for the handle.
OnboardHandle Onboarding::start(std::span<const SequenceHash> hashes,
                                std::optional<OnboardPlan> plan,
                                std::optional<Clock::time_point> deadline) {
  auto s = std::make_shared<State>();
  s->counters = counters_;
  s->g1 = &g1_.pool();
  s->plan = plan;
  if (deadline) s->set_deadline(costs_->shared_clock(), *deadline);
  OnboardRecords walk = take(hashes, planner_.local(hashes), nullptr);
  const std::size_t no_space = give_targets(walk);
  const std::size_t first = walk.size();
  std::vector<SequenceHash> rest;
  if (planner_.remote() && no_space == 0 && first < hashes.size()) {
    rest.assign(hashes.begin() + static_cast<std::ptrdiff_t>(first), hashes.end());
  }
  const Copies copies = copies_of(walk, 0);
  s->begin(std::move(walk), no_space, copies.batches(), !rest.empty());
  if (copies.batches() == 0 && rest.empty()) {
    s->finish();
    return OnboardHandle(std::move(s));
  }
  submit(s, copies);
  if (!rest.empty()) {
    const bool posted =
        worker_->post([this, s, first, rest = std::move(rest)] { onboard_rest(s, rest, first); });
    if (!posted) s->stage_done();  // shut down: nothing more comes from below
  }
  remember(s);
  return OnboardHandle(std::move(s));
}

// The remote stage, on the worker: plans the rest across every tier, takes
// its runs (a remote run fetched into its landing tier), gives them G1
// targets and, unless the onboarding is being cancelled, hands them to the
// state and submits their copies like the walk's.
void Onboarding::onboard_rest(const std::shared_ptr<State>& s, std::span<const SequenceHash> rest,
                              std::size_t first) {
  OnboardRecords taken;
  std::optional<Error> error;
  std::size_t no_space = 0;
  try {
    if (!s->cancelling()) taken = take(rest, planner_.rest(rest), &error);
    if (!s->cancelling()) no_space = give_targets(taken);
  } catch (const std::exception& e) {
    taken.release();
    no_space = 0;
    error = Error{ErrorKind::kInternal, 0,
                  std::string("onboarding from a remote tier failed: ") + e.what()};
  }
  const Copies copies = copies_of(taken, first);
  if (s->adopt(taken, no_space, std::move(error), copies.batches())) submit(s, copies);
  taken.release();  // what a cancelled onboarding did not adopt
  s->stage_done();
}

// Takes the plan's runs in order, one record per position; a run handed over
// short (a block evicted since the plan, one that did not arrive intact)
// ends the prefix there. A remote run lands in the tier above it.
OnboardRecords Onboarding::take(std::span<const SequenceHash> hashes, const Plan& plan,
                                std::optional<Error>* error) {
  OnboardRecords out;
  out.reserve(covered(plan));
  for (const Run& run : plan) {
    const auto want = hashes.subspan(run.first, run.count);
    const std::size_t before = out.size();
    if (run.tier == TierId::kG1) {
      out.add_hits(want, g1_.pool().match_blocks(want));
    } else {
      Tier& row = *rows_[run.tier];
      Tier* landing = row.remote() ? rows_[row.spec().above].get() : nullptr;
      out.add_taken(want, run.tier, row.take(want, landing, error));
    }
    if (out.size() - before < run.count) break;
  }
  return out;
}

// G1 targets for the records below G1: all, else as many as fit (the prefix
// is cut there). Returns how many did not fit.
std::size_t Onboarding::give_targets(OnboardRecords& records) {
  const std::size_t below = records.below();
  if (below == 0) return 0;
  std::vector<MutableBlock<G1>> targets = g1_.pool().allocate_at_most(below);
  const std::size_t got = targets.size();
  records.give_targets(std::move(targets));
  return below - got;
}

std::size_t Onboarding::Copies::batches() const noexcept {
  std::size_t n = 0;
  for (const auto& p : pairs.items) n += p.empty() ? 0 : 1;
  return n;
}

// Each copy carries the hash asked for: the source was matched by it, and a
// disk slot is read only if its footer records that hash.
Onboarding::Copies Onboarding::copies_of(const OnboardRecords& records, std::size_t first) {
  Copies c;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const OnboardRecord& r = records[i];
    if (!r.target) continue;
    c.pairs[r.at].push_back({r.source, r.target->block_id(), r.hash.value()});
    auto& pos = c.positions[r.at];
    if (!pos) pos = std::make_shared<std::vector<std::size_t>>();
    pos->push_back(first + i);
  }
  return c;
}

// One batch per source tier, fastest first (counted by the state already).
void Onboarding::submit(const std::shared_ptr<State>& s, const Copies& copies) {
  for (const TierId t : kTierIds) {
    if (copies.pairs[t].empty()) continue;
    submit_or_refuse(*rows_[t]->up(), copies.pairs[t])
        ->on_complete(
            [s, p = copies.positions[t]](const TransferOutcome& o) { s->on_batch(o, *p); });
  }
}

void Onboarding::remember(const std::shared_ptr<State>& s) {
  detail::LockGuard lock(inflight_mu_);
  inflight_.push_back(s);
  std::erase_if(inflight_, [](const std::weak_ptr<State>& w) {
    auto p = w.lock();
    return !p || p->settled();
  });
}

Plan Onboarding::found(std::span<const SequenceHash> hashes) const {
  Plan plan = planner_.local(hashes);
  const std::size_t first = covered(plan);
  if (planner_.remote() && first < hashes.size()) {
    for (Run r : planner_.rest(hashes.subspan(first))) {
      r.first += first;
      plan.push_back(r);
    }
  }
  return plan;
}

OnboardCounts Onboarding::probe(std::span<const SequenceHash> hashes) const {
  TierArray<std::size_t> per_tier{};
  for (const Run& r : found(hashes)) per_tier[r.tier] += r.count;
  return OnboardCounts{.found = per_tier};
}

// The runs found, weighed against the paths up to G1 (G4: its fetch into
// its landing tier) and the prefill.
OnboardPlan Onboarding::plan(std::span<const SequenceHash> hashes,
                             const OnboardOptions& options) const {
  CutCosts costs;
  for (const TierId t : kTierIds) {
    const Tier* row = rows_[t].get();
    if (row == nullptr || t == TierId::kG1) continue;
    costs.up[t] = costs_->model(t, row->remote() ? row->spec().above : TierId::kG1);
  }
  costs.prefill = costs_->prefill();
  costs.block_size = block_size_;
  if (!options.deadline || !planner_.remote()) {
    return choose_cut(found(hashes), hashes.size(), costs, options);
  }
  return choose_cut(found_by(hashes, costs_->clock().now() + *options.deadline), hashes.size(),
                    costs, options);
}

// found(), but the remote tier is asked on the worker and waited for only
// until `until` (on the costs' clock): a G4 that has not answered by then
// counts as holding nothing, so a stalled server cannot hold the caller past
// its deadline. Its late answer is dropped.
Plan Onboarding::found_by(std::span<const SequenceHash> hashes, Clock::time_point until) const {
  Plan plan = planner_.local(hashes);
  const std::size_t first = covered(plan);
  if (first == hashes.size()) return plan;
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Plan> runs;
  };
  auto answer = std::make_shared<Answer>();
  Clock& clock = costs_->clock();
  const Clock::Subscription woken = clock.subscribe(answer->mu, answer->cv);
  std::vector<SequenceHash> rest(hashes.begin() + static_cast<std::ptrdiff_t>(first), hashes.end());
  const bool posted = worker_->post([this, answer, rest = std::move(rest)] {
    Plan runs = planner_.rest(rest);
    {
      const std::lock_guard lock(answer->mu);
      answer->runs = std::move(runs);
    }
    answer->cv.notify_all();
  });
  if (!posted) return plan;
  std::unique_lock lock(answer->mu);
  while (!answer->runs && clock.now() < until) clock.wait_until(lock, answer->cv, until);
  if (!answer->runs) return plan;
  for (Run r : *answer->runs) {
    r.first += first;
    plan.push_back(r);
  }
  return plan;
}

OnboardHandle Onboarding::onboard(std::span<const SequenceHash> hashes, const OnboardPlan& plan,
                                  Clock::time_point asked) {
  const std::size_t cut = std::min(plan.loaded(), hashes.size());
  std::optional<Clock::time_point> deadline;
  if (plan.deadline) deadline = asked + *plan.deadline;
  return start(hashes.first(cut), plan, deadline);
}

std::vector<std::optional<TierId>> Onboarding::locate(std::span<const SequenceHash> hashes) const {
  return planner_.locate(hashes);
}

void Onboarding::wait_all() {
  std::vector<std::weak_ptr<State>> states;
  {
    detail::LockGuard lock(inflight_mu_);
    states = inflight_;
  }
  for (auto& w : states) {
    if (auto p = w.lock()) p->wait_settled();
  }
  if (worker_) worker_->wait_idle();  // also a cancelled onboarding's stage
}

void Onboarding::stop() {
  if (worker_) worker_->stop();
}

}  // namespace kvbm::facade
