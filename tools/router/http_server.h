// router/http_server.h: a small HTTP/1.1 server on CivetWeb for kvbm-router.
//
// An HttpServer binds address:port (port 0: any free port; port() says
// which) and hands every request, its body read whole, to one handler
// function on one of `threads` CivetWeb worker threads; the handler's reply
// goes back with its Content-Length (keep-alive connections work). The
// benchmark serves a trivial handler through the same class, so that the
// router's latency is compared with a bare round trip on the same stack.
//
// Errors: a port that cannot be bound throws std::runtime_error naming it.
// A body over kMaxBodyBytes is answered 413 without calling the handler; an
// exception out of the handler is answered 500 with its message.
// Thread-safety: the handler runs on many threads at once. Construct and
// destroy on one thread; the destructor returns once no handler runs.

#pragma once

#include <cstddef>
#include <functional>
#include <string>

struct mg_context;
struct mg_connection;

namespace kvbm::router_process {

/// One request as the handler sees it.
struct HttpRequest {
  std::string method;  ///< "GET", "POST", "DELETE", ...
  std::string path;    ///< the decoded path, without the query string
  std::string body;
};

/// The handler's answer.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

/// Serves one handler over HTTP; see the file comment.
class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  static constexpr std::size_t kMaxBodyBytes = 64u << 20;

  /// Binds and starts serving. Throws std::runtime_error when the address cannot be bound.
  HttpServer(const std::string& address, int port, int threads, Handler handler);
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
  mg_context* ctx_ = nullptr;
};

}  // namespace kvbm::router_process
