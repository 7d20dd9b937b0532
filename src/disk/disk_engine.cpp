#include "kvbm/disk/disk_engine.h"

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "disk/disk_engine_impl.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm {

std::string_view to_string(DiskIoEngine engine) noexcept {
  switch (engine) {
    case DiskIoEngine::kAuto:
      return "auto";
    case DiskIoEngine::kThreadPool:
      return "thread_pool";
    case DiskIoEngine::kIoUring:
      return "io_uring";
  }
  return "unknown";
}

namespace detail {

void fail_pair(DiskBatch& batch, std::size_t i, const io::IoStatus& status) noexcept {
  batch.failed[i] = 1;
  TransferError& error = batch.errors[i];
  error.kind = error_kind_of_errno(status.code());
  error.code = status.code();
  try {
    error.message = status.message();
  } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): the kind and code still tell
  }
}

void fail_pair(DiskBatch& batch, std::size_t i, const std::exception& e) noexcept {
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

DiskEngineImpl::DiskEngineImpl(DiskDirection direction, Layout host, DiskStorage& disk,
                               const DiskEngineOptions& options)
    : direction_(direction),
      host_(std::move(host)),
      disk_(disk),
      name_(!options.name.empty()                 ? options.name
            : direction == DiskDirection::kToDisk ? "host_to_disk"
                                                  : "disk_to_host"),
      queue_depth_(options.queue_depth) {
  KVBM_CHECK(
      host_.config() == disk_.config(), name(),
      " engine: the host layout's LayoutConfig differs from the disk pool's; a block must have "
      "the same shape on both sides");
  KVBM_CHECK(options.queue_depth >= 1 && options.queue_depth <= DiskEngineOptions::kMaxQueueDepth,
             name(), " engine: DiskEngineOptions::queue_depth is ", options.queue_depth,
             "; use 1 to 256");
  KVBM_CHECK(options.workers == 0 || (options.workers >= options.queue_depth &&
                                      options.workers <= DiskEngineOptions::kMaxWorkers),
             name(), " engine: DiskEngineOptions::workers is ", options.workers,
             "; use 0 (2 x queue_depth) or ", options.queue_depth,
             " (queue_depth) to 512: fewer workers than queue_depth could never fill the queue");
  if (options.registry) metrics_ = std::make_unique<TransferMetrics>(options.registry, name_);
}

std::size_t DiskEngineImpl::src_blocks() const noexcept {
  return direction_ == DiskDirection::kToDisk ? host_.num_blocks() : disk_.num_blocks();
}

std::size_t DiskEngineImpl::dst_blocks() const noexcept {
  return direction_ == DiskDirection::kToDisk ? disk_.num_blocks() : host_.num_blocks();
}

DiskEngineStats DiskEngineImpl::stats() const noexcept {
  return {batches_.load(std::memory_order_relaxed), blocks_.load(std::memory_order_relaxed),
          failed_blocks_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed),
          unstaged_writes_.load(std::memory_order_relaxed)};
}

std::optional<TransferCounts> DiskEngineImpl::counts() const noexcept {
  if (!metrics_) return std::nullopt;
  return metrics_->counts();
}

std::shared_ptr<DiskBatch> DiskEngineImpl::make_batch(std::span<const TransferPair> pairs,
                                                      DiskStage& stage) {
  auto batch = std::make_shared<DiskBatch>();
  batch->pairs.assign(pairs.begin(), pairs.end());
  batch->failed.assign(pairs.size(), 0);
  batch->errors.resize(pairs.size());
  stage = DiskStage::kOnce;
  if (direction_ == DiskDirection::kToDisk && disk_.persistent()) {
    // The durable order, stage by stage (docs/disk_tier.md): invalidate
    // live headers, sync, payloads, sync, headers, sync.
    batch->checksums.assign(pairs.size(), 0);
    batch->touched.assign(pairs.size(), 0);
    const bool any_live = std::any_of(pairs.begin(), pairs.end(), [&](const TransferPair& p) {
      return disk_.header_may_be_live(p.dst);
    });
    stage = any_live ? DiskStage::kInvalidate : DiskStage::kPayload;
  }
  batch->remaining.store(pairs.size(), std::memory_order_relaxed);
  batch->completion = std::make_shared<TransferCompletion>();
  return batch;
}

