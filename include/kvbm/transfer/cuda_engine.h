// kvbm/transfer/cuda_engine.h: copies blocks between GPU memory and host memory.
//
// A CudaTransferEngine moves blocks device -> host, host -> device or device ->
// device, for contiguous and layer-separated layouts alike. Each batch is
// planned with plan_copies() and run as one batched copy kernel (kKernel), one
// cudaMemcpyBatchAsync (kMemcpyBatch, CUDA 12.8+) or one cudaMemcpyAsync per
// region (kMemcpyLoop); kAuto picks per batch (CudaEngineOptions). The kernel
// needs the host layout in pinned memory the device reaches at the same address
// (cudaHostAlloc, cudaMallocHost or cudaHostRegister). The engine owns its
// non-blocking streams (never the default stream) and one completion thread
// per stream, which signals each TransferCompletion in submission order:
// callbacks run on an engine thread, never inside a CUDA callback, and may
// call CUDA. docs/cuda.md has the modes, the thresholds and the kernel.
//
// Errors: a CUDA error while enqueueing or executing a batch marks every pair
// of that batch failed (a TransferError of kind kDevice whose code is the
// cudaError_t and whose message names the call); the source is never written.
// A sticky error (an illegal address in a kernel) poisons the process's CUDA
// context. Built without CUDA (KVBM_HAVE_CUDA == 0, kvbm/config.h) the header
// compiles the same and the constructor throws UsageError;
// cuda_device_available() (kvbm/storage/storage.h) says whether a device is
// usable at run time.
//
// Lifetime: the layouts' memory must outlive the engine; its destructor waits
// for every batch it accepted. Thread-safety: submit() may be called from
// several threads concurrently; name(), options() and stats() from any thread.

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvbm/config.h"
#include "kvbm/storage/layout.h"
#include "kvbm/transfer/transfer_engine.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

/// Which way a CudaTransferEngine copies.
enum class CudaDirection : std::uint8_t { kDeviceToHost, kHostToDevice, kDeviceToDevice };

/// How a CudaTransferEngine executes a batch.
enum class CudaCopyMode : std::uint8_t {
  kAuto,         ///< chosen per batch from the regions' count and size
  kKernel,       ///< one launch of the batched copy kernel
  kMemcpyBatch,  ///< one cudaMemcpyBatchAsync call
  kMemcpyLoop,   ///< one cudaMemcpyAsync per region
};

/// Returns "device_to_host", "host_to_device" or "device_to_device".
constexpr std::string_view to_string(CudaDirection direction) noexcept {
  switch (direction) {
    case CudaDirection::kDeviceToHost:
      return "device_to_host";
    case CudaDirection::kHostToDevice:
      return "host_to_device";
    case CudaDirection::kDeviceToDevice:
      return "device_to_device";
  }
  return "unknown";
}

/// Returns "auto", "kernel", "memcpy_batch" or "memcpy_loop".
constexpr std::string_view to_string(CudaCopyMode mode) noexcept {
  switch (mode) {
    case CudaCopyMode::kAuto:
      return "auto";
    case CudaCopyMode::kKernel:
      return "kernel";
    case CudaCopyMode::kMemcpyBatch:
      return "memcpy_batch";
    case CudaCopyMode::kMemcpyLoop:
      return "memcpy_loop";
  }
  return "unknown";
}

