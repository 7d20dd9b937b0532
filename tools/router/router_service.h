// router/router_service.h: what kvbm-router answers, independent of the HTTP server.
//
// A RouterService owns the cluster's KvIndexer, the KvEventFeed that keeps it
// (one ZeroMQ subscription per engine instance, kvbm's or vLLM's publisher),
// a KvRouter, the routed requests not yet finished (by request id) and one
// Prometheus registry, and with --remote the G4 check /health reports
// (g4_health.h). handle() answers one HTTP request; HttpServer calls it
// on its worker threads. docs/router.md ("The router process") lists the
// endpoints, their JSON and their errors: 400 for a body that is not the
// JSON asked for (the message names the field and what it wants, quoting at
// most 64 bytes of a bad value), not UTF-8, nested over --max-json-depth, or
// cut short of its Content-Length (http_request.h, json_body.h), 413 for one
// over --max-body-bytes; nothing is routed for a refused request; 404 for an
// unknown request id, instance or endpoint, 405 for a wrong method, 409 for a
// duplicate instance name or request id, 503 when no instance is live.
//
// Thread-safety: handle() may be called from any number of threads at once.
// The indexer, feed and router are thread-safe; the instance table and the
// requests in flight have a mutex each, never held across a call into the
// feed's subscriber thread's locks except while adding or removing an
// instance (which serialises instance changes).

#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "router/http_server.h"
#include "router/options.h"

namespace kvbm::router {
class KvEventFeed;
class KvIndexer;
class KvRouter;
}  // namespace kvbm::router

namespace kvbm::router_process {

/// The router process's state and its HTTP/JSON answers; see the file comment.
class RouterService {
 public:
  /// Builds the index, feed and router and subscribes to options.instances.
  /// Throws std::invalid_argument for an instance the feed refuses (a
  /// malformed endpoint, a duplicate name), UsageError for a bad router option.
  explicit RouterService(const RouterProcessOptions& options);
  ~RouterService();
  RouterService(const RouterService&) = delete;
  RouterService& operator=(const RouterService&) = delete;

  /// Answers one request.
  [[nodiscard]] HttpReply handle(const HttpRequest& request);

  /// The parts, for tests and the benchmark (wait_applied on the feed, say).
  [[nodiscard]] router::KvEventFeed& feed() noexcept;
  [[nodiscard]] router::KvIndexer& index() noexcept;
  [[nodiscard]] router::KvRouter& router() noexcept;
  /// Returns the index's id of the live instance named `name`.
  [[nodiscard]] std::optional<std::uint32_t> instance_id(std::string_view name) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbm::router_process
