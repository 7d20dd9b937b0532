// src/transfer/cuda_engine.cpp: CudaTransferEngine. See kvbm/transfer/cuda_engine.h.
//
// Built in every configuration: without CUDA (KVBM_HAVE_CUDA == 0) only the
// stubs at the bottom are compiled and the constructor throws.

#include "kvbm/transfer/cuda_engine.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/config.h"
#include "kvbm/error.h"

#if KVBM_HAVE_CUDA

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <new>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "copy_kernels.cuh"
#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/logging.h"
#include "kvbm/transfer/transfer_metrics.h"

namespace kvbm {
namespace {

std::string cuda_error_text(std::string_view what, std::string_view call, cudaError_t err) {
  return fmt::format("{}: {} failed: {} ({})", what, call, cudaGetErrorName(err),
                     cudaGetErrorString(err));
}

/// The TransferError of a failed CUDA call (kind kDevice, code the cudaError_t).
TransferError cuda_error(std::string_view what, std::string_view call, cudaError_t err) {
  return TransferError{ErrorKind::kDevice, static_cast<int>(err), cuda_error_text(what, call, err)};
}

/// Makes `device` current for the scope and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) noexcept : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device_) status_ = cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  int device_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

/// A pinned host buffer and a device buffer holding one batch's kernel
/// descriptors; reused once that batch completed.
struct DescriptorSlot {
  void* host = nullptr;
  void* device = nullptr;
  std::size_t capacity = 0;  // regions

