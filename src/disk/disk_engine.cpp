#include "kvbm/disk/disk_engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "kvbm/detail/mutex.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm {
namespace detail {

/// The worker pool and queue shared by both disk engines.
class DiskEngineCore {
 public:
  DiskEngineCore(DiskDirection direction, Layout host, DiskStorage& disk,
                 const DiskEngineOptions& options)
      : direction_(direction),
        host_(std::move(host)),
        disk_(disk),
        name_(!options.name.empty()                 ? options.name
              : direction == DiskDirection::kToDisk ? "host_to_disk"
                                                    : "disk_to_host"),
        queue_depth_(options.queue_depth),
        io_slots_(static_cast<std::ptrdiff_t>(std::min<std::size_t>(options.queue_depth, 256))) {
    KVBM_CHECK(
        host_.config() == disk_.config(), name(),
        " engine: the host layout's LayoutConfig differs from the disk pool's; a block must have "
        "the same shape on both sides");
    KVBM_CHECK(options.queue_depth >= 1 && options.queue_depth <= 256, name(),
               " engine: DiskEngineOptions::queue_depth is ", options.queue_depth,
               "; use 1 to 256");
    const std::size_t workers = options.workers == 0 ? 2 * options.queue_depth : options.workers;
    KVBM_CHECK(workers >= options.queue_depth && workers <= 512, name(),
               " engine: DiskEngineOptions::workers is ", options.workers,
               "; use 0 (2 x queue_depth) or ", options.queue_depth,
               " (queue_depth) to 512: fewer workers than queue_depth could never fill the queue");
    if (options.registry) metrics_ = std::make_unique<TransferMetrics>(options.registry, name_);
    staging_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) {
      void* p = std::aligned_alloc(DiskStorage::kAlignment, disk_.slot_bytes());
      if (p == nullptr) throw std::bad_alloc();
      std::memset(p, 0, disk_.slot_bytes());  // fault the pages in now, not on the first transfer
      staging_.emplace_back(static_cast<std::byte*>(p));
    }
    threads_.reserve(workers);
    try {
      for (std::size_t i = 0; i < workers; ++i)
        threads_.emplace_back([this, i] { worker_main(i); });
    } catch (const std::exception&) {  // system_error or bad_alloc: stop the ones started, rethrow
      stop_and_join();
      throw;
    }
  }

  ~DiskEngineCore() { stop_and_join(); }
  DiskEngineCore(const DiskEngineCore&) = delete;
  DiskEngineCore& operator=(const DiskEngineCore&) = delete;

  [[nodiscard]] std::string_view name() const noexcept { return name_; }

  [[nodiscard]] std::size_t src_blocks() const noexcept {
    return direction_ == DiskDirection::kToDisk ? host_.num_blocks() : disk_.num_blocks();
  }
  [[nodiscard]] std::size_t dst_blocks() const noexcept {
    return direction_ == DiskDirection::kToDisk ? disk_.num_blocks() : host_.num_blocks();
  }

