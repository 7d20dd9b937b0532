// src/remote/redis_url.cpp: the remote store URL grammar (remote/redis_url.h).

#include "redis_url.h"

#include <charconv>
#include <system_error>
#include <utility>

#include "kvbm/error.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm::remote {
namespace {

constexpr std::string_view kRedis = "redis://";
constexpr std::string_view kUnix = "unix://";
constexpr std::string_view kForms =
    "use redis://[:password@]host:port[/db] or unix:///path.sock[?db=N]";

// A decimal number of 0 or more, all of `s`.
std::optional<int> parse_count(std::string_view s) {
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// Sets `why` and returns false: the helpers below report a bad URL this way.
bool fail(std::string& why, std::string text) {
  why = std::move(text);
  return false;
}

bool bad_db(std::string& why, std::string_view s) {
  return fail(why, "has a bad database number '" + std::string(s) +
                       "'; give 0 or more, e.g. redis://host:6379/0 or unix:///path.sock?db=0");
}

bool bad_port(std::string& why, std::string_view s) {
  return fail(why, "has a bad port '" + std::string(s) +
                       "'; give a number from 1 to 65535, e.g. redis://host:6379");
}

// unix:///path.sock[?db=N], `rest` without the scheme.
bool parse_unix(std::string_view url, std::string_view rest, RedisEndpoint& e, std::string& why) {
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    if (!query.starts_with("db=")) {
      return fail(why,
                  "has a query other than ?db=N after its socket path; use "
                  "unix:///path.sock?db=N");
    }
    const auto db = parse_count(query.substr(3));
    if (!db) return bad_db(why, query.substr(3));
    e.db = *db;
  }
  if (!rest.starts_with('/')) {
    return fail(why, "needs an absolute socket path; use unix:///path/to/redis.sock");
  }
  e.unix_socket = true;
  e.path = std::string(rest);
  e.display = std::string(url);
  return true;
}

// Takes "[userinfo@]" and "[/db]" off `rest` (redis:// removed), setting the
// password and the database; leaves the host and port.
bool take_password_and_db(std::string_view& rest, RedisEndpoint& e, std::string& why) {
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    e.password =
        std::string(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
  }
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      const auto n = parse_count(db);
      if (!n) return bad_db(why, db);
      e.db = *n;
    }
  }
  return true;
}

// host, host:port, [ipv6] or [ipv6]:port: sets the host and, when given, the port.
bool take_host_port(std::string_view hostport, RedisEndpoint& e, std::string& why) {
  std::optional<std::string_view> port;
  if (hostport.starts_with('[')) {  // [ipv6]:port
    auto close = hostport.find(']');
    if (close == std::string_view::npos) {
      return fail(why,
                  "has an unclosed '[' in its host; write an IPv6 address as "
                  "redis://[::1]:6379");
    }
    e.host = std::string(hostport.substr(1, close - 1));
    hostport = hostport.substr(close + 1);
    if (hostport.starts_with(':')) port = hostport.substr(1);
  } else if (auto colon = hostport.rfind(':'); colon != std::string_view::npos) {
    e.host = std::string(hostport.substr(0, colon));
    port = hostport.substr(colon + 1);
  } else {
    e.host = std::string(hostport);
  }
  if (port) {
    const auto n = parse_count(*port);
    if (!n) return bad_port(why, *port);
    e.port = *n;
  }
  return true;
}

// redis://[:password@]host:port[/db], `rest` without the scheme.
bool parse_tcp(std::string_view rest, RedisEndpoint& e, std::string& why) {
  if (!take_password_and_db(rest, e, why) || !take_host_port(rest, e, why)) return false;
  if (e.host.empty()) {
    return fail(why, "names no host; use redis://host:port[/db], e.g. redis://127.0.0.1:6379/0");
  }
  if (e.port < 1 || e.port > 65535) {
    return fail(why, "has port " + std::to_string(e.port) +
                         ", out of range; give a number from 1 to 65535, e.g. redis://host:6379");
  }
  e.display = "redis://" +
              std::string(e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) +
              ":" + std::to_string(e.port) + "/" + std::to_string(e.db);
  return true;
}

// Either URL form; `e` is complete when it returns true.
bool parse_url(std::string_view url, RedisEndpoint& e, std::string& why) {
  if (url.empty()) return fail(why, "is empty; " + std::string(kForms));
  if (url.starts_with(kUnix)) return parse_unix(url, url.substr(kUnix.size()), e, why);
  if (!url.starts_with(kRedis)) return fail(why, "is not understood; " + std::string(kForms));
  return parse_tcp(url.substr(kRedis.size()), e, why);
}

}  // namespace

std::optional<RedisEndpoint> try_parse_redis_url(std::string_view url, std::string& why) {
  RedisEndpoint e;
  if (!parse_url(url, e, why)) return std::nullopt;
  return e;
}

RedisEndpoint parse_redis_url(std::string_view url) {
  std::string why;
  auto e = try_parse_redis_url(url, why);
  KVBM_CHECK(e.has_value(), "remote store URL '", mask_redis_password(url), "' ", why);
  return std::move(*e);
}

std::string mask_redis_password(std::string_view url) {
  if (!url.starts_with(kRedis)) return std::string(url);
  const std::string_view rest = url.substr(kRedis.size());
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = rest.substr(0, at);
  const auto colon = userinfo.find(':');
  const std::string_view user =
      colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon + 1);
  return std::string(kRedis) + std::string(user) + "****" + std::string(rest.substr(at));
}

}  // namespace kvbm::remote

namespace kvbm {

std::string remote_url_error(std::string_view url) {
  std::string why;
  if (remote::try_parse_redis_url(url, why)) return {};
  std::string out = "'";  // appended, not `"'" + ...`: GCC 12 warns (-Wrestrict) on the temporary
  out += remote::mask_redis_password(url);
  out += "' ";
  out += why;
  return out;
}

}  // namespace kvbm