  DescriptorSlot() = default;
  DescriptorSlot(const DescriptorSlot&) = delete;
  DescriptorSlot& operator=(const DescriptorSlot&) = delete;
  ~DescriptorSlot() {
    if (host != nullptr) static_cast<void>(cudaFreeHost(host));
    if (device != nullptr) static_cast<void>(cudaFree(device));
  }
};

/// A batch enqueued on a stream, waiting for its event.
struct PendingBatch {
  std::shared_ptr<TransferCompletion> completion;
  std::size_t num_pairs = 0;
  std::size_t bytes = 0;
  cudaEvent_t event = nullptr;           // recorded after the batch's work
  std::optional<TransferError> error;    // set when enqueueing failed
  std::unique_ptr<DescriptorSlot> slot;  // kernel mode only
};

/// One stream with the thread that completes its batches in order.
struct Lane {
  cudaStream_t stream = nullptr;
  detail::Mutex submit_mu;  // held from enqueueing to posting: enqueue order == completion order
  detail::Mutex mu;
  std::vector<cudaEvent_t> free_events KVBM_GUARDED_BY(mu);
  std::unique_ptr<detail::Worker> completer;  // one thread: finishes the batches in order
};

cudaMemcpyKind memcpy_kind(CudaDirection direction) noexcept {
  switch (direction) {
    case CudaDirection::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CudaDirection::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CudaDirection::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

/// Returns true when every base of `layout` is pinned host memory that the
/// current device reaches at the same address.
bool host_layout_device_accessible(const Layout& layout) noexcept {
  for (const std::uintptr_t base : layout.bases()) {
    cudaPointerAttributes attr{};
    const auto* ptr = reinterpret_cast<const void*>(base);
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    if (attr.type != cudaMemoryTypeHost || attr.devicePointer != ptr) return false;
  }
  return true;
}

/// Throws UsageError unless each base of `layout`, from its first byte to its last, is CUDA
/// device (or managed) memory. cudaMemcpyBatchAsync infers each pointer's kind, and copies an
/// address CUDA does not know as host memory: with a device layout that is not device memory
/// it would fault in the CPU, not fail the copy.
void check_device_layout(const Layout& layout, const char* side) {
  const std::size_t span = layout.bytes_per_base();
  for (const std::uintptr_t base : layout.bases()) {
    for (const std::uintptr_t addr : {base, base + span - 1}) {
      cudaPointerAttributes attr{};
      const cudaError_t err = cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(addr));
      if (err != cudaSuccess) static_cast<void>(cudaGetLastError());
      KVBM_CHECK(err == cudaSuccess &&
                     (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
                 "CudaTransferEngine: the ", side,
                 " layout is device memory by its direction, but ",
                 addr == base ? "its base " : "the last byte of its base ",
                 fmt::format("{:#x}", addr), " is not CUDA device memory (", span,
                 " bytes per base); build it over make_device_storage() or cudaMalloc memory "
                 "of at least that size");
    }
  }
}

bool memcpy_batch_supported() noexcept {
#if CUDART_VERSION >= 12080
  int driver = 0;
  return cudaDriverGetVersion(&driver) == cudaSuccess && driver >= 12080;
#else
  return false;
#endif
}

/// Throws UsageError for layouts of different blocks or options out of range.
void check_engine_options(const Layout& src, const Layout& dst, const CudaEngineOptions& options) {
  KVBM_CHECK(src.config() == dst.config(),
             "CudaTransferEngine: the source and destination layouts describe different blocks; "
             "build both from the same LayoutConfig");
  KVBM_CHECK(options.num_streams >= 1 && options.num_streams <= 64,
             "CudaTransferEngine: num_streams must be in [1, 64], got ", options.num_streams);
  KVBM_CHECK(options.kernel_chunk_bytes > 0 && options.kernel_chunk_bytes % 16 == 0,
             "CudaTransferEngine: kernel_chunk_bytes must be a positive multiple of 16, got ",
             options.kernel_chunk_bytes);
}

/// Throws UsageError unless `device` is one of the CUDA devices present.
void check_device(int device) {
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess) static_cast<void>(cudaGetLastError());
  KVBM_CHECK(count_err == cudaSuccess && count > 0,
             "CudaTransferEngine: no CUDA device is available (",
             count_err == cudaSuccess ? "no device" : cudaGetErrorString(count_err),
             "); check cuda_runtime_available() first");
  KVBM_CHECK(device >= 0 && device < count, "CudaTransferEngine: device ", device,
             " does not exist (", count, " devices)");
}

/// Returns true when the copy kernel can run: the host side (if any) is pinned
/// memory the current device reaches at the same address.
bool kernel_reaches(CudaDirection direction, const Layout& src, const Layout& dst) noexcept {
  switch (direction) {
    case CudaDirection::kDeviceToHost:
      return host_layout_device_accessible(dst);
    case CudaDirection::kHostToDevice:
      return host_layout_device_accessible(src);
    case CudaDirection::kDeviceToDevice:
      return true;
  }
  return false;
}

/// The kernel's grid: options.kernel_max_blocks, or 4 blocks per SM (32 SMs
/// when the device does not say).
unsigned kernel_block_count(const CudaEngineOptions& options) noexcept {
  unsigned blocks = options.kernel_max_blocks;
  if (blocks == 0) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options.device) !=
            cudaSuccess ||
        sms <= 0) {
      static_cast<void>(cudaGetLastError());
      sms = 32;
    }
    blocks = 4U * static_cast<unsigned>(sms);
  }
  return blocks;
}

}  // namespace

struct CudaTransferEngine::Impl {
  Impl(Layout src_layout, Layout dst_layout, CudaDirection dir, CudaEngineOptions opts)
      : src(std::move(src_layout)),
        dst(std::move(dst_layout)),
        direction(dir),
        options(std::move(opts)) {}

  Layout src;
  Layout dst;
  CudaDirection direction;
  CudaEngineOptions options;  // options.name is never empty
  std::unique_ptr<TransferMetrics> metrics;
  bool kernel_ok = false;
  bool batch_ok = false;
  unsigned kernel_blocks = 1;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::atomic<std::size_t> next_lane{0};

  detail::Mutex slots_mu;
  std::vector<std::unique_ptr<DescriptorSlot>> free_slots KVBM_GUARDED_BY(slots_mu);

  std::atomic<std::uint64_t> batches{0}, failed_batches{0}, copies{0}, bytes{0};
  std::atomic<std::uint64_t> kernel_batches{0}, memcpy_batch_batches{0}, memcpy_loop_batches{0};

