// src/facade/onboard_state.cpp: one onboarding and its handle (facade/onboard_state.h).

#include "facade/onboard_state.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include <prometheus/counter.h>

#include "facade/cut_prefix.h"
#include "kvbm/blocks/release_order.h"
#include "kvbm/error.h"
#include "kvbm/transfer/stage_and_register.h"

namespace kvbm::detail {

void OnboardState::begin(facade::OnboardRecords&& records, std::size_t no_space,
                         std::size_t batches, bool remote) {
  LockGuard lock(mu_);
  records_ = std::move(records);
  no_space_ = no_space;
  pending_ = batches + (remote ? 1 : 0);  // every step counted before any may end
  remote_outstanding_ = remote;
}

bool OnboardState::adopt(facade::OnboardRecords& records, std::size_t no_space,
                         std::optional<Error> error, std::size_t batches) {
  LockGuard lock(mu_);
  // Cancelled (cancel() may have ended it already): the stage keeps what it took.
  if (cancel_requested_ || cut_ || is_terminal(status_) || pending_ == 0) return false;
  remote_outstanding_ = false;
  records_.append(std::move(records));
  no_space_ += no_space;
  if (error && !error_) error_ = std::move(error);
  pending_ += batches;  // before any of them is submitted; the stage itself still counts
  return true;
}

void OnboardState::stage_done() noexcept {
  bool last = false;
  bool after_cut = false;
  {
    LockGuard lock(mu_);
    remote_outstanding_ = false;
    if (cut_) {
      after_cut = last_step_after_cut();
    } else {
      if (is_terminal(status_) || pending_ == 0) return;  // cancel() ended it
      last = --pending_ == 0;
    }
  }
  if (after_cut) release_after_cut();
  if (last) finish();
}

void OnboardState::on_batch(const TransferOutcome& o,
                            const std::vector<std::size_t>& positions) noexcept {
  bool last = false;
  bool after_cut = false;
  {
    LockGuard lock(mu_);
    for (const auto k : o.failed) {
      if (k < positions.size()) records_[positions[k]].failed = true;
    }
    for (const auto p : positions) records_[p].arrived = !records_[p].failed;
    if (!o.ok() && !error_)
      error_ = o.error ? *o.error : Error{ErrorKind::kInternal, 0, "copy failed"};
    if (cut_) {
      after_cut = last_step_after_cut();
    } else {
      last = --pending_ == 0;
    }
  }
  if (after_cut) release_after_cut();
  if (last) finish();
}

bool OnboardState::cancelling() const {
  LockGuard lock(mu_);
  return cancel_requested_ || cut_;
}

void OnboardState::set_deadline(std::shared_ptr<Clock> clock, Clock::time_point at) {
  clock_ = std::move(clock);
  deadline_ = at;
  subscription_ = clock_->subscribe(mu_.native(), cv_);
}

bool OnboardState::past_deadline() const noexcept {
  return deadline_ && clock_->now() >= *deadline_;
}

Error OnboardState::deadline_error() const {
  return Error{ErrorKind::kTimeout, 0,
               "the onboarding's deadline passed: the prefix ends at the first block whose "
               "copy had not arrived; compute the rest (or give a later deadline)"};
}

void OnboardState::finish() noexcept {
  UniqueLock lock(mu_);
  if (cancel_requested_) {
    lock.unlock();
    records_.release();
    lock.lock();
    end_cancelled();
    return;
  }
  const std::size_t no_space = no_space_;
  lock.unlock();
  bool any_failed = false;
  for (std::size_t i = 0; i < records_.size(); ++i) any_failed = any_failed || records_[i].failed;
  TierArray<std::size_t> per_tier{};
  std::size_t failed = 0;
  std::vector<TierId> origins;
  std::vector<ImmutableBlock<G1>> out = assemble(per_tier, failed, origins);
  OnboardCounts c{.found = per_tier};
  c.failed = failed;
  c.no_space = no_space;
  if (counters.failed != nullptr) {
    for (const TierId t : kTierIds) {
      if (auto* counter = counters.from_tier[t])
        counter->Increment(static_cast<double>(per_tier[t]));
    }
    counters.failed->Increment(static_cast<double>(c.failed));
  }
  lock.lock();
  if (cancel_requested_) {  // cancelled while the copies were registered
    lock.unlock();
    release_tail_first(out);
    lock.lock();
    end_cancelled();
    return;
  }
  counts_ = c;
  if (c.no_space > 0 && !error_) {
    error_ = Error{ErrorKind::kNoSpace, 0,
                   std::to_string(c.no_space) +
                       " block(s) of the prefix were found below G1 but G1 had no free block "
                       "for them, so the prefix ends before them; release G1 blocks (or give G1 "
                       "more) and onboard again"};
  }
  origins_ = std::move(origins);
  blocks_ = std::move(out);
  status_ = any_failed ? TransferStatus::kFailed : TransferStatus::kDone;
  cv_.notify_all();
}

// The copies that arrived, staged and registered in G1 in one batch, in
// prefix order (one lock; the index's misses overlap): the pool ends as
// registering each in turn leaves it. Each becomes its record's block; a
// target whose copy failed, or that could not be registered, goes back to
// the reset pool.
void OnboardState::register_arrived() noexcept {
  std::size_t copies = 0;
  try {
    const std::uint32_t block_size = g1->block_size();
    std::vector<CompleteBlock<G1>> staged;
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < records_.size(); ++i) {
      facade::OnboardRecord& r = records_[i];
      if (!r.target) continue;
      ++copies;
      MutableBlock<G1> target = std::move(*r.target);
      r.target.reset();
      if (r.failed) continue;
      auto s = std::move(target).stage(r.hash, block_size);
      if (!s.ok()) continue;
      staged.push_back(std::move(s).value());
      at.push_back(i);
    }
    auto registered = g1->register_copies(std::move(staged));
    for (std::size_t k = 0; k < registered.size(); ++k) {
      records_[at[k]].block = std::move(registered[k]);
    }
  } catch (const std::exception& e) {
    detail::log_unregistered_copies(tier_name<G1>(), copies, e.what());
  }
}

