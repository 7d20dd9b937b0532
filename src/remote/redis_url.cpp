// src/remote/redis_url.cpp: the remote store URL grammar (remote/redis_url.h).

#include "redis_url.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "kvbm/error.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm::remote {
namespace {

constexpr std::string_view kRedis = "redis://";
constexpr std::string_view kCluster = "redis+cluster://";
constexpr std::string_view kUnix = "unix://";
constexpr std::string_view kForms =
    "use redis://[:password@]host:port[/db] or unix:///path.sock[?db=N] (with an ACL user: "
    "redis://user:password@host:port; a Redis Cluster: "
    "redis+cluster://[user:password@]host:port[,host:port...])";

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

// Decodes %XX escapes (a user or password holding '@', ':' or '/'); false on a bad one.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= in.size()) return false;
    const auto [p, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || p != in.data() + i + 3) return false;
    out += static_cast<char>(v);
    i += 2;
  }
  return true;
}

// Takes "[userinfo@]" off `rest` (the scheme removed): "user:password",
// ":password" or "password" (the default user), each part percent-decoded.
bool take_userinfo(std::string_view& rest, RedisEndpoint& e, std::string& why) {
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return true;
  const std::string_view userinfo = rest.substr(0, at);
  rest = rest.substr(at + 1);
  const auto colon = userinfo.find(':');
  const std::string_view user =
      colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon);
  const std::string_view password =
      colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1);
  if (!percent_decode(user, e.user) || !percent_decode(password, e.password)) {
    return fail(why,
                "has a bad %-escape in its user or password; write a byte as %XX (two hex "
                "digits), e.g. %40 for '@'");
  }
  return true;
}

// Takes "[userinfo@]" and "[/db]" off `rest` (redis:// removed), setting the
// user, password and database; leaves the host and port.
bool take_password_and_db(std::string_view& rest, RedisEndpoint& e, std::string& why) {
  if (!take_userinfo(rest, e, why)) return false;
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

// The endpoint's URL for logs: no password, the user kept.
std::string display_of(const RedisEndpoint& e) {
  std::string out(kRedis);
  if (!e.user.empty()) out += e.user + "@";
  out += e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host;
  return out + ":" + std::to_string(e.port) + "/" + std::to_string(e.db);
}

// Checks a parsed host and port.
bool check_host_port(const RedisEndpoint& e, std::string& why) {
  if (e.host.empty()) {
    return fail(why, "names no host; use redis://host:port[/db], e.g. redis://127.0.0.1:6379/0");
  }
  if (e.port < 1 || e.port > 65535) {
    return fail(why, "has port " + std::to_string(e.port) +
                         ", out of range; give a number from 1 to 65535, e.g. redis://host:6379");
  }
  return true;
}

// redis://[[user]:password@]host:port[/db], `rest` without the scheme.
bool parse_tcp(std::string_view rest, RedisEndpoint& e, std::string& why) {
  if (!take_password_and_db(rest, e, why) || !take_host_port(rest, e, why)) return false;
  if (!check_host_port(e, why)) return false;
  e.display = display_of(e);
  return true;
}

// redis+cluster://[[user]:password@]host:port[,host:port...][/0], `rest` without the scheme.
bool parse_cluster(std::string_view rest, RedisClusterSeeds& out, std::string& why) {
  RedisEndpoint common;
  if (!take_password_and_db(rest, common, why)) return false;
  if (common.db != 0) {
    return fail(why, "names database " + std::to_string(common.db) +
                         "; a Redis Cluster has database 0 only: leave the /db out");
  }
  while (true) {
    const auto comma = rest.find(',');
    RedisEndpoint e = common;
    if (!take_host_port(rest.substr(0, comma), e, why) || !check_host_port(e, why)) return false;
    e.display = std::string(kCluster) + display_of(e).substr(kRedis.size());
    out.seeds.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return true;
}

// Either URL form; `e` is complete when it returns true.
bool parse_url(std::string_view url, RedisEndpoint& e, std::string& why) {
  if (url.empty()) return fail(why, "is empty; " + std::string(kForms));
  if (url.starts_with(kUnix)) return parse_unix(url, url.substr(kUnix.size()), e, why);
  if (url.starts_with(kCluster)) {
    return fail(why,
                "names a Redis Cluster: give it as the only URL (RemoteStoreOptions::urls = "
                "{\"redis+cluster://host:port,host:port\"})");
  }
  if (!url.starts_with(kRedis)) return fail(why, "is not understood; " + std::string(kForms));
  return parse_tcp(url.substr(kRedis.size()), e, why);
}

}  // namespace

bool is_cluster_url(std::string_view url) noexcept { return url.starts_with(kCluster); }

std::optional<RedisEndpoint> try_parse_redis_url(std::string_view url, std::string& why) {
  RedisEndpoint e;
  if (!parse_url(url, e, why)) return std::nullopt;
  return e;
}

std::optional<RedisClusterSeeds> try_parse_cluster_url(std::string_view url, std::string& why) {
  if (!is_cluster_url(url)) {
    fail(why, "is not a cluster URL; use redis+cluster://[[user]:password@]host:port[,host:port]");
    return std::nullopt;
  }
  RedisClusterSeeds c;
  if (!parse_cluster(url.substr(kCluster.size()), c, why)) return std::nullopt;
  return c;
}

RedisEndpoint parse_redis_url(std::string_view url) {
  std::string why;
  auto e = try_parse_redis_url(url, why);
  KVBM_CHECK(e.has_value(), "remote store URL '", mask_redis_password(url), "' ", why);
  return std::move(*e);
}

RedisClusterSeeds parse_cluster_url(std::string_view url) {
  std::string why;
  auto c = try_parse_cluster_url(url, why);
  KVBM_CHECK(c.has_value(), "remote store URL '", mask_redis_password(url), "' ", why);
  return std::move(*c);
}

std::string mask_redis_password(std::string_view url) {
  // Any scheme: whatever sits between "://" and the last '@' is userinfo, and all of it past
  // its first ':' (all of it when there is none: redis://password@host) is a password.
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const std::string_view rest = url.substr(scheme + 3);
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = rest.substr(0, at);
  const auto colon = userinfo.find(':');
  const std::string_view user =
      colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon + 1);
  return std::string(url.substr(0, scheme + 3)) + std::string(user) + "****" +
         std::string(rest.substr(at));
}