  /// Runs `fn` (a CUDA call) unless the test hook injects an error for `call`.
  template <class Fn>
  cudaError_t call(std::string_view name, Fn&& fn) {
    if (options.inject_cuda_error) {
      if (const int injected = options.inject_cuda_error(name); injected != 0) {
        return static_cast<cudaError_t>(injected);
      }
    }
    return fn();
  }

  CudaCopyMode resolve(std::size_t n, std::size_t total) const noexcept {
    if (options.mode != CudaCopyMode::kAuto) return options.mode;
    if (n == 0) return CudaCopyMode::kMemcpyLoop;
    const std::size_t mean = total / n;
    if (n < options.kernel_min_regions) return CudaCopyMode::kMemcpyLoop;
    if (mean >= options.loop_min_region_bytes) {
      return batch_ok ? CudaCopyMode::kMemcpyBatch : CudaCopyMode::kMemcpyLoop;
    }
    if (kernel_ok && mean <= options.kernel_max_region_bytes) return CudaCopyMode::kKernel;
    if (batch_ok) return CudaCopyMode::kMemcpyBatch;
    if (kernel_ok) return CudaCopyMode::kKernel;
    return CudaCopyMode::kMemcpyLoop;
  }

  // Returns a slot for n regions (new or reused); null with `error` set on failure.
  std::unique_ptr<DescriptorSlot> take_slot(std::size_t n, std::optional<TransferError>& error) {
    {
      detail::LockGuard lock(slots_mu);
      for (auto it = free_slots.begin(); it != free_slots.end(); ++it) {
        if ((*it)->capacity >= n) {
          auto slot = std::move(*it);
          free_slots.erase(it);
          return slot;
        }
      }
    }
    auto slot = std::make_unique<DescriptorSlot>();
    std::size_t capacity = 1024;
    while (capacity < n) capacity *= 2;
    const std::size_t size = cuda::descriptor_buffer_bytes(capacity);
    cudaError_t err = call("cudaHostAlloc",
                           [&] { return cudaHostAlloc(&slot->host, size, cudaHostAllocDefault); });
    if (err != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      error = cuda_error(options.name, "cudaHostAlloc (kernel descriptors)", err);
      return nullptr;
    }
    err = call("cudaMalloc", [&] { return cudaMalloc(&slot->device, size); });
    if (err != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      error = cuda_error(options.name, "cudaMalloc (kernel descriptors)", err);
      return nullptr;
    }
    slot->capacity = capacity;
    return slot;
  }

  void return_slot(std::unique_ptr<DescriptorSlot> slot) noexcept {
    if (!slot) return;
    try {
      detail::LockGuard lock(slots_mu);
      free_slots.push_back(std::move(slot));
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
      // Out of memory (bad_alloc; or the mutex's system_error): the slot is
      // freed instead of pooled, which costs an allocation later, nothing more.
    }
  }

