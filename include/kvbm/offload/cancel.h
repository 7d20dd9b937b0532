// kvbm/offload/cancel.h: the cancellation token a container carries (P2).
//
// A CancellationToken is a shared flag with callbacks. Copies share one
// state: the TransferHandle keeps one copy, the container carries another
// through every stage (policy P2 of the offload spec). cancel() sets the
// flag and runs the callbacks registered with on_cancel() once, on the
// cancelling thread; a callback registered after that runs at once.
//
// The token also marks the commitment point (P3). The executor calls
// try_seal() right before it upgrades a container's blocks: it succeeds only
// if the token was not cancelled, and from then on cancel() no longer takes
// effect (it returns false; cancel_requested() still records the request).
// cancel() and try_seal() are mutually exclusive, so a container is either
// cancelled before it pins anything, or sealed and certain to complete.
//
// Thread-safety: every member may be called from any thread. Callbacks run
// outside the token's lock and must not throw.

#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kvbm {

/// A shared, one-way cancellation flag that can be sealed; see the file comment.
class CancellationToken {
 public:
  /// Identifies a callback for remove_callback(); 0 means "none".
  using CallbackId = std::uint64_t;

  /// A fresh token: neither cancelled nor sealed.
  CancellationToken();

  /// Cancels unless already cancelled or sealed; runs the callbacks. Returns
  /// true when this call cancelled the token.
  bool cancel() const;
  /// Returns true once cancel() has taken effect.
  [[nodiscard]] bool is_cancelled() const noexcept;
  /// Returns true once cancel() has been called, even when it came after the
  /// seal and so had no effect.
  [[nodiscard]] bool cancel_requested() const noexcept;

  /// Seals the token unless it is cancelled; returns whether it is sealed now.
  [[nodiscard]] bool try_seal() const;
  /// Returns true once try_seal() has succeeded.
  [[nodiscard]] bool is_sealed() const noexcept;

  /// Runs `cb` once when the token is cancelled (at once, on this thread,
  /// when it already is: then returns 0). A sealed token never runs it.
  CallbackId on_cancel(std::function<void()> cb) const;
  /// Unregisters a callback that has not run yet; a no-op otherwise.
  void remove_callback(CallbackId id) const noexcept;

  /// Returns true when both refer to the same state.
  friend bool operator==(const CancellationToken& a, const CancellationToken& b) noexcept {
    return a.s_ == b.s_;
  }

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace kvbm
