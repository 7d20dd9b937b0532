// kvbm/offload/precondition_awaiter.h: the second pipeline stage.
//
// The PreconditionAwaiter holds each container until its precondition (the
// forward pass that wrote the blocks) is met, then hands it to the sink (the
// next stage). Waiting holds no thread: the awaiter registers callbacks on
// both the precondition and the container's cancellation token and whichever
// fires first claims the container (P6, the select): if the token wins, the
// container is dropped at once and its handle ends as kCancelled; if the
// event wins, the sink gets it. A container without a precondition, or with
// one already met, goes to the sink at once, on the submitting thread.
//
// The sink runs on the thread that met the precondition (an engine thread,
// say): it must be quick and must not throw. close() stops the stage:
// waiting containers (and any submitted later) are cancelled, and close()
// returns only when no sink call is running any more.
//
// Thread-safety: every member may be called from any thread.

#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kvbm/detail/mutex.h"
#include "kvbm/offload/container.h"

namespace kvbm {

/// Holds containers until their preconditions are met; see the file comment.
template <TierMarker Src>
class PreconditionAwaiter {
 public:
  using Sink = std::function<void(OffloadContainer<Src>&&)>;

  /// Throws UsageError when `sink` is empty.
  explicit PreconditionAwaiter(Sink sink) : core_(std::make_shared<Core>()) {
    KVBM_CHECK(sink != nullptr, "PreconditionAwaiter needs a sink");
    core_->sink = std::move(sink);
  }
  ~PreconditionAwaiter() { close(); }
  PreconditionAwaiter(const PreconditionAwaiter&) = delete;
  PreconditionAwaiter& operator=(const PreconditionAwaiter&) = delete;

  /// Takes a container: to the sink when its precondition is met, else into
  /// the waiting set. A cancelled container is dropped (kCancelled).
  void submit(OffloadContainer<Src>&& c) {
    if (c.sweep()) return;
    c.state->advance(TransferStatus::kWaiting);
    if (c.precondition_met()) {
      if (!core_->begin_sink()) {
        c.cancel();
        return;
      }
      core_->sink(std::move(c));
      core_->end_sink();
      return;
    }
    const CancellationToken token = c.token;
    const std::shared_ptr<Precondition> pre = c.precondition;
    std::uint64_t id = 0;
    {
      detail::LockGuard lock(core_->mu);
      if (core_->closed) {
        c.cancel();  // NOLINT(bugprone-use-after-move): not moved on this path
        return;
      }
      id = core_->next_id++;
      core_->waiting.emplace(id, Entry{std::move(c), 0});
    }
    const std::weak_ptr<Core> weak = core_;
    // The token's side of the select: drop the container, end its handle.
    const auto cb_id = token.on_cancel([weak, id] {
      if (const auto core = weak.lock()) {
        if (auto e = core->claim(id, false)) e->container.finish_cancelled();
      }
    });
    {
      detail::LockGuard lock(core_->mu);
      if (auto it = core_->waiting.find(id); it != core_->waiting.end())
        it->second.cancel_cb = cb_id;
    }
    // The event's side: hand it on.
    pre->on_met([weak, id] {
      if (const auto core = weak.lock()) {
        if (auto e = core->claim(id, true)) {
          e->container.token.remove_callback(e->cancel_cb);
          core->sink(std::move(e->container));
          core->end_sink();
        }
      }
    });
  }

  /// Returns the number of containers waiting.
  [[nodiscard]] std::size_t waiting() const {
    detail::LockGuard lock(core_->mu);
    return core_->waiting.size();
  }

  /// Cancels every waiting container and refuses new ones; returns once no
  /// sink call is running. Idempotent.
  void close() {
    std::unordered_map<std::uint64_t, Entry> dropped;
    {
      detail::UniqueLock lock(core_->mu);
      core_->closed = true;
      dropped.swap(core_->waiting);
      core_->cv.wait(lock.native(), [&]() KVBM_REQUIRES(core_->mu) { return core_->sinking == 0; });
    }
    for (auto& [id, e] : dropped) e.container.cancel();
  }

 private:
  struct Entry {
    OffloadContainer<Src> container;
    CancellationToken::CallbackId cancel_cb;
  };
  struct Core {
    detail::Mutex mu;
    std::condition_variable cv;
    bool closed KVBM_GUARDED_BY(mu) = false;
    std::uint64_t next_id KVBM_GUARDED_BY(mu) = 1;
    std::size_t sinking KVBM_GUARDED_BY(mu) = 0;
    std::unordered_map<std::uint64_t, Entry> waiting KVBM_GUARDED_BY(mu);
    Sink sink;

    // Removes and returns the entry; when `for_sink`, also counts a sink call
    // (refused once closed).
    std::optional<Entry> claim(std::uint64_t id, bool for_sink) {
      detail::LockGuard lock(mu);
      const auto it = waiting.find(id);
      if (it == waiting.end()) return std::nullopt;
      Entry e = std::move(it->second);
      waiting.erase(it);
      if (for_sink) ++sinking;
      return e;
    }
    bool begin_sink() {
      detail::LockGuard lock(mu);
      if (closed) return false;
      ++sinking;
      return true;
    }
    void end_sink() {
      detail::LockGuard lock(mu);
      if (--sinking == 0) cv.notify_all();
    }
  };

  std::shared_ptr<Core> core_;
};

}  // namespace kvbm
