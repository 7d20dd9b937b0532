// src/offload/cuda_event.cpp: CudaEventPrecondition (kvbm/offload/cuda_event.h).

#include "kvbm/offload/cuda_event.h"

#include <stdexcept>
#include <string>

#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/storage/storage.h"

#if KVBM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvbm {

#if KVBM_HAVE_CUDA
namespace {

void check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) {
    throw RuntimeError(
        ErrorKind::kDevice, static_cast<int>(err),
        std::string("CudaEventPrecondition: ") + call + " failed: " + cudaGetErrorString(err));
  }
}

// Runs on a CUDA runtime thread once the stream reaches it; owns one reference.
void CUDART_CB meet(void* user) {
  auto* event = static_cast<std::shared_ptr<HostEvent>*>(user);
  (*event)->signal();
  delete event;
}

}  // namespace

CudaEventPrecondition::CudaEventPrecondition(void* cuda_event, int device)
    : event_(std::make_shared<HostEvent>()) {
  KVBM_CHECK(cuda_event != nullptr, "CudaEventPrecondition: the CUDA event is null");
  KVBM_CHECK(cuda_device_available(),
             "CudaEventPrecondition: no usable CUDA device; use HostEvent instead");
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice");
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  try {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(cuda_event), 0),
          "cudaStreamWaitEvent");
    auto* ref = new std::shared_ptr<HostEvent>(event_);
    const cudaError_t err = cudaLaunchHostFunc(stream, &meet, ref);
    if (err != cudaSuccess) delete ref;
    check(err, "cudaLaunchHostFunc");
    // Destroying a stream with work pending is allowed: the work still runs.
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    stream = nullptr;
  } catch (...) {  // undo, then rethrow: nothing is swallowed
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    (void)cudaSetDevice(previous);
    throw;
  }
  (void)cudaSetDevice(previous);
}

#else

CudaEventPrecondition::CudaEventPrecondition(void* /*cuda_event*/, int /*device*/) {
  KVBM_CHECK(false, "CudaEventPrecondition: kvbm was built without CUDA; use HostEvent instead");
}

#endif

CudaEventPrecondition::~CudaEventPrecondition() = default;

}  // namespace kvbm
