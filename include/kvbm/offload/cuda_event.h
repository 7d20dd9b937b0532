// kvbm/offload/cuda_event.h: a Precondition met when a CUDA event completes.
//
// The engine records a CUDA event after the forward pass that writes a
// batch's KV blocks and hands it to the offload pipeline with the blocks:
//
//   cudaEventRecord(fwd_done, compute_stream);
//   auto pre = std::make_shared<kvbm::CudaEventPrecondition>(fwd_done, device);
//   kvbm.register_blocks(std::move(blocks), pre);   // copied once the pass is done
//
// Waiting holds no host thread: the precondition makes a private stream wait
// for the event (cudaStreamWaitEvent) and enqueues a host function behind it
// (cudaLaunchHostFunc), which meets the precondition when the event has
// completed. The event is captured at construction: recording it again later
// does not move this precondition. The caller may destroy the event right
// after construction (CUDA keeps the captured work alive).
//
// The public header stays CUDA-free: the event is passed as the opaque
// pointer a cudaEvent_t is. Built without CUDA, or with no usable device,
// the constructor throws UsageError: use HostEvent there.
//
// Callbacks run on a CUDA runtime thread and must be quick (the pipeline's
// only move a container to the next queue); they make no CUDA call.

#pragma once

#include <functional>
#include <memory>

#include "kvbm/offload/precondition.h"

namespace kvbm {

/// Met once a CUDA event has completed; see the file comment.
class CudaEventPrecondition final : public Precondition {
 public:
  /// `cuda_event` is a cudaEvent_t of `device`. Throws UsageError when CUDA
  /// is not available, RuntimeError (kind kDevice) when a CUDA call fails.
  explicit CudaEventPrecondition(void* cuda_event, int device = 0);
  ~CudaEventPrecondition() override;
  CudaEventPrecondition(const CudaEventPrecondition&) = delete;
  CudaEventPrecondition& operator=(const CudaEventPrecondition&) = delete;

  [[nodiscard]] bool is_met() const override { return event_->is_met(); }
  void on_met(std::function<void()> cb) override { event_->on_met(std::move(cb)); }
  /// Blocks until met or the timeout passes; returns is_met().
  bool wait_for(std::chrono::nanoseconds timeout) const { return event_->wait_for(timeout); }

 private:
  std::shared_ptr<HostEvent> event_;  // shared with the host function in flight
};

}  // namespace kvbm
