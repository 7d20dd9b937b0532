// src/disk/disk_uring.cpp: the io_uring disk engine (DiskIoEngine::kIoUring).
//
// One thread owns one ring. It keeps at most queue_depth whole-slot reads or
// writes in flight, each in one of 2 x queue_depth staging slots; after every
// wait it first refills the ring with the next pairs and only then verifies
// and scatters the reads that completed (or counts the writes), so checksums
// overlap the I/O still in flight. Short transfers, EINTR and EAGAIN are
// resubmitted for the remainder; a read that meets the end of the file fails
// with ENODATA and a write that makes no progress with EIO, as
// io::pread_full / pwrite_full do. Stages and outcomes are DiskEngineImpl's.
// Compiled to a stub (make_uring_engine() returns null) without liburing.

#include <string>

#include <spdlog/spdlog.h>

#include "disk/disk_engine_impl.h"
#include "kvbm/logging.h"

#if KVBM_HAVE_URING
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "kvbm/error.h"
#endif

namespace kvbm::detail {

#if KVBM_HAVE_URING
namespace {

/// One aligned zero sector (the invalidated header).
const std::byte* zero_sector() {
  alignas(
      DiskStorage::kAlignment) static const std::byte kZeros[DiskStorage::kHeaderSectorBytes] = {};
  return kZeros;
}

class DiskRing final : public DiskEngineImpl {
 public:
  DiskRing(DiskDirection direction, Layout host, DiskStorage& disk,
           const DiskEngineOptions& options, std::unique_ptr<io_uring> ring)
      : DiskEngineImpl(direction, std::move(host), disk, options), ring_(std::move(ring)) {
    ops_.resize(2 * queue_depth_);
    starts_.reserve(ops_.size());  // fill() is noexcept: it never allocates
    for (Op& op : ops_) {
      void* p = std::aligned_alloc(DiskStorage::kAlignment, disk_.slot_bytes());
      if (p == nullptr) {
        free_buffers();
        throw std::bad_alloc();
      }
      std::memset(p, 0, disk_.slot_bytes());  // fault the pages in now
      op.buf = static_cast<std::byte*>(p);
      op.regions.reserve(disk_.config().regions_per_block());
      op.iov.reserve(disk_.config().regions_per_block() + 1);
      free_.push_back(&op);
    }
    register_buffers();
    try {
      thread_ = std::thread([this] { ring_main(); });
    } catch (...) {
      free_buffers();
      throw;
    }
  }

  ~DiskRing() override {
    intake_.stop();
    thread_.join();
    free_buffers();
  }
  DiskRing(const DiskRing&) = delete;
  DiskRing& operator=(const DiskRing&) = delete;

  [[nodiscard]] std::size_t workers() const noexcept override { return 1; }
  [[nodiscard]] DiskIoEngine io_engine() const noexcept override { return DiskIoEngine::kIoUring; }

 private:
  /// One pair's I/O in a staging slot.
  struct Op {
    std::byte* buf = nullptr;  // slot_bytes(), aligned
    std::vector<Region> regions;
    std::vector<iovec> iov;  // what is left to write, for writev
    std::shared_ptr<DiskBatch> batch;
    DiskStage stage = DiskStage::kOnce;
    std::size_t i = 0;
    bool read = false;      // a read (else a write, when io)
    bool io = false;        // false: nothing to do (a skipped stage) or failed before the I/O
    bool unstaged = false;  // written straight from host memory
    std::uint64_t offset = 0;
    std::size_t size = 0;  // bytes of the whole transfer
    std::size_t done = 0;  // bytes moved so far
    std::string what;      // "read of disk block ..." for the error message
    io::IoStatus status;
  };

  /// Registers the staging slots with the ring, so that a read into one
  /// (IORING_OP_READ_FIXED) skips pinning its pages on every I/O. Optional:
  /// where the memlock limit refuses, reads use IORING_OP_READ.
  void register_buffers() noexcept {
    std::vector<iovec> iov;
    try {
      for (const Op& op : ops_) iov.push_back({op.buf, disk_.slot_bytes()});
    } catch (const std::bad_alloc&) {
      return;
    }
    const int rc =
        io_uring_register_buffers(ring_.get(), iov.data(), static_cast<unsigned>(iov.size()));
    fixed_buffers_ = rc == 0;
    if (rc < 0) {
      logger()->debug("{}: io_uring_register_buffers: {}; reads pin their pages per I/O", name(),
                      std::strerror(-rc));
    }
  }