  // Enqueues the copies on `stream`; returns nothing or the error.
  std::optional<TransferError> enqueue(CudaCopyMode mode, const std::vector<CopyOp>& ops,
                                       cudaStream_t stream, std::unique_ptr<DescriptorSlot>& slot) {
    const std::string_view what = options.name;
    cudaError_t err = cudaSuccess;
    switch (mode) {
      case CudaCopyMode::kKernel: {
        std::optional<TransferError> error;
        slot = take_slot(ops.size(), error);
        if (!slot) return error;
        auto* descs = static_cast<cuda::CopyDesc*>(slot->host);
        for (std::size_t i = 0; i < ops.size(); ++i) {
          descs[i] = cuda::CopyDesc{ops[i].src, ops[i].dst, ops[i].size};
        }
        auto* prefix = reinterpret_cast<std::uint64_t*>(descs + ops.size());
        cuda::BatchedCopyParams params;
        params.chunk_bytes = options.kernel_chunk_bytes;
        params.total_chunks =
            cuda::fill_chunk_prefix(descs, ops.size(), params.chunk_bytes, prefix);
        params.num_copies = static_cast<std::uint32_t>(ops.size());
        params.descs = static_cast<const cuda::CopyDesc*>(slot->device);
        params.chunk_begin = reinterpret_cast<const std::uint64_t*>(params.descs + ops.size());
        const std::size_t upload = cuda::descriptor_buffer_bytes(ops.size());
        err = call("cudaMemcpyAsync", [&] {
          return cudaMemcpyAsync(slot->device, slot->host, upload, cudaMemcpyHostToDevice, stream);
        });
        if (err != cudaSuccess) return cuda_error(what, "cudaMemcpyAsync (descriptors)", err);
        err = call("cudaLaunchKernel",
                   [&] { return cuda::launch_batched_copy(params, kernel_blocks, stream); });
        if (err != cudaSuccess) return cuda_error(what, "cudaLaunchKernel", err);
        return {};
      }
      case CudaCopyMode::kMemcpyBatch: {
#if CUDART_VERSION >= 12080
        std::vector<void*> dsts(ops.size());
        std::vector<void*> srcs(ops.size());
        std::vector<std::size_t> sizes(ops.size());
        for (std::size_t i = 0; i < ops.size(); ++i) {
          dsts[i] = reinterpret_cast<void*>(ops[i].dst);
          srcs[i] = reinterpret_cast<void*>(ops[i].src);
          sizes[i] = ops[i].size;
        }
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        std::size_t attr_index = 0;
        err = call("cudaMemcpyBatchAsync", [&] {
#if CUDART_VERSION >= 13000
          return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), ops.size(), &attr,
                                      &attr_index, 1, stream);
#else
          std::size_t fail_index = 0;
          return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), ops.size(), &attr,
                                      &attr_index, 1, &fail_index, stream);
#endif
        });
        if (err != cudaSuccess) return cuda_error(what, "cudaMemcpyBatchAsync", err);
        return {};
#else
        return TransferError{
            ErrorKind::kDevice, 0,
            fmt::format("{}: cudaMemcpyBatchAsync needs CUDA 12.8 or later", what)};
