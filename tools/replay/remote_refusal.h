// replay/remote_refusal.h: G4 refused by its servers (credentials or ACL), made loud.
//
// The library degrades a refused G4 to misses (RemoteStoreStats::state kRefused); a replay
// that went on would print a table that looks like a cold cache. The tool sums each
// instance's G4 stats and, when G4 still refuses at the end of a run, says which server and
// user, what the server answered and what to fix, and exits non-zero (main.cpp).

#pragma once

#include <optional>
#include <string>

#include "kvbm/remote/remote_store.h"

namespace kvbm::replay {

/// Adds one instance's G4 stats to the run's: counters summed, the worst state kept
/// (refused, down, ok) with its refusal.
void add_remote_stats(std::optional<RemoteStoreStats>& total,
                      const std::optional<RemoteStoreStats>& one);

/// Returns "" unless G4 still refused at the end of the run (state kRefused); then a message
/// naming the server (its URL without the password), the user, the server's reply, how many
/// block accesses it refused, and what to fix.
[[nodiscard]] std::string remote_refusal_message(const std::optional<RemoteStoreStats>& g4);

}  // namespace kvbm::replay