  void free_buffers() noexcept {
    for (Op& op : ops_) std::free(op.buf);
    ops_.clear();
  }

  void ring_main() noexcept {
    std::vector<Op*> reaped;
    reaped.reserve(ops_.size());
    for (;;) {
      if (!fill(in_flight_ == 0)) break;
      if (in_flight_ == 0) continue;  // only skipped pairs were taken; they were completed
      reap(reaped);
      (void)fill(false);  // the device gets new work before the CPU verifies what came back
      for (Op* op : reaped) complete(*op);
      reaped.clear();
    }
    io_uring_queue_exit(ring_.get());
  }

  /// Takes pairs into free slots (queue_depth in flight at most) and submits
  /// them; with `block`, waits for work first. Returns false once stopping
  /// with nothing left.
  bool fill(bool block) noexcept {
    std::size_t room = std::min(free_.size(), queue_depth_ - in_flight_);
    if (room == 0) return true;
    starts_.clear();
    if (!intake_.take(room, block, starts_)) return false;
    for (DiskTask& s : starts_) {
      Op& op = *free_.back();
      free_.pop_back();
      op.batch = std::move(s.batch);
      op.stage = s.stage;
      op.i = s.i;
      prepare(op);
      if (op.io) {
        push(op);
      } else {
        complete(op);
      }
    }
    starts_.clear();
    if (io_uring_sq_ready(ring_.get()) > 0) (void)io_uring_submit(ring_.get());
    return true;
  }

  /// Fills in op's transfer for its stage: seals what a write writes. Sets
  /// op.io false when the pair has nothing to do or failed here.
  void prepare(Op& op) noexcept {
    DiskBatch& b = *op.batch;
    const TransferPair pair = b.pairs[op.i];
    op.io = false;
    op.unstaged = false;
    op.done = 0;
    op.iov.clear();
    op.status = {};
    try {
      if (op.stage != DiskStage::kOnce) {
        b.touched[op.i] = 0;
        if (b.failed[op.i] != 0) return;
      }
      switch (op.stage) {
        case DiskStage::kOnce:
          if (direction_ == DiskDirection::kFromDisk) {
            host_regions(pair, op.regions);
            set_transfer(op, disk_.slot_offset(pair.src), disk_.slot_bytes(), true);
            op.what = "read of disk block " + std::to_string(pair.src);
            break;
          }
          prepare_write(op, pair, disk_.slot_bytes());
          break;
        case DiskStage::kInvalidate:
          if (!disk_.header_may_be_live(pair.dst)) return;
          b.touched[op.i] = 1;
          set_transfer(op, disk_.header_offset(pair.dst), DiskStorage::kHeaderSectorBytes, false);
          op.iov.push_back({const_cast<std::byte*>(zero_sector()), op.size});
          op.what = "invalidation of disk block " + std::to_string(pair.dst) + "'s header";
          break;
        case DiskStage::kPayload:
          b.touched[op.i] = 1;
          prepare_write(op, pair, disk_.payload_bytes());
          break;
        case DiskStage::kHeader: {
          const std::span<std::byte> sector(op.buf, DiskStorage::kHeaderSectorBytes);
          disk_.seal_header(pair.dst, b.checksums[op.i], sector, pair.hash);
          b.touched[op.i] = 1;
          disk_.note_header_live(pair.dst);
          set_transfer(op, disk_.header_offset(pair.dst), sector.size(), false);
          op.iov.push_back({op.buf, sector.size()});
          op.what = "write of disk block " + std::to_string(pair.dst) + "'s header";
          break;
        }
      }
    } catch (const std::exception& e) {
      fail_pair(b, op.i, e);
      op.io = false;
    }
  }

