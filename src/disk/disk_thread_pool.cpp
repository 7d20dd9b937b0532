// src/disk/disk_thread_pool.cpp: the thread-pool disk engine (DiskIoEngine::kThreadPool).
//
// workers threads (a detail::Worker running one loop per thread), each with a
// staging buffer of slot_bytes(), take a batch's pairs in order and make blocking pread/pwrite(v)
// calls through kvbm/io/syscalls.h; a semaphore keeps at most queue_depth of them in flight.

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "disk/disk_engine_impl.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/error.h"

namespace kvbm::detail {
namespace {

/// The worker pool and queue.
class DiskThreadPool final : public DiskEngineImpl {
 public:
  DiskThreadPool(DiskDirection direction, Layout host, DiskStorage& disk,
                 const DiskEngineOptions& options)
      : DiskEngineImpl(direction, std::move(host), disk, options),
        io_slots_(static_cast<std::ptrdiff_t>(options.queue_depth)) {
    const std::size_t workers = options.workers == 0 ? 2 * options.queue_depth : options.workers;
    KVBM_CHECK(workers >= options.queue_depth && workers <= DiskEngineOptions::kMaxWorkers, name(),
               " engine: DiskEngineOptions::workers is ", options.workers,
               "; use 0 (2 x queue_depth) or ", options.queue_depth,
               " (queue_depth) to 512: fewer workers than queue_depth could never fill the queue");
    staging_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) {
      void* p = std::aligned_alloc(DiskStorage::kAlignment, disk_.slot_bytes());
      if (p == nullptr) throw std::bad_alloc();
      std::memset(p, 0, disk_.slot_bytes());  // fault the pages in now, not on the first transfer
      staging_.emplace_back(static_cast<std::byte*>(p));
    }
    // Throws what starting a thread throws, having stopped the ones started.
    pool_ = std::make_unique<detail::Worker>(std::string(name()) + " disk pool", workers);
    for (std::size_t i = 0; i < workers; ++i) {
      (void)pool_->post([this, i] { worker_main(i); });  // one loop per thread, each its own
    }
  }

  ~DiskThreadPool() override { stop_and_join(); }
  DiskThreadPool(const DiskThreadPool&) = delete;
  DiskThreadPool& operator=(const DiskThreadPool&) = delete;

  [[nodiscard]] std::size_t workers() const noexcept override { return pool_->threads(); }
  [[nodiscard]] DiskIoEngine io_engine() const noexcept override {
    return DiskIoEngine::kThreadPool;
  }

 private:
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
    intake_.stop();
    pool_->stop();  // each loop returns once every batch has been taken
  }

  void worker_main(std::size_t index) noexcept {
    const std::span<std::byte> staging(staging_[index].get(), disk_.slot_bytes());
    std::vector<Region> regions;
    regions.reserve(disk_.config().regions_per_block());
    std::vector<DiskTask> task;
    task.reserve(1);  // take() never allocates
    for (;;) {
      if (!intake_.take(1, true, task)) return;  // stopping, and every batch has been taken
      const std::shared_ptr<DiskBatch> batch = std::move(task.back().batch);
      const DiskStage stage = task.back().stage;
      const std::size_t i = task.back().i;
      task.clear();
      if (stage == DiskStage::kOnce) {
        run_pair(*batch, i, staging, regions);
      } else {
        run_stage(*batch, stage, i, staging, regions);
      }
      if (batch->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) next_stage(batch, stage);
    }
  }

  void run_pair(DiskBatch& batch, std::size_t i, std::span<std::byte> staging,
                std::vector<Region>& regions) noexcept {
    const TransferPair pair = batch.pairs[i];
    try {
      host_regions(pair, regions);
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
      fail_pair(batch, i, status);
    } catch (const std::exception& e) {
      fail_pair(batch, i, e);
    }
  }

  /// One pair's share of a persistent write stage. A pair that failed in an
  /// earlier stage is skipped.
  void run_stage(DiskBatch& batch, DiskStage stage, std::size_t i, std::span<std::byte> staging,
                 std::vector<Region>& regions) noexcept {
    const TransferPair pair = batch.pairs[i];
    batch.touched[i] = 0;
    if (batch.failed[i] != 0) return;
    try {
      io::IoStatus status;
      switch (stage) {
        case DiskStage::kInvalidate:
          if (disk_.header_may_be_live(pair.dst)) {
            batch.touched[i] = 1;
            IoSlot slot(io_slots_);
            status = disk_.invalidate_header(pair.dst);
          }
          break;
        case DiskStage::kPayload: {
          host_regions(pair, regions);
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
        case DiskStage::kHeader: {
          const auto sector = staging.first(DiskStorage::kHeaderSectorBytes);
          disk_.seal_header(pair.dst, batch.checksums[i], sector, pair.hash);
          batch.touched[i] = 1;
          IoSlot slot(io_slots_);
          status = disk_.pwrite_header(pair.dst, sector);
          break;
        }
        case DiskStage::kOnce:
          break;
      }
      if (status) return;
      fail_pair(batch, i, status);
    } catch (const std::exception& e) {
      fail_pair(batch, i, e);
    }
  }

  Semaphore io_slots_;  // queue_depth_ I/Os in flight at most
  std::vector<std::unique_ptr<std::byte, FreeAligned>> staging_;  // one per worker

  std::unique_ptr<detail::Worker> pool_;  // last: started once everything above exists
};

}  // namespace

std::unique_ptr<DiskEngineImpl> make_pool_engine(DiskDirection direction, Layout host,
                                                 DiskStorage& disk,
                                                 const DiskEngineOptions& options) {
  return std::make_unique<DiskThreadPool>(direction, std::move(host), disk, options);
}

}  // namespace kvbm::detail
