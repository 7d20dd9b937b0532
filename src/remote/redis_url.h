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

namespace kvbm::remote {

/// Where a server is, parsed from its URL.
struct RedisEndpoint {
  bool unix_socket = false;
  std::string host{};  ///< TCP
  int port = 6379;     ///< TCP
  std::string path{};  ///< Unix socket
  int db = 0;
  std::string password{};
  std::string display{};  ///< the URL without its password, for logs
};

/// Parses redis://[:password@]host[:port][/db] or unix:///path[?db=N]. On a
/// bad URL returns nullopt and sets `why` to what is wrong with it and what
/// to write instead, a phrase that follows the URL ("names no host; ...").
[[nodiscard]] std::optional<RedisEndpoint> try_parse_redis_url(std::string_view url,
                                                               std::string& why);

/// Parses as try_parse_redis_url(); throws UsageError "remote store URL
/// '<url>' <why>" on a bad URL (its password masked).
[[nodiscard]] RedisEndpoint parse_redis_url(std::string_view url);

/// Returns the URL with its password, if any, replaced by "****".
[[nodiscard]] std::string mask_redis_password(std::string_view url);

}  // namespace kvbm::remote
