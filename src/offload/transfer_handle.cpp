#include "kvbm/offload/transfer_handle.h"

#include <utility>

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "kvbm/offload/offload_metrics.h"

namespace kvbm {

std::string_view to_string(TransferStatus s) noexcept {
  switch (s) {
    case TransferStatus::kQueued:
      return "queued";
    case TransferStatus::kWaiting:
      return "waiting";
    case TransferStatus::kBatched:
      return "batched";
    case TransferStatus::kTransferring:
      return "transferring";
    case TransferStatus::kDone:
      return "done";
    case TransferStatus::kFailed:
      return "failed";
    case TransferStatus::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string_view to_string(BlockOutcome o) noexcept {
  switch (o) {
    case BlockOutcome::kTransferred:
      return "transferred";
    case BlockOutcome::kAlreadyPresent:
      return "already_present";
    case BlockOutcome::kFiltered:
      return "filtered";
    case BlockOutcome::kEvicted:
      return "evicted";
    case BlockOutcome::kNoSpace:
      return "no_space";
    case BlockOutcome::kCopyFailed:
      return "copy_failed";
  }
  return "unknown";
}

std::size_t OffloadReport::count(BlockOutcome o) const noexcept {
  std::size_t n = 0;
  for (const auto& b : blocks) n += b.outcome == o ? 1 : 0;
  return n;
}

std::vector<SequenceHash> OffloadReport::hashes(BlockOutcome o) const {
  std::vector<SequenceHash> out;
  for (const auto& b : blocks) {
    if (b.outcome == o) out.push_back(b.hash);
  }
  return out;
}

std::vector<BlockResult> OffloadReport::failed() const {
  std::vector<BlockResult> out;
  for (const auto& b : blocks) {
    if (is_failure(b.outcome)) out.push_back(b);
  }
  return out;
}

namespace detail {

void OffloadState::advance(TransferStatus s) {
  detail::LockGuard lock(mu_);
  if (is_terminal(status_) || is_terminal(s) || s <= status_) return;
  status_ = s;
}

void OffloadState::add_result(const SequenceHash& hash, BlockOutcome o) {
  detail::LockGuard lock(mu_);
  if (is_terminal(status_)) return;
  report_.blocks.push_back(BlockResult{hash, o});
  failed_ = failed_ || is_failure(o);
}

void OffloadState::add_error(Error error) {
  detail::LockGuard lock(mu_);
  if (is_terminal(status_) || report_.error) return;
  report_.error = std::move(error);
}

void OffloadState::finish() {
  detail::LockGuard lock(mu_);
  finish_locked(failed_ ? TransferStatus::kFailed : TransferStatus::kDone);
}

void OffloadState::finish_cancelled() {
  detail::LockGuard lock(mu_);
  finish_locked(TransferStatus::kCancelled);
}

void OffloadState::finish_locked(TransferStatus s) {
  if (is_terminal(status_)) return;
  status_ = s;
  if (const auto m = metrics_.lock()) {
    std::size_t counts[6] = {};
    for (const auto& b : report_.blocks) ++counts[static_cast<std::size_t>(b.outcome)];
    for (std::size_t i = 0; i < 6; ++i) m->add_blocks(static_cast<BlockOutcome>(i), counts[i]);
    if (s == TransferStatus::kCancelled) m->add_cancelled();
  }
  cv_.notify_all();  // under the lock: a waiter may destroy the state once it sees the status
}

TransferStatus OffloadState::status() const {
  detail::LockGuard lock(mu_);
  return status_;
}

OffloadReport OffloadState::report() const {
  detail::LockGuard lock(mu_);
  return report_;
}

void OffloadState::note_waiter() const {
  if (is_terminal(status())) return;  // nothing left to hurry (a cancel's own wait)
  if (waited_.exchange(true, std::memory_order_acq_rel)) return;  // told once
  if (const auto link = wait_link_.lock()) link->notify();
}

TransferStatus OffloadState::wait_for(std::chrono::nanoseconds timeout) const {
  if (timeout.count() > 0) note_waiter();
  detail::UniqueLock lock(mu_);
  cv_.wait_for(lock.native(), timeout, [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
  return status_;
}

TransferStatus OffloadState::wait() const {
  note_waiter();
  detail::UniqueLock lock(mu_);
  cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return is_terminal(status_); });
  return status_;
}

}  // namespace detail

void TransferHandle::check(const char* call) const {
  KVBM_CHECK(s_ != nullptr, "TransferHandle::", call,
             "() called on an empty handle; use the handle enqueue() returned");
}

TransferStatus TransferHandle::status() const {
  check("status");
  return s_->status();
}

std::size_t TransferHandle::block_count() const {
  check("block_count");
  return s_->block_count();
}

TransferStatus TransferHandle::wait() const {
  check("wait");
  return s_->wait();
}

bool TransferHandle::wait_for(std::chrono::nanoseconds timeout) const {
  check("wait_for");
  return is_terminal(s_->wait_for(timeout));
}

bool TransferHandle::cancel() const {
  check("cancel");
  // Before the seal nothing of the container is pinned (it holds weak
  // references only), so winning the token is enough to end it; after the
  // seal the executor owns it and will finish it: wait for that.
  if (s_->token.cancel()) s_->finish_cancelled();
  return s_->wait() == TransferStatus::kCancelled;
}

OffloadReport TransferHandle::report() const {
  check("report");
  return s_->report();
}

std::vector<BlockResult> TransferHandle::failed_blocks() const {
  check("failed_blocks");
  return s_->report().failed();
}

const CancellationToken& TransferHandle::token() const {
  check("token");
  return s_->token;
}

}  // namespace kvbm
