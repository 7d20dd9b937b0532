#include "replay/remote_refusal.h"

#include <algorithm>

#include <fmt/format.h>

namespace kvbm::replay {

void add_remote_stats(std::optional<RemoteStoreStats>& total,
                      const std::optional<RemoteStoreStats>& one) {
  if (!one) return;
  if (!total) {
    total = one;
    return;
  }
  RemoteStoreStats& t = *total;
  t.hits += one->hits;
  t.misses += one->misses;
  t.puts += one->puts;
  t.failed_puts += one->failed_puts;
  t.read_bytes += one->read_bytes;
  t.written_bytes += one->written_bytes;
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i)
    t.blocks_by_status[i] += one->blocks_by_status[i];
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i)
    t.refused_by_reason[i] += one->refused_by_reason[i];
  t.servers_down = std::max(t.servers_down, one->servers_down);
  t.servers_refused = std::max(t.servers_refused, one->servers_refused);
  // Keep the worst state (refused over down over ok) and its refusal.
  static_assert(RemoteState::kOk < RemoteState::kDown &&
                RemoteState::kDown < RemoteState::kRefused);
  if (one->state > t.state || (t.refusal.empty() && !one->refusal.empty())) {
    t.state = std::max(t.state, one->state);
    t.refusal = one->refusal;
    t.refused_server = one->refused_server;
    t.refused_user = one->refused_user;
  }
}

namespace {

// What to change for a refusal of this kind.
std::string fix_for(const RemoteStoreStats& g4) {
  const RemoteRefusal kind = remote_refusal_of(g4.refusal);
  switch (kind) {
    case RemoteRefusal::kWrongPass:
      return fmt::format(
          "the password or user is wrong, or the user is disabled: give user '{}' its password "
          "in the --remote URL (redis://user:password@host:port/db) or check that the server "
          "has this user (ACL LIST)",
          g4.refused_user);
    case RemoteRefusal::kNoAuth:
      return "the server needs a password and none was given: put it in the --remote URL "
             "(redis://:password@host:port/db, or redis://user:password@host:port/db)";
    case RemoteRefusal::kNoPerm:
      return fmt::format(
          "user '{}' may not run that command or touch that key: grant it kvbm's keys and "
          "commands (ACL SETUSER {} ~kvbm:* +get +set +exists, plus +cluster|slots +readonly "
          "+asking on a cluster; docs/remote.md, 'Access control')",
          g4.refused_user, g4.refused_user);
    case RemoteRefusal::kOther:
      break;
  }
  return "check the user and password in the --remote URL against the server's requirepass or "
         "ACL (docs/remote.md, 'Access control')";
}

}  // namespace

std::string remote_refusal_message(const std::optional<RemoteStoreStats>& g4) {
  if (!g4 || g4->state != RemoteState::kRefused) return {};
  const std::uint64_t refused = g4->count(RemoteStatus::kAccessDenied);
  return fmt::format(
      "G4 refused access: server {} (user '{}') answered \"{}\"; {} block accesses were "
      "refused ({} blocks found in G4, {} stored), so G4's figures are misses, not a cold "
      "cache. To fix: {}",
      g4->refused_server.empty() ? std::string("(the cluster)") : g4->refused_server,
      g4->refused_user, g4->refusal, refused, g4->hits, g4->puts, fix_for(*g4));
}

}  // namespace kvbm::replay