#endif
      }
      case CudaCopyMode::kAuto:
      case CudaCopyMode::kMemcpyLoop: {
        const cudaMemcpyKind kind = memcpy_kind(direction);
        for (const CopyOp& op : ops) {
          err = call("cudaMemcpyAsync", [&] {
            return cudaMemcpyAsync(reinterpret_cast<void*>(op.dst),
                                   reinterpret_cast<const void*>(op.src), op.size, kind, stream);
          });
          if (err != cudaSuccess) return cuda_error(what, "cudaMemcpyAsync", err);
        }
        return {};
      }
    }
    return {};
  }

  // Waits for a batch's work and signals its completion. Never throws.
  void finish(Lane& lane, PendingBatch batch) noexcept {
    // The real wait always happens (the work must be over before the
    // destination or the descriptors are reused); the hook may only replace
    // its result.
    const cudaError_t waited = batch.event != nullptr ? cudaEventSynchronize(batch.event)
                                                      : cudaStreamSynchronize(lane.stream);
    cudaError_t err = waited;
    if (err == cudaSuccess) err = call("cudaEventSynchronize", [] { return cudaSuccess; });
    TransferOutcome outcome;
    if (batch.error || err != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      try {
        if (!batch.error) batch.error = cuda_error(options.name, "cudaEventSynchronize", err);
        outcome = TransferOutcome::all_failed(batch.num_pairs, std::move(*batch.error));
      } catch (const std::bad_alloc&) {
        outcome = TransferOutcome::all_failed_no_memory(
            batch.num_pairs, "CUDA engine: out of memory while reporting a failed batch");
      }
      failed_batches.fetch_add(1, std::memory_order_relaxed);
    }
    if (batch.event != nullptr) {
      bool pooled = false;
      if (waited == cudaSuccess) {
        try {
          detail::LockGuard lock(lane.mu);
          lane.free_events.push_back(batch.event);
          pooled = true;
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
          // Out of memory (bad_alloc; or the mutex's system_error): the event
          // is destroyed instead of pooled.
        }
      }
      if (!pooled) static_cast<void>(cudaEventDestroy(batch.event));
    }
    if (waited == cudaSuccess) return_slot(std::move(batch.slot));
    if (metrics) {
      if (outcome.failed.empty()) {
        metrics->add(batch.num_pairs, batch.bytes, 0);
      } else {
        metrics->add(0, 0, batch.num_pairs);
      }
    }
    batch.completion->complete(std::move(outcome));
  }

  // Waits for every queued batch, stops the completion threads and releases
  // the streams, events and descriptor slots.
  void shutdown() noexcept {
    for (auto& lane : lanes) {
      if (lane->completer) lane->completer->stop();  // after the batches queued
    }
    DeviceGuard guard(options.device);
    for (auto& lane : lanes) {
      std::vector<cudaEvent_t> events;
      {
        detail::LockGuard lock(lane->mu);  // the threads are joined; the lock costs nothing
        events.swap(lane->free_events);
      }
      for (cudaEvent_t event : events) static_cast<void>(cudaEventDestroy(event));
      if (lane->stream != nullptr) static_cast<void>(cudaStreamDestroy(lane->stream));
      lane->stream = nullptr;
    }
    {
      detail::LockGuard lock(slots_mu);
      free_slots.clear();
    }
    static_cast<void>(cudaGetLastError());
  }

  // Returns a recorded event for the lane, or null with `err` set.
  cudaEvent_t record_event(Lane& lane, cudaError_t& err) {
    cudaEvent_t event = nullptr;
    {
      detail::LockGuard lock(lane.mu);
      if (!lane.free_events.empty()) {
        event = lane.free_events.back();
        lane.free_events.pop_back();
      }
    }
    if (event == nullptr) {
      err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync);
      if (err != cudaSuccess) return nullptr;
    }
    err = call("cudaEventRecord", [&] { return cudaEventRecord(event, lane.stream); });
    if (err != cudaSuccess) {
      static_cast<void>(cudaEventDestroy(event));
      return nullptr;
    }
    return event;
  }

  // Checks that the device side is device memory, then finds which copy modes the layouts
  // and the CUDA version allow; throws UsageError when options.mode names one they do not.
  // On the engine's device.
  void probe_copy_modes() {
    if (direction != CudaDirection::kHostToDevice) check_device_layout(src, "source");
    if (direction != CudaDirection::kDeviceToHost) check_device_layout(dst, "destination");
    kernel_ok = kernel_reaches(direction, src, dst);
    batch_ok = memcpy_batch_supported();
    KVBM_CHECK(options.mode != CudaCopyMode::kKernel || kernel_ok,
               "CudaTransferEngine: mode kernel needs the host layout in pinned memory the device "
               "can reach at the same address (cudaHostAlloc, or cudaHostRegister); use kAuto, "
               "kMemcpyBatch or kMemcpyLoop for other host memory");
    KVBM_CHECK(
        options.mode != CudaCopyMode::kMemcpyBatch || batch_ok,
        "CudaTransferEngine: mode memcpy_batch needs cudaMemcpyBatchAsync (CUDA 12.8 or later "
        "in both the toolkit and the driver); use kAuto, kKernel or kMemcpyLoop");
  }

  // Creates one stream per lane; on a failure destroys those made and throws.
  // On the engine's device.
  void create_lanes() {
    for (std::uint32_t i = 0; i < options.num_streams; ++i) {
      auto lane = std::make_unique<Lane>();
      const cudaError_t err = cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking);
      if (err != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        for (auto& made : lanes) static_cast<void>(cudaStreamDestroy(made->stream));
        throw RuntimeError(ErrorKind::kDevice, static_cast<int>(err),
                           cuda_error_text("CudaTransferEngine", "cudaStreamCreateWithFlags", err) +
                               "; free device memory or use fewer CudaEngineOptions::num_streams");
      }
      lanes.push_back(std::move(lane));
    }
  }

  // Starts each lane's completion thread; on a failure stops those started,
  // releases the streams and rethrows.
  void start_threads() {
    try {
      for (auto& lane : lanes) {
        lane->completer = std::make_unique<detail::Worker>("CUDA engine '" + options.name + "'");
        // The completer's first job: its thread waits on this device's events.
        lane->completer->post([this] { static_cast<void>(cudaSetDevice(options.device)); });
      }
    } catch (const std::exception&) {  // system_error or bad_alloc
      shutdown();                      // joins the threads started, releases the streams
      throw;
    }
  }
};