  /// Queues a batch the engine has checked (TransferEngine::check_batch).
  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair> pairs) {
    auto batch = std::make_shared<Batch>();
    batch->pairs.assign(pairs.begin(), pairs.end());
    batch->failed.assign(pairs.size(), 0);
    batch->errors.resize(pairs.size());
    Stage stage = Stage::kOnce;
    if (direction_ == DiskDirection::kToDisk && disk_.persistent()) {
      // The durable order, stage by stage (docs/disk_tier.md): invalidate
      // live headers, sync, payloads, sync, headers, sync.
      batch->checksums.assign(pairs.size(), 0);
      batch->touched.assign(pairs.size(), 0);
      const bool any_live = std::any_of(pairs.begin(), pairs.end(), [&](const TransferPair& p) {
        return disk_.header_may_be_live(p.dst);
      });
      stage = any_live ? Stage::kInvalidate : Stage::kPayload;
    }
    batch->remaining.store(pairs.size(), std::memory_order_relaxed);
    batch->completion = std::make_shared<TransferCompletion>();
    auto completion = batch->completion;
    {
      detail::LockGuard lock(mu_);
      queue_.push_back({std::move(batch), stage, 0});
    }
    cv_.notify_all();
    return completion;
  }

  [[nodiscard]] DiskEngineStats stats() const noexcept {
    return {batches_.load(std::memory_order_relaxed), blocks_.load(std::memory_order_relaxed),
            failed_blocks_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed),
            unstaged_writes_.load(std::memory_order_relaxed)};
  }

  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept {
    if (!metrics_) return std::nullopt;
    return metrics_->counts();
  }

  [[nodiscard]] std::size_t workers() const noexcept { return threads_.size(); }
  [[nodiscard]] std::size_t queue_depth() const noexcept { return queue_depth_; }

 private:
  /// What the workers do to a batch's pairs now. Scratch writes and reads
  /// take one stage; persistent writes three, with an fdatasync between them.
  enum class Stage : std::uint8_t { kOnce, kInvalidate, kPayload, kHeader };

  struct Batch {
    std::vector<TransferPair> pairs;
    std::vector<char> failed;           // element i written only by the worker that runs pair i
    std::vector<TransferError> errors;  // likewise; meaningful where failed[i]
    std::vector<std::uint64_t>
        checksums;              // persistent writes: the payload checksum of pair i; likewise
    std::vector<char> touched;  // persistent writes: pair i wrote in this stage; likewise
    std::atomic<std::size_t> remaining{0};  // pairs of the current stage not yet run
    std::shared_ptr<TransferCompletion> completion;
  };

  /// A batch waiting in the queue for one stage: workers take its pairs in
  /// order, `next` first.
  struct Queued {
    std::shared_ptr<Batch> batch;
    Stage stage = Stage::kOnce;
    std::size_t next = 0;
  };

  /// A counting semaphore on a mutex and a condition variable.
  /// (std::counting_semaphore of GCC 12's libstdc++ can miss a wake-up and
  /// leave a worker blocked for good; this one cannot.)
  class Semaphore {
   public:
    explicit Semaphore(std::ptrdiff_t count) : count_(count) {}
    void acquire() {
      detail::UniqueLock lock(mu_);
      cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return count_ > 0; });
      --count_;
    }
    void release() {
      {
        detail::LockGuard lock(mu_);
        ++count_;
      }
      cv_.notify_one();
    }

   private:
    detail::Mutex mu_;
    std::condition_variable cv_;
    std::ptrdiff_t count_ KVBM_GUARDED_BY(mu_);
  };

  /// Holds one of the queue_depth I/O slots for a scope.
  class IoSlot {
   public:
    explicit IoSlot(Semaphore& s) : s_(s) { s_.acquire(); }
    ~IoSlot() { s_.release(); }
    IoSlot(const IoSlot&) = delete;
    IoSlot& operator=(const IoSlot&) = delete;

   private:
    Semaphore& s_;
  };

  struct FreeAligned {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  void stop_and_join() noexcept {
    {
      detail::LockGuard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  void worker_main(std::size_t index) noexcept {
    const std::span<std::byte> staging(staging_[index].get(), disk_.slot_bytes());
    std::vector<Region> regions;
    regions.reserve(disk_.config().regions_per_block());
    for (;;) {
      std::shared_ptr<Batch> batch;
      Stage stage = Stage::kOnce;
      std::size_t i = 0;
      {
        detail::UniqueLock lock(mu_);
        cv_.wait(lock.native(), [&]() KVBM_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and every accepted batch has been taken
        Queued& q = queue_.front();
        batch = q.batch;
        stage = q.stage;
        i = q.next++;
        if (q.next == batch->pairs.size()) queue_.pop_front();
      }
      if (stage == Stage::kOnce) {
        run_pair(*batch, i, staging, regions);
      } else {
        run_stage(*batch, stage, i, staging, regions);
      }
      if (batch->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) end_stage(batch, stage);
    }
  }

  void run_pair(Batch& batch, std::size_t i, std::span<std::byte> staging,
                std::vector<Region>& regions) noexcept {
    const TransferPair pair = batch.pairs[i];
    try {
      const BlockId host_block = direction_ == DiskDirection::kToDisk ? pair.src : pair.dst;
      regions.clear();
      if (host_.kind() == LayoutKind::kFullyContiguous) {
        regions.push_back(host_.block_region(host_block));
      } else {
        host_.append_regions(host_block, regions);
      }
      io::IoStatus status;
      if (direction_ == DiskDirection::kToDisk && disk_.can_write_from(regions)) {
        // Straight from host memory: checksum the regions where they lie and
        // pwritev them with the sealed tail (the kernel copies or DMAs once).
        const auto tail = staging.first(disk_.tail_bytes());
        disk_.seal_tail(pair.dst, DiskStorage::checksum(regions), tail, pair.hash);
        {
          IoSlot slot(io_slots_);
          status = disk_.pwrite_slot_from(pair.dst, regions, tail);
        }
        if (status) unstaged_writes_.fetch_add(1, std::memory_order_relaxed);
      } else if (direction_ == DiskDirection::kToDisk) {
        // Unaligned for O_DIRECT: gather into the aligned staging buffer.
        std::byte* out = staging.data();
        for (const Region& r : regions) {
          std::memcpy(out, reinterpret_cast<const void*>(r.addr), r.size);
          out += r.size;
        }
        disk_.seal_slot(pair.dst, staging, pair.hash);
        {
          IoSlot slot(io_slots_);
          status = disk_.pwrite_slot(pair.dst, staging);
        }
      } else {
        {
          IoSlot slot(io_slots_);
          status = disk_.pread_slot(pair.src, staging);
        }
        if (status) status = disk_.verify_slot(pair.src, staging, pair.hash);
        if (status) {
          const std::byte* in = staging.data();
          for (const Region& r : regions) {
            std::memcpy(reinterpret_cast<void*>(r.addr), in, r.size);
            in += r.size;
          }
        }
      }
      if (status) return;
      fail(batch, i, status);
    } catch (const std::exception& e) {
      fail(batch, i, e);
    }
  }

  /// Marks pair i failed by an I/O error.
  static void fail(Batch& batch, std::size_t i, const io::IoStatus& status) noexcept {
    batch.failed[i] = 1;
    TransferError& error = batch.errors[i];
    error.kind = error_kind_of_errno(status.code());
    error.code = status.code();
    try {
      error.message = status.message();
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): the kind and code still tell
    }
  }

  /// Marks pair i failed by an exception: no memory, or a bug (kInternal;
  /// finish() logs it as an error).
  static void fail(Batch& batch, std::size_t i, const std::exception& e) noexcept {
    batch.failed[i] = 1;
    TransferError& error = batch.errors[i];
    error.kind = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ? ErrorKind::kNoMemory
                                                                    : ErrorKind::kInternal;
    error.code = 0;
    try {
      error.message = std::string("internal error: ") + e.what();
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): the kind still tells
    }
  }

  /// One pair's share of a persistent write stage. A pair that failed in an
  /// earlier stage is skipped.
  void run_stage(Batch& batch, Stage stage, std::size_t i, std::span<std::byte> staging,
                 std::vector<Region>& regions) noexcept {
    const TransferPair pair = batch.pairs[i];
    batch.touched[i] = 0;
    if (batch.failed[i] != 0) return;
    try {
      io::IoStatus status;
      switch (stage) {
        case Stage::kInvalidate:
          if (disk_.header_may_be_live(pair.dst)) {
            batch.touched[i] = 1;
            IoSlot slot(io_slots_);
            status = disk_.invalidate_header(pair.dst);
          }
          break;
        case Stage::kPayload: {
          regions.clear();
          if (host_.kind() == LayoutKind::kFullyContiguous) {
            regions.push_back(host_.block_region(pair.src));
          } else {
            host_.append_regions(pair.src, regions);
          }
          batch.touched[i] = 1;
          if (disk_.can_write_from(regions)) {
            const auto tail = staging.first(disk_.tail_bytes());
            batch.checksums[i] = DiskStorage::checksum(regions);
            disk_.seal_tail(pair.dst, batch.checksums[i], tail, pair.hash);
            IoSlot slot(io_slots_);
            status = disk_.pwrite_payload_from(pair.dst, regions, tail);
            if (status) unstaged_writes_.fetch_add(1, std::memory_order_relaxed);
          } else {
            std::byte* out = staging.data();
            for (const Region& r : regions) {
              std::memcpy(out, reinterpret_cast<const void*>(r.addr), r.size);
              out += r.size;
            }
            batch.checksums[i] = DiskStorage::checksum(staging.first(disk_.block_bytes()));
            disk_.seal_tail(pair.dst, batch.checksums[i], staging.subspan(disk_.block_bytes()),
                            pair.hash);
            IoSlot slot(io_slots_);
            status = disk_.pwrite_payload(pair.dst, staging);
          }
          break;
        }
        case Stage::kHeader: {
          const auto sector = staging.first(DiskStorage::kHeaderSectorBytes);
          disk_.seal_header(pair.dst, batch.checksums[i], sector, pair.hash);
          batch.touched[i] = 1;
          IoSlot slot(io_slots_);
          status = disk_.pwrite_header(pair.dst, sector);
          break;
        }
        case Stage::kOnce:
          break;
      }
      if (status) return;
      fail(batch, i, status);
    } catch (const std::exception& e) {
      fail(batch, i, e);
    }
  }

  /// Runs by the worker that finished the last pair of `stage`: the stage's
  /// fdatasync, then the next stage (queued at the front) or the outcome.
  void end_stage(const std::shared_ptr<Batch>& batch, Stage stage) noexcept {
    Batch& b = *batch;
    const std::size_t n = b.pairs.size();
    auto any = [&](auto pred) {
      for (std::size_t i = 0; i < n; ++i) {
        if (pred(i)) return true;
      }
      return false;
    };
    // Makes the stage's writes durable; on failure every pair still standing fails.
    auto sync_or_fail = [&]() noexcept {
      const io::IoStatus st = disk_.sync();
      if (st) return true;
      for (std::size_t i = 0; i < n; ++i) {
        if (b.failed[i] == 0) fail(b, i, st);
      }
      return false;
    };
    Stage next = Stage::kOnce;
    switch (stage) {
      case Stage::kOnce:
        break;
      case Stage::kInvalidate:
        if (any([&](std::size_t i) { return b.touched[i] != 0; }) && !sync_or_fail()) break;
        for (std::size_t i = 0; i < n; ++i) {
          if (b.touched[i] != 0 && b.failed[i] == 0) disk_.note_invalidated(b.pairs[i].dst);
        }
        next = Stage::kPayload;
        break;
      case Stage::kPayload:
        if (any([&](std::size_t i) { return b.failed[i] == 0; }) && sync_or_fail())
          next = Stage::kHeader;
        break;
      case Stage::kHeader:
        if (any([&](std::size_t i) { return b.touched[i] != 0; })) (void)sync_or_fail();
        break;
    }
    if (next == Stage::kOnce || !any([&](std::size_t i) { return b.failed[i] == 0; })) {
      finish(b);
      return;
    }
    b.remaining.store(n, std::memory_order_release);
    try {
      detail::LockGuard lock(mu_);
      queue_.push_front({batch, next, 0});
    } catch (const std::exception& e) {  // bad_alloc (or the mutex's system_error)
      // Fail what remains rather than lose the batch.
      for (std::size_t i = 0; i < n; ++i) {
        if (b.failed[i] == 0) fail(b, i, e);
      }
      finish(b);
      return;
    }
    cv_.notify_all();
  }

  void finish(Batch& batch) noexcept {
    TransferOutcome outcome;
    std::uint64_t ok = 0;
    try {
      for (std::size_t i = 0; i < batch.pairs.size(); ++i) {
        if (batch.failed[i] == 0) {
          ++ok;
          continue;
        }
        if (outcome.failed.empty()) {
          const TransferPair& p = batch.pairs[i];
          TransferError error = std::move(batch.errors[i]);
          error.message =
              std::string(name()) + ": pair " + std::to_string(i) + " (block " +
              std::to_string(p.src) + " -> " + std::to_string(p.dst) +
              "): " + (error.message.empty() ? std::string(to_string(error.kind)) : error.message);
          outcome.error = std::move(error);
        }
        outcome.failed.push_back(i);
      }
    } catch (const std::bad_alloc&) {
      // Out of memory while describing the failure: report every pair failed
      // rather than risk calling a failed pair good.
      ok = 0;
      outcome = TransferOutcome::all_failed_no_memory(
          batch.pairs.size(), "out of memory while reporting the batch's outcome");
    }
    const std::uint64_t failed = batch.pairs.size() - ok;
    batches_.fetch_add(1, std::memory_order_relaxed);
    blocks_.fetch_add(ok, std::memory_order_relaxed);
    failed_blocks_.fetch_add(failed, std::memory_order_relaxed);
    bytes_.fetch_add(ok * disk_.block_bytes(), std::memory_order_relaxed);
    if (metrics_) metrics_->add(ok, ok * disk_.block_bytes(), failed);
    if (failed != 0 && outcome.error) {
      try {
        if (outcome.error->kind == ErrorKind::kInternal) {
          logger()->error("{}: {} of {} pairs failed; first: {}", name(), failed,
                          batch.pairs.size(), outcome.error->message);
        } else {
          logger()->warn("{}: {} of {} pairs failed; first: {}", name(), failed, batch.pairs.size(),
                         outcome.error->message);
        }
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): a worker never throws; the
                                         // outcome tells
      }
    }
    batch.completion->complete(std::move(outcome));
  }

  const DiskDirection direction_;
  const Layout host_;
  DiskStorage& disk_;
  const std::string name_;
  std::unique_ptr<TransferMetrics> metrics_;  // null: no registry
  const std::size_t queue_depth_;
  Semaphore io_slots_;  // queue_depth_ I/Os in flight at most
  std::vector<std::unique_ptr<std::byte, FreeAligned>> staging_;  // one per worker

  detail::Mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_ KVBM_GUARDED_BY(mu_);
  bool stopping_ KVBM_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;

  std::atomic<std::uint64_t> batches_{0};
  std::atomic<std::uint64_t> blocks_{0};
  std::atomic<std::uint64_t> failed_blocks_{0};
  std::atomic<std::uint64_t> bytes_{0};
  std::atomic<std::uint64_t> unstaged_writes_{0};
};

}  // namespace detail

DiskEngine::DiskEngine(DiskDirection direction, Layout host, DiskStorage& disk,
                       DiskEngineOptions options)
    : direction_(direction),
      core_(std::make_unique<detail::DiskEngineCore>(direction, std::move(host), disk, options)) {}
DiskEngine::~DiskEngine() = default;
std::string_view DiskEngine::name() const noexcept { return core_->name(); }
std::optional<TransferCounts> DiskEngine::counts() const noexcept { return core_->counts(); }
std::shared_ptr<TransferCompletion> DiskEngine::submit(std::span<const TransferPair> pairs) {
  check_batch(name(), pairs, core_->src_blocks(), core_->dst_blocks());
  return core_->submit(pairs);
}
DiskEngineStats DiskEngine::stats() const noexcept { return core_->stats(); }
std::size_t DiskEngine::workers() const noexcept { return core_->workers(); }
std::size_t DiskEngine::queue_depth() const noexcept { return core_->queue_depth(); }

}  // namespace kvbm