/// Settings of a CudaTransferEngine.
struct CudaEngineOptions {
  int device = 0;  ///< CUDA device ordinal of the device side
  CudaCopyMode mode = CudaCopyMode::kAuto;
  /// kAuto: a batch of fewer planned regions than this uses the memcpy loop.
  std::size_t kernel_min_regions = 8;
  /// kAuto: regions of at most this mean size use the kernel (when the host
  /// side is device-accessible), larger ones cudaMemcpyBatchAsync.
  std::size_t kernel_max_region_bytes = std::size_t{256} << 10;
  /// kAuto: regions of at least this mean size use cudaMemcpyBatchAsync, or the memcpy loop
  /// where the batch is not available (the kernel is no faster there). Measured on an H100
  /// (docs/cuda.md): at 2 MiB the batch gives 0.92-0.93 of one contiguous copy, the loop and
  /// the kernel 0.87-0.90.
  std::size_t loop_min_region_bytes = std::size_t{2} << 20;
  /// Streams (and completion threads); batches take them in turn. At least 1.
  std::uint32_t num_streams = 2;
  /// Kernel: bytes each thread block copies at a time; a multiple of 16.
  std::size_t kernel_chunk_bytes = std::size_t{64} << 10;
  /// Kernel: most thread blocks per launch; 0: 4 per multiprocessor.
  std::uint32_t kernel_max_blocks = 0;
  /// The path's name: name() and the `path` label of the metrics; empty means
  /// to_string(direction).
  std::string name{};
  /// Where to publish kvbm_transfer_*_total{path=name}; none when null.
  std::shared_ptr<prometheus::Registry> registry{};
  /// Test hook: called with a CUDA call's name ("cudaMemcpyAsync",
  /// "cudaMemcpyBatchAsync", "cudaLaunchKernel", "cudaEventSynchronize", ...)
  /// before the engine makes it for a batch; a non-zero return is taken as
  /// that call's cudaError_t and the call is skipped. Must be thread-safe.
  std::function<int(std::string_view call)> inject_cuda_error{};
};

/// Counters of one engine; every field only grows.
struct CudaEngineStats {
  std::uint64_t batches = 0;         ///< batches submitted
  std::uint64_t failed_batches = 0;  ///< batches completed with a CUDA error
  std::uint64_t copies = 0;          ///< planned regions
  std::uint64_t bytes = 0;           ///< bytes of those regions
  std::uint64_t kernel_batches = 0;
  std::uint64_t memcpy_batch_batches = 0;
  std::uint64_t memcpy_loop_batches = 0;
};

/// Moves blocks between GPU memory and host memory with CUDA.
class CudaTransferEngine final : public TransferEngine {
 public:
  /// Builds an engine copying blocks of `src` into blocks of `dst` in
  /// `direction`. The device side(s) must be memory of `options.device`; the
  /// host side pinned memory for kKernel (see the file comment).
  /// Throws UsageError when built without CUDA, when no device is usable,
  /// when the layouts' configs differ, when an option is out of range, when
  /// the registry already holds series for the name, or when an explicit mode
  /// is not available (kKernel on host memory the device cannot reach, kMemcpyBatch
  /// before CUDA 12.8). Throws RuntimeError (kind kDevice, the cudaError_t
  /// as its code) when CUDA cannot select the device or create the streams.
  CudaTransferEngine(Layout src, Layout dst, CudaDirection direction,
                     CudaEngineOptions options = {});
  /// Waits for every accepted batch, then releases the streams and threads.
  ~CudaTransferEngine() override;
  CudaTransferEngine(const CudaTransferEngine&) = delete;
  CudaTransferEngine& operator=(const CudaTransferEngine&) = delete;

  /// Returns options().name, or to_string(direction()) when that is empty.
  [[nodiscard]] std::string_view name() const noexcept override;
  /// Plans the pairs' copies and enqueues them; returns at once. Throws
  /// UsageError (before enqueueing anything) when the batch is empty, a block
  /// id is out of range, or a destination block appears twice. A CUDA error does not throw: it
  /// fails the whole batch in its completion.
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override;
  /// Returns the counts of its series; nullopt without options.registry.
  [[nodiscard]] std::optional<TransferCounts> counts() const noexcept override;

  /// Returns the direction the engine copies in.
  [[nodiscard]] CudaDirection direction() const noexcept;
  /// Returns the options the engine was built with.
  [[nodiscard]] const CudaEngineOptions& options() const noexcept;
  /// Returns true when the kernel may be used (the host side is device-accessible).
  [[nodiscard]] bool kernel_available() const noexcept;
  /// Returns true when cudaMemcpyBatchAsync may be used.
  [[nodiscard]] bool memcpy_batch_available() const noexcept;
  /// Returns the mode a batch of `num_regions` planned regions of
  /// `total_bytes` bytes runs in (never kAuto).
  [[nodiscard]] CudaCopyMode mode_for(std::size_t num_regions,
                                      std::size_t total_bytes) const noexcept;
  /// Returns a snapshot of the counters.
  [[nodiscard]] CudaEngineStats stats() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm
