// cuda/copy_kernels.cu: the batched copy kernel. See copy_kernels.cuh.

#include <cstdint>

#include "copy_kernels.cuh"

namespace kvbm::cuda {
namespace {

// Copies the first `bytes / sizeof(Word)` words of a chunk with every thread of
// the block; each thread keeps kUnroll loads in flight before it stores, which
// hides latency when one side is host memory across PCIe.
// Precondition: src and dst are aligned to sizeof(Word).
template <class Word, int kUnroll>
__device__ __forceinline__ void copy_words(const unsigned char* __restrict__ src,
                                           unsigned char* __restrict__ dst, std::uint64_t bytes) {
  const Word* __restrict__ s = reinterpret_cast<const Word*>(src);
  Word* __restrict__ d = reinterpret_cast<Word*>(dst);
  const std::uint64_t n = bytes / sizeof(Word);
  const std::uint64_t step = blockDim.x;
  std::uint64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * step < n; i += kUnroll * step) {
    Word w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = s[i + u * step];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) d[i + u * step] = w[u];
  }
  for (; i < n; i += step) d[i] = s[i];
  // The bytes after the last whole word.
  for (std::uint64_t b = n * sizeof(Word) + threadIdx.x; b < bytes; b += step) dst[b] = src[b];
}

__global__ void __launch_bounds__(kCopyThreads) batched_copy_kernel(BatchedCopyParams p) {
  for (std::uint64_t chunk = blockIdx.x; chunk < p.total_chunks; chunk += gridDim.x) {
    // The region holding this chunk: the r with chunk_begin[r] <= chunk < chunk_begin[r + 1]
    // (an empty region has chunk_begin[r] == chunk_begin[r + 1] and is never chosen).
    std::uint32_t lo = 0;
    std::uint32_t hi = p.num_copies;
    while (hi - lo > 1) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (p.chunk_begin[mid] <= chunk) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const CopyDesc d = p.descs[lo];
    const std::uint64_t offset = (chunk - p.chunk_begin[lo]) * p.chunk_bytes;
    const std::uint64_t left = d.size - offset;
    const std::uint64_t bytes = left < p.chunk_bytes ? left : p.chunk_bytes;
    const auto* src = reinterpret_cast<const unsigned char*>(d.src + offset);
    auto* dst = reinterpret_cast<unsigned char*>(d.dst + offset);
    // chunk_bytes is a multiple of 16, so every chunk has its region's alignment.
    const unsigned misalign = static_cast<unsigned>((d.src | d.dst) & 15U);
    if (misalign == 0) {
      copy_words<uint4, 4>(src, dst, bytes);
    } else if ((misalign & 7U) == 0) {
      copy_words<uint2, 4>(src, dst, bytes);
    } else if ((misalign & 3U) == 0) {
      copy_words<unsigned int, 4>(src, dst, bytes);
    } else {
      copy_words<unsigned char, 4>(src, dst, bytes);
    }
  }
}

}  // namespace

cudaError_t launch_batched_copy(const BatchedCopyParams& params, unsigned grid_blocks,
                                cudaStream_t stream) noexcept {
  if (params.total_chunks == 0) return cudaSuccess;
  if (params.chunk_bytes == 0 || params.chunk_bytes % 16 != 0) return cudaErrorInvalidValue;
  std::uint64_t grid = grid_blocks == 0 ? 1 : grid_blocks;
  if (grid > params.total_chunks) grid = params.total_chunks;
  BatchedCopyParams by_value = params;
  void* args[] = {&by_value};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&batched_copy_kernel),
                          dim3(static_cast<unsigned>(grid)), dim3(kCopyThreads), args, 0, stream);
}

}  // namespace kvbm::cuda
