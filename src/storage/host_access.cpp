#include "kvbm/storage/host_access.h"

#include <cstring>
#include <string>

#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/storage/storage.h"

#if KVBM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvbm {
namespace {

#if KVBM_HAVE_CUDA
[[noreturn]] void throw_cuda_copy(cudaError_t err, const char* call, std::size_t n) {
  (void)cudaGetLastError();
  throw RuntimeError(
      ErrorKind::kDevice, static_cast<int>(err),
      std::string(call) + "(" + std::to_string(n) + " bytes) failed: " + cudaGetErrorString(err));
}

// One copy, finished when this returns. A plain cudaMemcpy from pageable memory to the device
// returns once the bytes are staged, before the DMA into device memory is over; the engines'
// streams are non-blocking (they do not wait for the legacy default stream), so a copy they
// started next could read the old bytes (seen on an H100). Hence the copy on the legacy stream
// and a wait for that stream.
void copy_and_wait(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind,
                   const char* what) {
  cudaError_t err = cudaMemcpyAsync(dst, src, n, kind, cudaStreamLegacy);
  if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamLegacy);
  if (err != cudaSuccess) throw_cuda_copy(err, what, n);
}
#endif

}  // namespace

bool host_addressable(std::uintptr_t addr) noexcept {
#if KVBM_HAVE_CUDA
  if (!cuda_device_available()) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, reinterpret_cast<const void*>(addr)) != cudaSuccess) {
    (void)cudaGetLastError();  // not an address CUDA knows: host memory
    return true;
  }
  return a.type != cudaMemoryTypeDevice;
#else
  (void)addr;
  return true;
#endif
}

void host_write(std::uintptr_t dst, const void* src, std::size_t n) {
  if (n == 0) return;
#if KVBM_HAVE_CUDA
  if (!host_addressable(dst)) {
    copy_and_wait(reinterpret_cast<void*>(dst), src, n, cudaMemcpyHostToDevice,
                  "cudaMemcpyAsync (host to device)");
    return;
  }
#endif
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
}

void host_read(void* dst, std::uintptr_t src, std::size_t n) {
  if (n == 0) return;
#if KVBM_HAVE_CUDA
  if (!host_addressable(src)) {
    copy_and_wait(dst, reinterpret_cast<const void*>(src), n, cudaMemcpyDeviceToHost,
                  "cudaMemcpyAsync (device to host)");
    return;
  }
#endif
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
}

}  // namespace kvbm
