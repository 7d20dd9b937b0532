// src/remote/redis_cluster.cpp: CLUSTER SLOTS and redirects (remote/redis_cluster.h).

#include "redis_cluster.h"

#include <sys/time.h>

#include <charconv>
#include <hiredis/hiredis.h>
#include <memory>

namespace kvbm::remote {
namespace {

struct FreeContext {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct FreeReply {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Context = std::unique_ptr<redisContext, FreeContext>;
using Reply = std::unique_ptr<redisReply, FreeReply>;

timeval time_left(Clock::time_point deadline) {
  const auto us = std::max<long long>(
      1000, std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count());
  return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

Reply command(redisContext* c, std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return Reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

std::string text_of(const redisReply* r) {
  return r != nullptr && r->str != nullptr ? std::string(r->str, r->len) : std::string();
}

// "host:port" of a node entry [ip, port, id, ...]; "" when unusable (an unknown address).
std::string node_of(const redisReply* n) {
  if (n == nullptr || n->type != REDIS_REPLY_ARRAY || n->elements < 2) return {};
  const redisReply* ip = n->element[0];
  const redisReply* port = n->element[1];
  if (ip->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_INTEGER) return {};
  std::string host = text_of(ip);
  if (host.empty() || host == "?") return {};
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port->integer);
}

bool parse_slots(const redisReply* r, std::vector<ClusterSlotRange>& out) {
  if (r->type != REDIS_REPLY_ARRAY) return false;
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER) {
      return false;
    }
    ClusterSlotRange range;
    range.first = static_cast<std::uint16_t>(e->element[0]->integer);
    range.last = static_cast<std::uint16_t>(e->element[1]->integer);
    range.primary = node_of(e->element[2]);
    for (std::size_t k = 3; k < e->elements; ++k) {
      if (auto n = node_of(e->element[k]); !n.empty()) range.replicas.push_back(std::move(n));
    }
    if (!range.primary.empty()) out.push_back(std::move(range));
  }
  return true;
}

}  // namespace

RemoteStatus query_cluster_slots(const RedisEndpoint& node, Clock::time_point deadline,
                                 std::vector<ClusterSlotRange>& out, std::string& error) {
  out.clear();
  Context c(redisConnectWithTimeout(node.host.c_str(), node.port, time_left(deadline)));
  if (!c || c->err != 0) {
    error = c ? c->errstr : "cannot allocate a connection";
    return RemoteStatus::kUnavailable;
  }
  (void)redisSetTimeout(c.get(), time_left(deadline));
  auto io_failure = [&] {
    error = c->errstr;
    return c->err == REDIS_ERR_IO && Clock::now() >= deadline ? RemoteStatus::kTimeout
                                                              : RemoteStatus::kUnavailable;
  };
  if (!node.user.empty() || !node.password.empty()) {
    Reply a = node.user.empty() ? command(c.get(), {"AUTH", node.password})
                                : command(c.get(), {"AUTH", node.user, node.password});
    if (!a) return io_failure();
    if (a->type == REDIS_REPLY_ERROR) {
      error = "AUTH refused: " + text_of(a.get());
      return RemoteStatus::kAccessDenied;
    }
  }
  Reply r = command(c.get(), {"CLUSTER", "SLOTS"});
  if (!r) return io_failure();
  if (r->type == REDIS_REPLY_ERROR) {
    error = "CLUSTER SLOTS: " + text_of(r.get());
    return error.find("NOPERM") != std::string::npos || error.find("NOAUTH") != std::string::npos
               ? RemoteStatus::kAccessDenied
               : RemoteStatus::kServerError;
  }
  if (!parse_slots(r.get(), out)) {
    error = "CLUSTER SLOTS: a reply of an unexpected shape";
    return RemoteStatus::kServerError;
  }
  return RemoteStatus::kOk;
}

std::optional<ClusterRedirect> parse_cluster_redirect(std::string_view error) {
  ClusterRedirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const auto [p, ec] = std::from_chars(error.data(), error.data() + space, slot);
  if (ec != std::errc() || p != error.data() + space || slot >= 16384) return std::nullopt;
  r.slot = static_cast<std::uint16_t>(slot);
  r.node = std::string(error.substr(space + 1));
  if (r.node.empty()) return std::nullopt;
  return r;
}

std::optional<RedisEndpoint> cluster_node_endpoint(std::string_view node,
                                                   const RedisEndpoint& like) {
  const auto colon = node.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = node.substr(0, colon);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  int port = 0;
  const std::string_view p = node.substr(colon + 1);
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (host.empty() || ec != std::errc() || end != p.data() + p.size() || port < 1 || port > 65535)
    return std::nullopt;
  RedisEndpoint e = like;
  e.unix_socket = false;
  e.host = std::string(host);
  e.port = port;
  e.db = 0;
  e.display =
      "redis+cluster://" + (e.user.empty() ? std::string() : e.user + "@") + std::string(node);
  return e;
}

bool cluster_in_flux(std::string_view e) noexcept {
  for (std::string_view p : {"CLUSTERDOWN", "TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN"}) {
    if (e.starts_with(p)) return true;
  }
  return false;
}

}  // namespace kvbm::remote