  void set_transfer(Op& op, std::uint64_t offset, std::size_t size, bool read) {
    op.offset = offset;
    op.size = size;
    op.read = read;
    op.io = true;
  }

  /// A whole slot (kOnce) or its payload (kPayload): straight from host
  /// memory when the regions allow, else gathered into the staging slot.
  void prepare_write(Op& op, const TransferPair& pair, std::size_t bytes) {
    DiskBatch& b = *op.batch;
    host_regions(pair, op.regions);
    const std::span<std::byte> slot(op.buf, disk_.slot_bytes());
    const std::size_t block = disk_.block_bytes();
    const bool payload = op.stage == DiskStage::kPayload;
    if (disk_.can_write_from(op.regions)) {
      const auto tail = slot.first(disk_.tail_bytes());
      const std::uint64_t sum = DiskStorage::checksum(op.regions);
      if (payload) b.checksums[op.i] = sum;
      disk_.seal_tail(pair.dst, sum, tail, pair.hash);
      for (const Region& r : op.regions)
        op.iov.push_back({reinterpret_cast<void*>(r.addr), r.size});
      if (bytes > block) op.iov.push_back({tail.data(), bytes - block});
      op.unstaged = true;
    } else {
      std::byte* out = op.buf;
      for (const Region& r : op.regions) {
        std::memcpy(out, reinterpret_cast<const void*>(r.addr), r.size);
        out += r.size;
      }
      const std::uint64_t sum = DiskStorage::checksum(slot.first(block));
      if (payload) b.checksums[op.i] = sum;
      disk_.seal_tail(pair.dst, sum, slot.subspan(block), pair.hash);
      op.iov.push_back({op.buf, bytes});
    }
    set_transfer(op, disk_.slot_offset(pair.dst), bytes, false);
    op.what = "write of disk block " + std::to_string(pair.dst) + (payload ? "'s payload" : "");
  }

  /// Queues op's remaining transfer on the ring (room is guaranteed).
  void push(Op& op) noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) {  // cannot happen: the ring has 2 x queue_depth entries
      (void)io_uring_submit(ring_.get());
      sqe = io_uring_get_sqe(ring_.get());
    }
    const __u64 at = op.offset + op.done;  // both 64-bit
    if (op.read && fixed_buffers_) {
      io_uring_prep_read_fixed(sqe, disk_.fd(), op.buf + op.done,
                               static_cast<unsigned>(op.size - op.done), at,
                               static_cast<int>(&op - ops_.data()));
    } else if (op.read) {
      io_uring_prep_read(sqe, disk_.fd(), op.buf + op.done,
                         static_cast<unsigned>(op.size - op.done), at);
    } else {
      io_uring_prep_writev(sqe, disk_.fd(), op.iov.data(), static_cast<unsigned>(op.iov.size()),
                           at);
    }
    io_uring_sqe_set_data(sqe, &op);
    ++in_flight_;
  }

  /// Waits for at least one completion and takes every one there is; a
  /// short transfer goes back on the ring for its remainder.
  void reap(std::vector<Op*>& reaped) noexcept {
    io_uring_cqe* cqe = nullptr;
    int rc = 0;
    do {
      rc = io_uring_wait_cqe(ring_.get(), &cqe);
    } while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
    if (rc < 0) {  // the ring itself failed: fail everything in flight (cannot be resubmitted)
      logger()->error("{}: io_uring_wait_cqe: {}", name(), std::strerror(-rc));
      std::abort();
    }
    bool resubmit = false;
    unsigned seen = 0;
    unsigned head = 0;
    io_uring_for_each_cqe(ring_.get(), head, cqe) {
      ++seen;
      Op& op = *static_cast<Op*>(io_uring_cqe_get_data(cqe));
      --in_flight_;
      if (advance(op, cqe->res)) {
        push(op);
        resubmit = true;
      } else {
        reaped.push_back(&op);
      }
    }
    io_uring_cq_advance(ring_.get(), seen);
    if (resubmit) (void)io_uring_submit(ring_.get());
  }

