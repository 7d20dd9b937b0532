// src/disk/disk_intake.h: a submitted disk batch, and the queue both disk
// engines take its pairs from (private to src/).
//
// A submitted batch waits at the back for its first stage; a persistent
// write's next stage goes to the front, so that a batch already started ends
// before newer ones begin. Takers (the pool's workers, the ring's thread) get
// the pairs of the front batch in order, one (batch, stage, pair) at a time.

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/transfer/transfer_engine.h"

namespace kvbm::detail {

/// What an engine does to a batch's pairs now. Reads and scratch writes take
/// one stage; persistent writes three, with an fdatasync between them.
enum class DiskStage : std::uint8_t { kOnce, kInvalidate, kPayload, kHeader };

/// One submitted batch. Element i of failed, errors, checksums and touched is
/// written only by whoever runs pair i in the current stage.
struct DiskBatch {
  std::vector<TransferPair> pairs;
  std::vector<char> failed;
  std::vector<TransferError> errors;      // meaningful where failed[i]
  std::vector<std::uint64_t> checksums;   // persistent writes: the payload checksum of pair i
  std::vector<char> touched;              // persistent writes: pair i wrote in this stage
  std::atomic<std::size_t> remaining{0};  // pairs of the current stage not yet run
  std::shared_ptr<TransferCompletion> completion;
};

/// Marks pair i failed by an I/O error.
void fail_pair(DiskBatch& batch, std::size_t i, const io::IoStatus& status) noexcept;
/// Marks pair i failed by an exception: no memory, or a bug (kInternal).
void fail_pair(DiskBatch& batch, std::size_t i, const std::exception& e) noexcept;

/// One pair of a batch to run in a stage.
struct DiskTask {
  std::shared_ptr<DiskBatch> batch;
  DiskStage stage = DiskStage::kOnce;
  std::size_t i = 0;
};

/// The batches waiting for a taker, under one mutex and condition variable.
class DiskIntake {
 public:
  /// Queues a new batch's first stage behind what is queued.
  void push_back(std::shared_ptr<DiskBatch> batch, DiskStage stage) {
    {
      LockGuard lock(mu_);
      queue_.push_back({std::move(batch), stage, 0});
    }
    cv_.notify_all();
  }

  /// Queues a started batch's next stage ahead of what is queued. Throws
  /// std::bad_alloc (the caller fails the batch rather than lose it).
  void push_front(std::shared_ptr<DiskBatch> batch, DiskStage stage) {
    {
      LockGuard lock(mu_);
      queue_.push_front({std::move(batch), stage, 0});
    }
    cv_.notify_all();
  }

  /// Appends up to `max` queued pairs to `out`, in order; with `block`, waits
  /// for one first. `out` must have room for `max` more without allocating.
  /// Returns false once stop() was called and nothing is left to take.
  bool take(std::size_t max, bool block, std::vector<DiskTask>& out) noexcept {
    UniqueLock lock(mu_);
    if (block) {
      cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return false;  // stopping, and every accepted batch has been taken
    }
    for (; max > 0 && !queue_.empty(); --max) {
      Queued& q = queue_.front();
      out.push_back({q.batch, q.stage, q.next++});
      if (q.next == q.batch->pairs.size()) queue_.pop_front();
    }
    return true;
  }

  /// Wakes every taker; blocking takes return false once the queue is empty.
  void stop() noexcept {
    {
      LockGuard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

 private:
  /// A batch waiting for one stage: its pairs are taken in order, `next` first.
  struct Queued {
    std::shared_ptr<DiskBatch> batch;
    DiskStage stage = DiskStage::kOnce;
    std::size_t next = 0;
  };

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_ KVBM_GUARDED_BY(mu_);
  bool stopping_ KVBM_GUARDED_BY(mu_) = false;
};

}  // namespace kvbm::detail
