// Tests of CudaEventPrecondition (kvbm/offload/cuda_event.h). Without a usable
// CUDA device only the refusal is checked; the rest skips with a message.

#include "kvbm/offload/cuda_event.h"

#include <atomic>
#include <chrono>
#include <future>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "kvbm/error.h"
#include "kvbm/storage/storage.h"
#include "skip_or_fail.h"

#if KVBM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvbm {
namespace cuda_event_test {

TEST(CudaEventPrecondition, RefusedWithoutADevice) {
  if (cuda_device_available()) KVBM_SKIP_OR_FAIL("GPU present: a CUDA device is present");
  int dummy = 0;
  EXPECT_THROW(CudaEventPrecondition(&dummy, 0), UsageError);
}

TEST(CudaEventPrecondition, RejectsANullEvent) {
  EXPECT_THROW(CudaEventPrecondition(nullptr, 0), UsageError);
}

#if KVBM_HAVE_CUDA
// Blocks a stream on the host until the promise is fulfilled.
void CUDART_CB block_on(void* p) { static_cast<std::shared_future<void>*>(p)->wait(); }

TEST(CudaEventPrecondition, IsMetOnlyAfterTheEventCompletes) {
  if (!cuda_device_available())
    KVBM_SKIP_OR_FAIL("no GPU: no usable CUDA device: GPU test skipped");
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_EQ(cudaLaunchHostFunc(stream, &block_on, &opened), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);  // completes after the gate opens
  CudaEventPrecondition pre(event, 0);
  std::atomic<int> calls{0};
  pre.on_met([&] { calls++; });
  EXPECT_FALSE(pre.wait_for(std::chrono::milliseconds(50)));
  EXPECT_EQ(calls.load(), 0);
  gate.set_value();
  EXPECT_TRUE(pre.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(calls.load(), 1);
  int late = 0;
  pre.on_met([&] { late++; });  // already met: runs at once
  EXPECT_EQ(late, 1);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaEventDestroy(event);
  cudaStreamDestroy(stream);
}
#endif

}  // namespace cuda_event_test
}  // namespace kvbm