  /// Accounts a completion of `res`; returns true when more is to move.
  bool advance(Op& op, int res) noexcept {
    if (res == -EINTR || res == -EAGAIN) return true;
    if (res < 0) return fail_io(op, -res, "");
    if (res == 0)
      return op.read ? fail_io(op, ENODATA, " reached end of file") : fail_io(op, EIO, "");
    auto n = static_cast<std::size_t>(res);
    op.done += n;
    if (op.done >= op.size) return false;
    if (!op.read) {  // drop what was written from the front of the iovecs
      auto it = op.iov.begin();
      while (n > 0 && n >= it->iov_len) n -= (it++)->iov_len;
      op.iov.erase(op.iov.begin(), it);
      op.iov.front().iov_base = static_cast<std::byte*>(op.iov.front().iov_base) + n;
      op.iov.front().iov_len -= n;
    }
    return true;
  }

  bool fail_io(Op& op, int code, const char* why) noexcept {
    try {
      op.status = io::make_io_error(code, op.what + " in '" + disk_.path().string() +
                                              "': io_uring " + (op.read ? "read" : "writev") +
                                              " of " + std::to_string(op.size) +
                                              " bytes at offset " + std::to_string(op.offset) +
                                              " (" + std::to_string(op.done) + " done)" + why);
    } catch (const std::bad_alloc&) {
      op.status = io::IoError{code, {}};
    }
    return false;
  }

  /// After op's I/O (or none): verifies and scatters a read, counts a write,
  /// frees the slot and, after the stage's last pair, moves the batch on.
  void complete(Op& op) noexcept {
    DiskBatch& b = *op.batch;
    if (op.io) {
      try {
        io::IoStatus st = std::move(op.status);
        if (st && op.read) {
          const TransferPair& pair = b.pairs[op.i];
          st = disk_.verify_slot(pair.src, {op.buf, disk_.slot_bytes()}, pair.hash);
          const std::byte* in = op.buf;
          for (const Region& r : op.regions) {
            if (!st) break;
            std::memcpy(reinterpret_cast<void*>(r.addr), in, r.size);
            in += r.size;
          }
        }
        if (st && op.unstaged) unstaged_writes_.fetch_add(1, std::memory_order_relaxed);
        if (!st) fail_pair(b, op.i, st);
      } catch (const std::exception& e) {
        fail_pair(b, op.i, e);
      }
    }
    std::shared_ptr<DiskBatch> batch = std::move(op.batch);
    const DiskStage stage = op.stage;
    free_.push_back(&op);
    if (batch->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) next_stage(batch, stage);
  }

  std::unique_ptr<io_uring> ring_;  // initialized; exited by ring_main()
  std::vector<Op> ops_;             // 2 x queue_depth staging slots
  std::vector<Op*> free_;           // ring thread only
  std::vector<DiskTask> starts_;
  std::size_t in_flight_ = 0;   // ring thread only
  bool fixed_buffers_ = false;  // the staging slots are registered (reads use READ_FIXED)

  std::thread thread_;
};

}  // namespace

std::unique_ptr<DiskEngineImpl> make_uring_engine(DiskDirection direction, Layout host,
                                                  DiskStorage& disk,
                                                  const DiskEngineOptions& options) {
  if (!io_uring_available(nullptr)) return nullptr;
  auto ring = std::make_unique<io_uring>();
  const auto entries = static_cast<unsigned>(2 * std::max<std::size_t>(options.queue_depth, 1));
  const int rc = io_uring_queue_init(entries, ring.get(), 0);
  if (rc < 0) {
    logger()->warn("{}: io_uring_queue_init({}): {}; using the thread pool", options.name, entries,
                   std::strerror(-rc));
    return nullptr;
  }
  io_uring* raw = ring.get();
  try {
    return std::make_unique<DiskRing>(direction, std::move(host), disk, options, std::move(ring));
  } catch (...) {  // the engine never started its thread: the ring is still to exit
    io_uring_queue_exit(raw);
    throw;
  }
}

#else  // !KVBM_HAVE_URING

std::unique_ptr<DiskEngineImpl> make_uring_engine(DiskDirection, Layout, DiskStorage&,
                                                  const DiskEngineOptions&) {
  return nullptr;
}

#endif

}  // namespace kvbm::detail
