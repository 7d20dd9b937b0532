// kvbm/offload/precondition.h: what must happen before blocks may be copied.
//
// A block registered right after the forward pass that wrote it may still be
// being written on the device. The engine hands the offload pipeline a
// Precondition with the blocks: an event it signals when that forward pass
// has finished (a CUDA event on a GPU, a plain host-side event otherwise).
// The pipeline copies no block before its precondition is met, and waiting
// for it can be cancelled (P6: the awaiter selects on the event and the
// container's cancellation token).
//
// The interface is callback-based, so that waiting holds no thread:
// on_met(cb) runs cb once the event is met. HostEvent is the host-side
// implementation: signal() meets it.
//
// Thread-safety: every member may be called from any thread; callbacks run
// on the signalling thread (or the registering one, when already met),
// outside every lock, and must not throw.

#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "kvbm/detail/mutex.h"

namespace kvbm {

/// An event that is met once and stays met.
class Precondition {
 public:
  virtual ~Precondition() = default;
  /// Returns true once the event is met.
  [[nodiscard]] virtual bool is_met() const = 0;
  /// Runs `cb` once the event is met: at once on this thread when it
  /// already is, else on the thread that meets it.
  virtual void on_met(std::function<void()> cb) = 0;
};

/// A host-side event: met when signal() is called.
class HostEvent final : public Precondition {
 public:
  HostEvent() = default;
  HostEvent(const HostEvent&) = delete;
  HostEvent& operator=(const HostEvent&) = delete;

  /// Meets the event and runs the waiting callbacks; later calls do nothing.
  void signal();
  [[nodiscard]] bool is_met() const override;
  void on_met(std::function<void()> cb) override;
  /// Blocks until the event is met or the timeout passes; returns is_met().
  bool wait_for(std::chrono::nanoseconds timeout) const;

 private:
  mutable detail::Mutex mu_;
  mutable std::condition_variable cv_;
  bool met_ KVBM_GUARDED_BY(mu_) = false;
  std::vector<std::function<void()>> callbacks_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm
