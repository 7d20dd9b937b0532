// src/facade/onboard_state.cpp: one onboarding and its handle (facade/onboard_state.h).

#include "facade/onboard_state.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include <prometheus/counter.h>

#include "kvbm/blocks/release_order.h"
#include "kvbm/error.h"
#include "kvbm/transfer/stage_and_register.h"

namespace kvbm::detail {

void OnboardState::on_batch(const TransferOutcome& o,
                            const std::vector<std::size_t>& positions) noexcept {
  bool last = false;
  {
    LockGuard lock(mu_);
    if (failed_.size() < below.size()) failed_.resize(below.size(), false);
    for (const auto k : o.failed) {
      if (k < positions.size()) failed_[positions[k]] = true;
    }
    if (!o.ok() && !error_)
      error_ = o.error ? *o.error : Error{ErrorKind::kInternal, 0, "copy failed"};
    last = --pending_ == 0;
  }
  if (last) finish();
}

void OnboardState::on_remote(facade::RemoteFetch&& fetch) noexcept {
  bool last = false;
  {
    LockGuard lock(mu_);
    remote_outstanding_ = false;
    // Cancelled while it asked G4 (cancel() ended it): `fetch` is released.
    if (is_terminal(status_) || pending_ == 0) return;
    remote_ = std::move(fetch);
    if (remote_.error && !error_) error_ = remote_.error;
    last = --pending_ == 0;
  }
  if (last) finish();
}

bool OnboardState::cancelling() const {
  LockGuard lock(mu_);
  return cancel_requested_;
}

void OnboardState::finish() noexcept {
  UniqueLock lock(mu_);
  failed_.resize(below.size(), false);
  if (cancel_requested_) {
    lock.unlock();
    release_all();
    lock.lock();
    end_cancelled();
    return;
  }
  const bool any_failed =
      std::find(failed_.begin(), failed_.end(), true) != failed_.end() || remote_.failed > 0;
  lock.unlock();
  TierArray<std::size_t> per_tier{};
  std::size_t failed = 0;
  std::vector<TierId> origins;
  std::vector<ImmutableBlock<G1>> out = assemble(per_tier, failed, origins);
  OnboardCounts c{.found = per_tier};
  c.failed = failed;
  c.no_space = no_space_ + remote_.no_space;
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
// registering each in turn leaves it. Per target: its block, or nullopt when
// its copy failed or it could not be registered (it went back to the reset pool).
std::vector<std::optional<ImmutableBlock<G1>>> OnboardState::register_arrived() noexcept {
  std::vector<std::optional<ImmutableBlock<G1>>> arrived(targets.size());
  try {
    const std::uint32_t block_size = g1->block_size();
    std::vector<CompleteBlock<G1>> staged;
    std::vector<std::size_t> at;
    staged.reserve(targets.size());
    at.reserve(targets.size());
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!failed_.empty() && failed_[i]) continue;
      auto s = std::move(targets[i]).stage(below[i].hash, block_size);
      if (!s.ok()) continue;
      staged.push_back(std::move(s).value());
      at.push_back(i);
    }
    auto registered = g1->register_copies(std::move(staged));
    for (std::size_t k = 0; k < registered.size(); ++k) arrived[at[k]] = std::move(registered[k]);
  } catch (const std::exception& e) {
    detail::log_unregistered_copies(tier_name<G1>(), targets.size(), e.what());
  }
  return arrived;
}

// Every copy that arrived is registered (it is a valid G1 block); the prefix
// handed back ends before the first copy that did not. The remote tier's
// copies come after the walk's positions, when every one of those arrived.
std::vector<ImmutableBlock<G1>> OnboardState::assemble(TierArray<std::size_t>& per_tier,
                                                       std::size_t& failed,
                                                       std::vector<TierId>& origins) noexcept {
  std::vector<std::optional<ImmutableBlock<G1>>> arrived = register_arrived();
  for (const auto& a : arrived) failed += a ? 0 : 1;  // its target went back to the reset pool
  failed += remote_.failed;
  std::vector<ImmutableBlock<G1>> out;
  out.reserve(walk.size() + remote_.blocks.size());
  origins.reserve(walk.size() + remote_.blocks.size());
  std::size_t next_hit = 0, next_below = 0;
  bool whole = true;
  for (const TierId tier : walk) {
    if (tier == TierId::kG1) {
      out.push_back(std::move(hits[next_hit++]));
      origins.push_back(TierId::kG1);
      ++per_tier[TierId::kG1];
      continue;
    }
    auto& copy = arrived[next_below++];
    if (!copy) {
      whole = false;
      break;
    }
    out.push_back(std::move(*copy));
    origins.push_back(tier);
    ++per_tier[tier];
  }
  for (std::size_t i = 0; whole && i < remote_.blocks.size(); ++i) {
    const TierId from = remote_.origins[i];
    out.push_back(std::move(remote_.blocks[i]));
    origins.push_back(from);
    ++per_tier[from];
  }
  release_tail_first(hits);
  release_tail_first(arrived);
  targets.clear();
  release_tail_first(remote_.blocks);
  release_sources();
  return out;
}

void OnboardState::end_cancelled() noexcept {
  status_ = TransferStatus::kCancelled;
  if (counters.cancelled) counters.cancelled->Increment();
  cv_.notify_all();
}

TransferStatus OnboardState::status() const {
  LockGuard lock(mu_);
  return status_;
}

TransferStatus OnboardState::wait() const {
  UniqueLock lock(mu_);
  cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
  return status_;
}

bool OnboardState::wait_for(std::chrono::nanoseconds t) const {
  UniqueLock lock(mu_);
  return cv_.wait_for(lock.native(), t, [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
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
      release_all();
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

std::vector<ImmutableBlock<G1>> OnboardState::take_blocks() {
  wait();
  LockGuard lock(mu_);
  return std::move(blocks_);
}

OnboardCounts OnboardState::counts() const {
  wait();
  LockGuard lock(mu_);
  return counts_;
}

std::vector<TierId> OnboardState::origins() const {
  wait();
  LockGuard lock(mu_);
  return origins_;
}

std::optional<Error> OnboardState::error() const {
  wait();
  LockGuard lock(mu_);
  return error_;
}

// Last first: the prefix's later blocks are released before its earlier ones.
void OnboardState::release_sources() noexcept {
  while (!holds.empty()) holds.pop_back();
}

void OnboardState::release_all() noexcept {
  release_tail_first(hits);
  targets.clear();
  release_tail_first(remote_.blocks);
  release_sources();
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
OnboardCounts OnboardHandle::counts() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::counts on an empty handle");
  return s_->counts();
}
std::vector<TierId> OnboardHandle::sources() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::sources on an empty handle");
  return s_->origins();
}
std::optional<Error> OnboardHandle::error() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::error on an empty handle");
  return s_->error();
}

}  // namespace kvbm
