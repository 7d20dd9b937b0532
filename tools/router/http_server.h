// router/http_server.h: a small HTTP/1.1 server on CivetWeb for kvbm-router.
//
// An HttpServer binds address:port (port 0: any free port; port() says
// which) and hands every request, its headers and body, to one handler
// function on one of `threads` CivetWeb worker threads; the handler's reply
// goes back with its Content-Length (keep-alive connections work). The
// benchmark serves a trivial handler through the same class, so that the
// router's latency is compared with a bare round trip on the same stack.
//
// Errors: a port that cannot be bound throws std::runtime_error naming it.
// A body declared over max_body_bytes is not read, nor the rest of one that
// grows past it (chunked): the handler gets BodyRead::kOverLimit, and the
// connection is closed after the answer. A body that ends before its
// Content-Length or last chunk reaches the handler as BodyRead::kEndedEarly
// (http_request.h). An exception out of the handler is answered 500 with its
// message.
// Thread-safety: the handler runs on many threads at once. Construct and
// destroy on one thread; the destructor returns once no handler runs.

#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "router/http_request.h"

struct mg_context;
struct mg_connection;

namespace kvbm::router_process {

/// Serves one handler over HTTP; see the file comment.
class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  static constexpr std::size_t kMaxBodyBytes = 64u << 20;

  /// Binds and starts serving. Throws std::runtime_error when the address cannot be bound.
  HttpServer(const std::string& address, int port, int threads, Handler handler,
             std::size_t max_body_bytes = kMaxBodyBytes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Returns the port bound.
  [[nodiscard]] int port() const noexcept { return port_; }
  /// Returns "http://address:port".
  [[nodiscard]] std::string url() const;

 private:
  static int on_request(mg_connection* conn, void* self);

  std::string address_;
  int port_ = 0;
  Handler handler_;
  std::size_t max_body_bytes_;
  mg_context* ctx_ = nullptr;
};

}  // namespace kvbm::router_process