// Every copy that arrived is registered (it is a valid G1 block); the prefix
// handed back ends before the first position without its G1 block.
std::vector<ImmutableBlock<G1>> OnboardState::assemble(TierArray<std::size_t>& per_tier,
                                                       std::size_t& failed,
                                                       std::vector<TierId>& origins) noexcept {
  register_arrived();
  std::vector<ImmutableBlock<G1>> out;
  out.reserve(records_.size());
  origins.reserve(records_.size());
  bool whole = true;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    facade::OnboardRecord& r = records_[i];
    if (r.below() && !r.block) ++failed;  // its target went back to the reset pool
    whole = whole && r.block.has_value();
    if (!whole) continue;
    out.push_back(std::move(*r.block));
    r.block.reset();
    origins.push_back(r.from);
    ++per_tier[r.from];
  }
  records_.release();  // the registered copies after a gap, and the sources
  return out;
}

void OnboardState::end_cancelled() noexcept {
  status_ = TransferStatus::kCancelled;
  if (counters.cancelled) counters.cancelled->Increment();
  cv_.notify_all();
}

TransferStatus OnboardState::status() {
  if (past_deadline()) cut(deadline_error());
  LockGuard lock(mu_);
  return status_;
}

// With a deadline, waits on the clock until it, then cuts and waits for the
// (prompt) end: a cut is over at once unless finish() is already running.
TransferStatus OnboardState::wait() {
  UniqueLock lock(mu_);
  while (deadline_ && !is_terminal(status_) && clock_->now() < *deadline_) {
    clock_->wait_until(lock.native(), cv_, *deadline_);
  }
  if (!is_terminal(status_) && deadline_) {
    lock.unlock();
    cut(deadline_error());
    lock.lock();
  }
  cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
  return status_;
}

bool OnboardState::wait_for(std::chrono::nanoseconds t) {
  if (past_deadline()) cut(deadline_error());
  UniqueLock lock(mu_);
  return cv_.wait_for(lock.native(), t, [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
}

std::size_t OnboardState::arrived_prefix() const noexcept {
  std::size_t k = 0;
  while (k < records_.size()) {
    const facade::OnboardRecord& r = records_[k];
    if (r.below() ? !(r.target && r.arrived) : !r.block) break;
    ++k;
  }
  return k;
}

void OnboardState::cut(std::optional<Error> why) noexcept {
  facade::CutPrefix p;
  bool release_now = false;
  std::size_t abandoned = 0;
  {
    LockGuard lock(mu_);
    // Over, being cancelled, or finishing (every step is back): nothing to cut.
    if (is_terminal(status_) || cancel_requested_ || cut_ || pending_ == 0) return;
    cut_ = true;
    const std::size_t k = arrived_prefix();
    p.take(records_, k);
    for (std::size_t i = k; i < records_.size(); ++i) {
      const facade::OnboardRecord& r = records_[i];
      if (r.below() && r.target && !r.failed) ++abandoned;
    }
    if (pending_ == 1 && remote_outstanding_) pending_ = 0;  // the stage adopts nothing now
    release_now = pending_ == 0;
    quarantine_ = !release_now;
  }
  TierArray<std::size_t> per_tier{};
  std::vector<TierId> origins;
  std::vector<ImmutableBlock<G1>> out = p.register_in(*g1, per_tier, origins);
  if (release_now) records_.release();  // no copy is out: nothing else touches them
  end_cut(std::move(out), per_tier, std::move(origins), abandoned, std::move(why));
}

void OnboardState::end_cut(std::vector<ImmutableBlock<G1>>&& out, TierArray<std::size_t> per_tier,
                           std::vector<TierId>&& origins, std::size_t abandoned,
                           std::optional<Error> why) noexcept {
  if (counters.abandoned != nullptr) {
    for (const TierId t : kTierIds) {
      if (auto* counter = counters.from_tier[t])
        counter->Increment(static_cast<double>(per_tier[t]));
    }
    counters.abandoned->Increment(static_cast<double>(abandoned));
  }
  LockGuard lock(mu_);
  counts_ = OnboardCounts{.found = per_tier};
  counts_.no_space = no_space_;
  counts_.abandoned = abandoned;
  if (why && !error_) error_ = std::move(why);
  origins_ = std::move(origins);
  blocks_ = std::move(out);
  status_ = TransferStatus::kDone;
  cv_.notify_all();
}

// Called under the mutex by each step that reports after a cut; the last one
// lets every record go (outside the mutex: releasing takes the pools' locks).
bool OnboardState::last_step_after_cut() noexcept { return pending_ > 0 && --pending_ == 0; }

void OnboardState::release_after_cut() noexcept {
  records_.release();  // the quarantined targets go back to the reset pool
  LockGuard lock(mu_);
  quarantine_ = false;
  cv_.notify_all();
}

bool OnboardState::settled() const {
  LockGuard lock(mu_);
  return is_terminal(status_) && !quarantine_;
}

void OnboardState::wait_settled() {
  wait();
  UniqueLock lock(mu_);
  cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return !quarantine_; });
}

