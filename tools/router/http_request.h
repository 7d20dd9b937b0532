// router/http_request.h: one HTTP request as kvbm-router's handler sees it,
// its answer, and the checks every request passes before its body is used.
//
// HttpServer fills an HttpRequest from the wire (method, path, headers, the
// body it read and how reading it went); the fuzz target fuzz/router_http_fuzz.cpp
// builds one from bytes. Both hand it to the same handler (RouterService::handle),
// which first calls check_body(): a body over the limit is 413, one that ended
// before its Content-Length (the client went away), a broken chunked body, a
// Content-Length that is not one byte count, or one sent with Transfer-Encoding,
// is 400. Nothing is routed for a refused request.
//
// quote() is how an answer names a value the client sent: at most
// kExcerptBytes of it, printable ASCII, so that no answer repeats a whole body.

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvbm::router_process {

/// How the server read a request's body.
enum class BodyRead {
  kWhole,       ///< all of it (as long as Content-Length says, or to the last chunk)
  kEndedEarly,  ///< the connection ended, or a chunk broke, before the body did
  kOverLimit,   ///< it is over the server's limit; the rest was not read
};

/// One request as the handler sees it.
struct HttpRequest {
  std::string method;  ///< "GET", "POST", "DELETE", ...
  std::string path;    ///< the decoded path, without the query string
  std::string body;    ///< the bytes read (see body_read)
  /// The request's headers as sent (names in any case, repeats kept).
  std::vector<std::pair<std::string, std::string>> headers;
  BodyRead body_read = BodyRead::kWhole;
};

/// The handler's answer.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

/// A request the client must change: answered with `status` and {"error": message}.
struct ClientError {
  int status;
  std::string message;
};

/// The longest part of a client's value an answer quotes.
inline constexpr std::size_t kExcerptBytes = 64;

/// Returns the Content-Length the request declares (nullopt without one).
/// Throws ClientError (400) when it is not one decimal byte count (repeats
/// must agree) or comes with a Transfer-Encoding.
[[nodiscard]] std::optional<std::uint64_t> declared_length(const HttpRequest& request);

/// Throws ClientError when the body cannot be used: 413 over `max_body_bytes`,
/// 400 when it is shorter or longer than declared, ended early, or the headers
/// are ambiguous (declared_length()).
void check_body(const HttpRequest& request, std::size_t max_body_bytes);

/// Returns `text` quoted for an error message: at most kExcerptBytes of it,
/// bytes outside printable ASCII as \xNN, and "... (N bytes)" when cut.
[[nodiscard]] std::string quote(std::string_view text);

}  // namespace kvbm::router_process
