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

}  // namespace

std::optional<RedisEndpoint> try_parse_redis_url(std::string_view url, std::string& why) {
  auto fail = [&why](std::string text) -> std::optional<RedisEndpoint> {
    why = std::move(text);
    return std::nullopt;
  };
  auto bad_db = [&fail](std::string_view s) {
    return fail("has a bad database number '" + std::string(s) +
                "'; give 0 or more, e.g. redis://host:6379/0 or unix:///path.sock?db=0");
  };
  auto bad_port = [&fail](std::string_view s) {
    return fail("has a bad port '" + std::string(s) +
                "'; give a number from 1 to 65535, e.g. redis://host:6379");
  };
  RedisEndpoint e;
  if (url.empty()) return fail("is empty; " + std::string(kForms));
  if (url.starts_with(kUnix)) {
    std::string_view rest = url.substr(kUnix.size());
    if (auto q = rest.find('?'); q != std::string_view::npos) {
      std::string_view query = rest.substr(q + 1);
      rest = rest.substr(0, q);
      if (!query.starts_with("db=")) {
        return fail(
            "has a query other than ?db=N after its socket path; use "
            "unix:///path.sock?db=N");
      }
      const auto db = parse_count(query.substr(3));
      if (!db) return bad_db(query.substr(3));
      e.db = *db;
    }
    if (!rest.starts_with('/')) {
      return fail("needs an absolute socket path; use unix:///path/to/redis.sock");
    }
    e.unix_socket = true;
    e.path = std::string(rest);
    e.display = std::string(url);
    return e;
  }
  if (!url.starts_with(kRedis)) return fail("is not understood; " + std::string(kForms));
  std::string_view rest = url.substr(kRedis.size());
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    e.password =
        std::string(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
  }
  std::string_view hostport = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      const auto n = parse_count(db);
      if (!n) return bad_db(db);
      e.db = *n;
    }
  }
  std::optional<std::string_view> port;
  if (hostport.starts_with('[')) {  // [ipv6]:port
    auto close = hostport.find(']');
    if (close == std::string_view::npos) {
      return fail(
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
    if (!n) return bad_port(*port);
    e.port = *n;
  }
  if (e.host.empty()) {
    return fail("names no host; use redis://host:port[/db], e.g. redis://127.0.0.1:6379/0");
  }
  if (e.port < 1 || e.port > 65535) {
    return fail("has port " + std::to_string(e.port) +
                ", out of range; give a number from 1 to 65535, e.g. redis://host:6379");
  }
  e.display = "redis://" +
              std::string(e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) +
              ":" + std::to_string(e.port) + "/" + std::to_string(e.db);
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
