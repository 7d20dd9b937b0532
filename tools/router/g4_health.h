// router/g4_health.h: kvbm-router's check of the shared G4 (Redis) tier (--remote).
//
// The router itself stores no blocks in G4: it indexes the G4 blocks the
// engines' KV events announce. With --remote it also holds a kvbm RemoteStore
// on the same servers and, every --remote-check-ms on a PeriodicWorker (and at
// once when started), writes, reads and asks for one probe block of 16 bytes
// under kvbm's key prefix ("kvbm:<fingerprint of the router's probe
// namespace>:<probe hash>", expiring after a minute): SET, GET and EXISTS on a
// kvbm key, the rights an engine needs. The store's stats() then say whether
// G4 is ok, down (a server does not answer) or refused (credentials or ACL),
// and /health reports it (json()): the state, the reason, the refusing server's
// URL without its password, the user and the server's reply. The store's
// Prometheus series (kvbm_remote_state, kvbm_remote_refused_total, ...) go to
// the router's registry.
//
// Thread-safety: json() may be called from any thread while checks run.

#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace prometheus {
class Registry;
}

namespace kvbm {
class RemoteStore;
namespace detail {
class PeriodicWorker;
}
}  // namespace kvbm

namespace kvbm::router_process {

/// The periodic G4 check; see the file comment.
class G4Health {
 public:
  /// Creates the store on `urls` (RemoteStoreOptions::urls) and starts checking every
  /// `period`. Throws UsageError for a bad URL, or when kvbm was built without the
  /// remote tier.
  G4Health(const std::vector<std::string>& urls, std::chrono::milliseconds period,
           std::shared_ptr<prometheus::Registry> registry);
  ~G4Health();
  G4Health(const G4Health&) = delete;
  G4Health& operator=(const G4Health&) = delete;

  /// Returns /health's "g4" object: {"state": "ok"|"down"|"refused", "reason", "checks",
  /// "servers", "servers_down", "servers_refused"} and, while refused, "server", "user" and
  /// "refusal" (docs/router.md, "GET /health").
  [[nodiscard]] nlohmann::json json() const;
  /// Returns the number of checks that have ended.
  [[nodiscard]] std::uint64_t checks() const noexcept {
    return checks_.load(std::memory_order_acquire);
  }

 private:
  void check();

  std::unique_ptr<RemoteStore> store_;
  std::atomic<std::uint64_t> checks_{0};
  std::unique_ptr<detail::PeriodicWorker> worker_;  // last: stopped first
};

}  // namespace kvbm::router_process