CudaTransferEngine::CudaTransferEngine(Layout src, Layout dst, CudaDirection direction,
                                       CudaEngineOptions options) {
  check_engine_options(src, dst, options);
  check_device(options.device);

  if (options.name.empty()) options.name = std::string(to_string(direction));
  impl_ = std::make_unique<Impl>(std::move(src), std::move(dst), direction, std::move(options));
  Impl& im = *impl_;
  if (im.options.registry) {
    im.metrics = std::make_unique<TransferMetrics>(im.options.registry, im.options.name);
  }
  DeviceGuard guard(im.options.device);
  if (guard.status() != cudaSuccess) {
    throw RuntimeError(ErrorKind::kDevice, static_cast<int>(guard.status()),
                       cuda_error_text("CudaTransferEngine", "cudaSetDevice", guard.status()));
  }
  im.probe_copy_modes();
  im.kernel_blocks = kernel_block_count(im.options);
  im.create_lanes();
  kvbm::logger()->debug("CUDA engine {}: device {}, {} streams, kernel {}, memcpy batch {}",
                        to_string(direction), im.options.device, im.options.num_streams,
                        im.kernel_ok ? "available" : "unavailable (host memory not pinned)",
                        im.batch_ok ? "available" : "unavailable");
  im.start_threads();  // last, so that nothing after it can throw with threads running
}

CudaTransferEngine::~CudaTransferEngine() {
  if (impl_) impl_->shutdown();
}

std::string_view CudaTransferEngine::name() const noexcept { return impl_->options.name; }
std::optional<TransferCounts> CudaTransferEngine::counts() const noexcept {
  if (!impl_->metrics) return std::nullopt;
  return impl_->metrics->counts();
}
CudaDirection CudaTransferEngine::direction() const noexcept { return impl_->direction; }
const CudaEngineOptions& CudaTransferEngine::options() const noexcept { return impl_->options; }
bool CudaTransferEngine::kernel_available() const noexcept { return impl_->kernel_ok; }
bool CudaTransferEngine::memcpy_batch_available() const noexcept { return impl_->batch_ok; }

CudaCopyMode CudaTransferEngine::mode_for(std::size_t num_regions,
                                          std::size_t total_bytes) const noexcept {
  return impl_->resolve(num_regions, total_bytes);
}

CudaEngineStats CudaTransferEngine::stats() const noexcept {
  const Impl& im = *impl_;
  CudaEngineStats s;
  s.batches = im.batches.load(std::memory_order_relaxed);
  s.failed_batches = im.failed_batches.load(std::memory_order_relaxed);
  s.copies = im.copies.load(std::memory_order_relaxed);
  s.bytes = im.bytes.load(std::memory_order_relaxed);
  s.kernel_batches = im.kernel_batches.load(std::memory_order_relaxed);
  s.memcpy_batch_batches = im.memcpy_batch_batches.load(std::memory_order_relaxed);
  s.memcpy_loop_batches = im.memcpy_loop_batches.load(std::memory_order_relaxed);
  return s;
}

