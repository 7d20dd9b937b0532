// src/offload/remote_presence_policy.cpp: kvbm/offload/remote_presence_policy.h.

#include "kvbm/offload/remote_presence_policy.h"

#include <cstdint>
#include <utility>

#include "kvbm/error.h"

namespace kvbm {

RemotePresencePolicy::RemotePresencePolicy(std::shared_ptr<RemoteStore> store)
    : store_(std::move(store)) {
  KVBM_CHECK(store_ != nullptr, "RemotePresencePolicy needs the remote store it asks");
}

void RemotePresencePolicy::evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) {
  // Only the blocks still passing are asked about.
  std::vector<std::uint64_t> ask;
  std::vector<std::size_t> at;
  ask.reserve(hashes.size());
  at.reserve(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!pass[i]) continue;
    ask.push_back(hashes[i].value());
    at.push_back(i);
  }
  if (ask.empty()) return;
  const std::vector<bool> present = store_->exists(ask);
  for (std::size_t k = 0; k < at.size() && k < present.size(); ++k) {
    if (present[k]) pass[at[k]] = false;
  }
}

}  // namespace kvbm