void DiskEngineImpl::host_regions(const TransferPair& pair, std::vector<Region>& out) const {
  const BlockId block = direction_ == DiskDirection::kToDisk ? pair.src : pair.dst;
  out.clear();
  if (host_.kind() == LayoutKind::kFullyContiguous) {
    out.push_back(host_.block_region(block));
  } else {
    host_.append_regions(block, out);
  }
}

DiskStage DiskEngineImpl::end_stage(DiskBatch& b, DiskStage stage) noexcept {
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
      if (b.failed[i] == 0) fail_pair(b, i, st);
    }
    return false;
  };
  DiskStage next = DiskStage::kOnce;
  switch (stage) {
    case DiskStage::kOnce:
      break;
    case DiskStage::kInvalidate:
      if (any([&](std::size_t i) { return b.touched[i] != 0; }) && !sync_or_fail()) break;
      for (std::size_t i = 0; i < n; ++i) {
        if (b.touched[i] != 0 && b.failed[i] == 0) disk_.note_invalidated(b.pairs[i].dst);
      }
      next = DiskStage::kPayload;
      break;
    case DiskStage::kPayload:
      if (any([&](std::size_t i) { return b.failed[i] == 0; }) && sync_or_fail())
        next = DiskStage::kHeader;
      break;
    case DiskStage::kHeader:
      if (any([&](std::size_t i) { return b.touched[i] != 0; })) (void)sync_or_fail();
      break;
  }
  if (!any([&](std::size_t i) { return b.failed[i] == 0; })) return DiskStage::kOnce;
  return next;
}

std::shared_ptr<TransferCompletion> DiskEngineImpl::submit(std::span<const TransferPair> pairs) {
  DiskStage stage = DiskStage::kOnce;
  auto batch = make_batch(pairs, stage);
  auto completion = batch->completion;
  intake_.push_back(std::move(batch), stage);
  return completion;
}

void DiskEngineImpl::next_stage(const std::shared_ptr<DiskBatch>& batch, DiskStage stage) noexcept {
  const DiskStage next = end_stage(*batch, stage);
  if (next == DiskStage::kOnce) {
    finish(*batch);
    return;
  }
  const std::size_t n = batch->pairs.size();
  batch->remaining.store(n, std::memory_order_release);
  try {
    intake_.push_front(batch, next);
  } catch (const std::exception& e) {  // bad_alloc: fail what remains rather than lose the batch
    for (std::size_t i = 0; i < n; ++i) {
      if (batch->failed[i] == 0) fail_pair(*batch, i, e);
    }
    finish(*batch);
  }
}

void DiskEngineImpl::finish(DiskBatch& batch) noexcept {
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
        logger()->error("{}: {} of {} pairs failed; first: {}", name(), failed, batch.pairs.size(),
                        outcome.error->message);
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

}  // namespace detail

namespace {

/// Builds the engine `options.io_engine` asks for, or the thread pool (with
/// a log line) where io_uring cannot be had. kAuto is the thread pool, the
/// faster of the two where measured (docs/disk_tier.md, "Choosing the I/O engine").
std::unique_ptr<detail::DiskEngineImpl> make_engine(DiskDirection direction, Layout host,
                                                    DiskStorage& disk,
                                                    const DiskEngineOptions& options) {
  if (options.io_engine == DiskIoEngine::kIoUring) {
    auto ring = detail::make_uring_engine(direction, host, disk, options);
    if (ring) return ring;
    std::string why;
    (void)detail::io_uring_available(&why);
    logger()->warn("{}: io_uring asked for but unavailable ({}); using the thread pool",
                   options.name.empty() ? "disk engine" : options.name, why);
  }
  return detail::make_pool_engine(direction, std::move(host), disk, options);
}

}  // namespace

DiskEngine::DiskEngine(DiskDirection direction, Layout host, DiskStorage& disk,
                       DiskEngineOptions options)
    : direction_(direction), core_(make_engine(direction, std::move(host), disk, options)) {}
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
DiskIoEngine DiskEngine::io_engine() const noexcept { return core_->io_engine(); }
bool DiskEngine::io_uring_available(std::string* why) { return detail::io_uring_available(why); }

}  // namespace kvbm