std::shared_ptr<TransferCompletion> CudaTransferEngine::submit(
    std::span<const TransferPair> pairs) {
  Impl& im = *impl_;
  check_batch(im.options.name, pairs, im.src.num_blocks(), im.dst.num_blocks());
  std::vector<BlockId> src_blocks(pairs.size());
  std::vector<BlockId> dst_blocks(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    src_blocks[i] = pairs[i].src;
    dst_blocks[i] = pairs[i].dst;
  }
  std::vector<CopyOp> ops;
  ops.reserve(pairs.size() * im.src.config().regions_per_block());
  plan_copies(im.src, src_blocks, im.dst, dst_blocks, ops);
  std::size_t total = 0;
  for (const CopyOp& op : ops) total += op.size;
  const CudaCopyMode mode = im.resolve(ops.size(), total);

  auto completion = std::make_shared<TransferCompletion>();
  PendingBatch batch;
  batch.completion = completion;
  batch.num_pairs = pairs.size();
  batch.bytes = total;

  Lane& lane = *im.lanes[im.next_lane.fetch_add(1, std::memory_order_relaxed) % im.lanes.size()];
  DeviceGuard guard(im.options.device);
  detail::LockGuard submit_lock(lane.submit_mu);
  if (guard.status() != cudaSuccess) {
    batch.error = cuda_error(im.options.name, "cudaSetDevice", guard.status());
  } else {
    batch.error = im.enqueue(mode, ops, lane.stream, batch.slot);
  }
  if (batch.error) static_cast<void>(cudaGetLastError());
  // The event follows whatever was enqueued, even after an error: the batch
  // completes only when its copies have stopped touching memory.
  cudaError_t record_err = cudaSuccess;
  batch.event = im.record_event(lane, record_err);
  if (batch.event == nullptr && !batch.error) {
    batch.error = cuda_error(im.options.name, "cudaEventRecord", record_err);
  }

  im.batches.fetch_add(1, std::memory_order_relaxed);
  im.copies.fetch_add(ops.size(), std::memory_order_relaxed);
  im.bytes.fetch_add(total, std::memory_order_relaxed);
  switch (mode) {
    case CudaCopyMode::kKernel:
      im.kernel_batches.fetch_add(1, std::memory_order_relaxed);
      break;
    case CudaCopyMode::kMemcpyBatch:
      im.memcpy_batch_batches.fetch_add(1, std::memory_order_relaxed);
      break;
    case CudaCopyMode::kAuto:
    case CudaCopyMode::kMemcpyLoop:
      im.memcpy_loop_batches.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  // std::function is copyable, the batch is not: the job holds it by pointer.
  auto pending = std::make_shared<PendingBatch>(std::move(batch));
  lane.completer->post([&im, &lane, pending] { im.finish(lane, std::move(*pending)); });
  return completion;
}

}  // namespace kvbm

#else  // !KVBM_HAVE_CUDA

namespace kvbm {

struct CudaTransferEngine::Impl {
  CudaDirection direction = CudaDirection::kDeviceToHost;
  CudaEngineOptions options;
};

CudaTransferEngine::CudaTransferEngine(Layout /*src*/, Layout /*dst*/, CudaDirection /*direction*/,
                                       CudaEngineOptions /*options*/) {
  KVBM_CHECK(false,
             "CudaTransferEngine: kvbm was built without CUDA; reconfigure with a CUDA toolkit "
             "and -DKVBM_ENABLE_CUDA=ON (or AUTO)");
}

CudaTransferEngine::~CudaTransferEngine() = default;

// Unreachable: the constructor always throws.
std::string_view CudaTransferEngine::name() const noexcept { return "cuda_unavailable"; }
std::optional<TransferCounts> CudaTransferEngine::counts() const noexcept { return std::nullopt; }
CudaDirection CudaTransferEngine::direction() const noexcept { return impl_->direction; }
const CudaEngineOptions& CudaTransferEngine::options() const noexcept { return impl_->options; }
bool CudaTransferEngine::kernel_available() const noexcept { return false; }
bool CudaTransferEngine::memcpy_batch_available() const noexcept { return false; }
CudaCopyMode CudaTransferEngine::mode_for(std::size_t /*num_regions*/,
                                          std::size_t /*total_bytes*/) const noexcept {
  return CudaCopyMode::kMemcpyLoop;
}
CudaEngineStats CudaTransferEngine::stats() const noexcept { return {}; }
std::shared_ptr<TransferCompletion> CudaTransferEngine::submit(
    std::span<const TransferPair> /*pairs*/) {
  KVBM_CHECK(false, "CudaTransferEngine: kvbm was built without CUDA");
  return nullptr;
}

}  // namespace kvbm

#endif  // KVBM_HAVE_CUDA
