// kvbm/offload/remote_presence_policy.h: skip blocks a remote store already holds.
//
// The presence policy of a boundary into the remote tier (G4): it asks the
// store, in one EXISTS round trip per call (per server, pipelined), which of
// the blocks still passing are there, and filters those. A server that fails
// answers "absent" (RemoteStore::exists), so the blocks are written: the put
// then fails or succeeds on its own terms, and nothing is lost by asking.
//
// Thread-safety: evaluate() from any number of threads (the store's calls are).

#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvbm/offload/policy.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm {

/// Filters blocks whose key the remote store already holds.
class RemotePresencePolicy final : public OffloadPolicy {
 public:
  /// Throws UsageError when `store` is null.
  explicit RemotePresencePolicy(std::shared_ptr<RemoteStore> store);
  [[nodiscard]] std::string_view name() const noexcept override { return "remote_presence"; }
  void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) override;

 private:
  std::shared_ptr<RemoteStore> store_;
};

}  // namespace kvbm
