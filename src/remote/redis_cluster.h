// src/remote/redis_cluster.h: the Redis Cluster logic hiredis lacks.
//
// hiredis (0.14 on Debian bookworm) speaks to one server; no cluster client
// library is packaged there. What RemoteStore needs of a cluster is small:
// the slot map (CLUSTER SLOTS, asked of any node), the MOVED and ASK
// redirections read from error replies, and the key slot
// (redis_key_slot() in kvbm/remote/remote_store.h). The routing itself
// (which node a batch goes to, the redirect rounds, rediscovery) lives in
// remote_store.cpp beside the workers it feeds.
//
// Thread-safety: the functions share nothing; each call uses its own connection.

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis_connection.h"
#include "redis_url.h"

namespace kvbm::remote {

/// One range of slots and the nodes serving it, as CLUSTER SLOTS lists them.
struct ClusterSlotRange {
  std::uint16_t first = 0, last = 0;  ///< inclusive
  std::string primary{};              ///< "host:port"
  std::vector<std::string> replicas{};
};

/// Asks `node` for CLUSTER SLOTS (AUTH first when it carries credentials),
/// connecting and reading within `deadline`. Returns kOk and the ranges;
/// otherwise kUnavailable, kTimeout, kAccessDenied or kServerError with
/// `error` (never the password).
[[nodiscard]] RemoteStatus query_cluster_slots(const RedisEndpoint& node,
                                               Clock::time_point deadline,
                                               std::vector<ClusterSlotRange>& out,
                                               std::string& error);

/// A MOVED or ASK error reply: "MOVED 3999 127.0.0.1:6381".
struct ClusterRedirect {
  bool ask = false;  ///< ASK: this key only, once, after ASKING; MOVED: the slot moved
  std::uint16_t slot = 0;
  std::string node{};  ///< "host:port"
};

/// Returns the redirect an error reply names, or nullopt for any other error.
[[nodiscard]] std::optional<ClusterRedirect> parse_cluster_redirect(std::string_view error);

/// Returns an endpoint for node "host:port" that carries `like`'s credentials;
/// nullopt when the text is no host:port.
[[nodiscard]] std::optional<RedisEndpoint> cluster_node_endpoint(std::string_view node,
                                                                 const RedisEndpoint& like);

/// Returns true for an error reply that says the cluster's layout is changing
/// or a node cannot serve (CLUSTERDOWN, TRYAGAIN, LOADING, READONLY,
/// MASTERDOWN): the map is worth asking for again.
[[nodiscard]] bool cluster_in_flux(std::string_view error) noexcept;

}  // namespace kvbm::remote
