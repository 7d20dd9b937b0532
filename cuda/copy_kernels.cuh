// cuda/copy_kernels.cuh: the batched copy kernel (internal; not installed).
//
// One launch moves many (source, destination, size) regions. The regions are
// described by an array of CopyDesc in device-visible memory together with a
// prefix sum of the number of chunks of `chunk_bytes` each region is cut into;
// the kernel walks the chunks of all regions grid-stride, one thread block per
// chunk, so a large region is spread over several blocks and a batch of small
// regions over the whole grid. Inside a chunk every thread moves 16-byte
// words when the region's source and destination are both 16-byte aligned, and
// 8-, 4- or 1-byte words otherwise; a size that is not a multiple of the word
// ends in a byte tail.
//
// The launch takes a plain, trivially copyable descriptor by value and an
// explicit stream (no library handles), as FlashInfer's kernels do. Host
// memory the kernel touches must be device-accessible at the same address:
// pinned memory from cudaHostAlloc, or registered with cudaHostRegister on a
// device that can use host pointers for registered memory (every device with
// unified addressing that kvbm targets).
//
// This header compiles with a plain C++ compiler: it declares only host
// functions and includes only the CUDA runtime API header.

#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace kvbm::cuda {

/// One region to copy; addresses are device-accessible.
struct CopyDesc {
  std::uint64_t src = 0;
  std::uint64_t dst = 0;
  std::uint64_t size = 0;
};
static_assert(sizeof(CopyDesc) == 24);

/// The kernel's launch descriptor, passed by value.
struct BatchedCopyParams {
  const CopyDesc* descs = nullptr;             ///< num_copies regions, device-accessible
  const std::uint64_t* chunk_begin = nullptr;  ///< num_copies + 1 prefix sums of chunks per region
  std::uint32_t num_copies = 0;
  std::uint64_t total_chunks = 0;  ///< chunk_begin[num_copies]
  std::uint64_t chunk_bytes = 0;   ///< a positive multiple of 16
};

/// The bytes of a descriptor buffer for `n` regions: n CopyDesc then n + 1
/// chunk prefix sums (both 8-byte aligned, one upload).
constexpr std::size_t descriptor_buffer_bytes(std::size_t n) noexcept {
  return n * sizeof(CopyDesc) + (n + 1) * sizeof(std::uint64_t);
}

/// Fills chunk_begin[0..n] with the prefix sums of ceil(size / chunk_bytes)
/// over descs[0..n) and returns the total. Precondition: chunk_bytes > 0.
inline std::uint64_t fill_chunk_prefix(const CopyDesc* descs, std::size_t n,
                                       std::uint64_t chunk_bytes,
                                       std::uint64_t* chunk_begin) noexcept {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    chunk_begin[i] = total;
    total += (descs[i].size + chunk_bytes - 1) / chunk_bytes;
  }
  chunk_begin[n] = total;
  return total;
}

/// Threads per block of the copy kernel.
inline constexpr unsigned kCopyThreads = 256;

/// Enqueues the batched copy kernel on `stream` with `grid_blocks` blocks
/// (clamped to [1, total_chunks]). Returns the launch status; a zero-chunk
/// batch launches nothing and returns cudaSuccess.
cudaError_t launch_batched_copy(const BatchedCopyParams& params, unsigned grid_blocks,
                                cudaStream_t stream) noexcept;

}  // namespace kvbm::cuda