std::string apply_credentials(RedisEndpoint& e, const CredentialSources& from) {
  if (e.user.empty()) e.user = from.user;
  const int sources = static_cast<int>(!e.password.empty()) +
                      static_cast<int>(!from.password_file.empty()) +
                      static_cast<int>(!from.password_env.empty());
  if (sources > 1) {
    return "the password is given in more than one place (the URL, password_file, "
           "password_env): give it in one";
  }
  if (!from.password_env.empty()) {
    const char* v = std::getenv(from.password_env.c_str());
    if (v == nullptr || *v == '\0') {
      return "password_env names the environment variable '" + from.password_env +
             "', which is not set or empty; export it with the password";
    }
    e.password = v;
  }
  if (!from.password_file.empty()) {
    std::ifstream in(from.password_file, std::ios::binary);
    if (!in) {
      return "password_file '" + from.password_file +
             "' cannot be read; give a readable file holding the password";
    }
    std::ostringstream text;
    text << in.rdbuf();
    std::string pw = text.str();
    if (pw.ends_with('\n')) pw.pop_back();
    if (pw.ends_with('\r')) pw.pop_back();
    if (pw.empty()) return "password_file '" + from.password_file + "' is empty";
    e.password = std::move(pw);
  }
  return {};
}

}  // namespace kvbm::remote

namespace kvbm {

std::string remote_url_error(std::string_view url) {
  std::string why;
  if (remote::is_cluster_url(url) ? remote::try_parse_cluster_url(url, why).has_value()
                                  : remote::try_parse_redis_url(url, why).has_value()) {
    return {};
  }
  std::string out = "'";  // appended, not `"'" + ...`: GCC 12 warns (-Wrestrict) on the temporary
  out += remote::mask_redis_password(url);
  out += "' ";
  out += why;
  return out;
}

std::string remote_url_joins_error(std::span<const std::string> given, std::string_view url) {
  if (std::string why = remote_url_error(url); !why.empty()) return why;
  if (!given.empty() && (remote::is_cluster_url(url) || remote::is_cluster_url(given.front()))) {
    return "a redis+cluster:// URL is given once and alone (list more nodes in it, "
           "comma-separated)";
  }
  return {};
}

}  // namespace kvbm