// While steps are out the records say; otherwise it is over or finishing
// (the records are finish()'s or a cut's), and the counts will say.
std::size_t OnboardState::arrived() {
  {
    LockGuard lock(mu_);
    if (!is_terminal(status_) && pending_ > 0 && !cut_) return arrived_prefix();
  }
  wait();
  LockGuard lock(mu_);
  return counts_.total();
}
bool OnboardState::cancel() {
  {
    UniqueLock lock(mu_);
    if (is_terminal(status_)) return status_ == TransferStatus::kCancelled;
    cancel_requested_ = true;
    if (pending_ == 1 && remote_outstanding_) {
      // Every copy is back; only the remote stage is out, maybe waiting on
      // G4: end now (it releases what it brings when it reports).
      pending_ = 0;
      lock.unlock();
      records_.release();
      lock.lock();
      end_cancelled();
      return true;
    }
  }
  return wait() == TransferStatus::kCancelled;
}

void OnboardState::abandon() noexcept {
  std::vector<ImmutableBlock<G1>> drop;
  {
    LockGuard lock(mu_);
    if (!is_terminal(status_)) {
      cancel_requested_ = true;
      return;
    }
    drop = std::move(blocks_);
    blocks_.clear();
  }
  release_tail_first(drop);
}

std::vector<ImmutableBlock<G1>> OnboardState::take_arrived() {
  cut(std::nullopt);
  return take_blocks();
}

std::vector<ImmutableBlock<G1>> OnboardState::take_blocks() {
  wait();
  LockGuard lock(mu_);
  return std::move(blocks_);
}

OnboardCounts OnboardState::counts() {
  wait();
  LockGuard lock(mu_);
  return counts_;
}

std::vector<TierId> OnboardState::origins() {
  wait();
  LockGuard lock(mu_);
  return origins_;
}

std::optional<Error> OnboardState::error() {
  wait();
  LockGuard lock(mu_);
  return error_;
}

}  // namespace kvbm::detail

namespace kvbm {

void OnboardHandle::abandon() noexcept {
  if (s_) std::exchange(s_, nullptr)->abandon();
}
TransferStatus OnboardHandle::status() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::status on an empty handle");
  return s_->status();
}
TransferStatus OnboardHandle::wait() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::wait on an empty handle");
  return s_->wait();
}
bool OnboardHandle::wait_for(std::chrono::nanoseconds timeout) const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::wait_for on an empty handle");
  return s_->wait_for(timeout);
}
bool OnboardHandle::cancel() {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::cancel on an empty handle");
  return s_->cancel();
}
std::vector<ImmutableBlock<G1>> OnboardHandle::take_blocks() {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::take_blocks on an empty handle");
  return s_->take_blocks();
}
std::size_t OnboardHandle::arrived() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::arrived on an empty handle");
  return s_->arrived();
}
std::vector<ImmutableBlock<G1>> OnboardHandle::take_arrived() {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::take_arrived on an empty handle");
  return s_->take_arrived();
}
OnboardCounts OnboardHandle::counts() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::counts on an empty handle");
  return s_->counts();
}
std::vector<TierId> OnboardHandle::sources() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::sources on an empty handle");
  return s_->origins();
}
std::optional<OnboardPlan> OnboardHandle::plan() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::plan on an empty handle");
  return s_->plan;
}
std::optional<Error> OnboardHandle::error() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::error on an empty handle");
  return s_->error();
}

}  // namespace kvbm
