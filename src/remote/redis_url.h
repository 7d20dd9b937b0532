// src/remote/redis_url.h: the grammar of a remote store URL, in one place.
//
// RemoteStore::create() parses its URLs with parse_redis_url(); the facade's
// config check and kvbm-replay's --remote ask remote_url_error()
// (kvbm/remote/remote_store.h), which runs the same parser. Needs no hiredis:
// compiled whether or not the remote tier is.

#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvbm::remote {

/// Where a server is, parsed from its URL.
struct RedisEndpoint {
  bool unix_socket = false;
  std::string host{};  ///< TCP
  int port = 6379;     ///< TCP
  std::string path{};  ///< Unix socket
  int db = 0;
  std::string user{};      ///< ACL user ("": the default user); AUTH user password
  std::string password{};  ///< never printed: not in display, logs or errors
  bool readonly = false;   ///< cluster replica reads: READONLY after AUTH
  std::string display{};   ///< the URL without its password, for logs
};

/// A Redis Cluster, parsed from redis+cluster://[user:password@]host:port[,host:port...].
struct RedisClusterSeeds {
  std::vector<RedisEndpoint>
      seeds{};  ///< where to ask for the slot map; each carries the credentials
};

/// Returns true when `url` names a cluster (redis+cluster://).
[[nodiscard]] bool is_cluster_url(std::string_view url) noexcept;

/// Parses redis://[[user]:password@]host[:port][/db] or unix:///path[?db=N]
/// (user and password may be percent-encoded). On a bad URL returns nullopt
/// and sets `why` to what is wrong with it and what to write instead, a
/// phrase that follows the URL ("names no host; ...").
[[nodiscard]] std::optional<RedisEndpoint> try_parse_redis_url(std::string_view url,
                                                               std::string& why);

/// Parses redis+cluster://[[user]:password@]host:port[,host:port...] as
/// try_parse_redis_url() does a server URL.
[[nodiscard]] std::optional<RedisClusterSeeds> try_parse_cluster_url(std::string_view url,
                                                                     std::string& why);

/// Parses as try_parse_redis_url(); throws UsageError "remote store URL
/// '<url>' <why>" on a bad URL (its password masked).
[[nodiscard]] RedisEndpoint parse_redis_url(std::string_view url);

/// Parses as try_parse_cluster_url(); throws UsageError as parse_redis_url().
[[nodiscard]] RedisClusterSeeds parse_cluster_url(std::string_view url);

/// Returns the URL with its password, if any, replaced by "****" (both
/// redis:// and redis+cluster://; the user stays).
[[nodiscard]] std::string mask_redis_password(std::string_view url);

/// Where the password comes from when the URL carries none.
struct CredentialSources {
  std::string user{};           ///< ACL user when the URL names none
  std::string password_file{};  ///< a file holding the password (one trailing newline dropped)
  std::string password_env{};   ///< an environment variable holding the password
};

/// Sets the user and password of `e` from `from` where the URL gave none.
/// Returns "" or what is wrong (a password given twice, a missing file or
/// variable), naming the file or variable, never the password.
[[nodiscard]] std::string apply_credentials(RedisEndpoint& e, const CredentialSources& from);

}  // namespace kvbm::remote
