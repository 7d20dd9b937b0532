#include "router/http_server.h"

#include <civetweb.h>

#include <array>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvbm::router_process {
namespace {

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

void send(mg_connection* conn, const HttpReply& r, bool close) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\n%s\r\n",
            r.status, reason(r.status), r.content_type.c_str(), r.body.size(),
            close ? "Connection: close\r\n" : "");
  if (!r.body.empty()) mg_write(conn, r.body.data(), r.body.size());
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7f) ? ' ' : c;  // the reply stays ASCII, hence UTF-8
  }
  return out + "\"";
}

// Reads the body: whole, up to `limit` + 1 bytes (then kOverLimit), or until
// the connection ends or a chunk breaks (kEndedEarly). CivetWeb's mg_read()
// returns 0 both at the end of a body with a Content-Length and when the
// client closed before it, so a short body is told by its length.
BodyRead read_body(mg_connection* conn, long long declared, std::size_t limit, std::string& body) {
  if (declared > 0 && static_cast<unsigned long long>(declared) > limit)
    return BodyRead::kOverLimit;
  std::array<char, 16384> buf{};
  for (;;) {
    const int n = mg_read(conn, buf.data(), buf.size());
    if (n < 0) return BodyRead::kEndedEarly;  // a broken chunked body
    if (n == 0) {
      const bool short_body = declared >= 0 && body.size() < static_cast<std::size_t>(declared);
      return short_body ? BodyRead::kEndedEarly : BodyRead::kWhole;
    }
    if (body.size() + static_cast<std::size_t>(n) > limit) return BodyRead::kOverLimit;
    body.append(buf.data(), static_cast<std::size_t>(n));
  }
}

}  // namespace

HttpServer::HttpServer(const std::string& address, int port, int threads, Handler handler,
                       std::size_t max_body_bytes)
    : address_(address), handler_(std::move(handler)), max_body_bytes_(max_body_bytes) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  const bool v6 = address.find(':') != std::string::npos;
  const std::string bind = (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
  const std::string nthreads = std::to_string(threads);
  std::vector<const char*> options = {
      "listening_ports",    bind.c_str(), "num_threads", nthreads.c_str(),
      "enable_keep_alive",  "yes",        "tcp_nodelay", "1",
      "request_timeout_ms", "30000",      nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };  // errors: below
  std::array<char, 256> error{};
  unsigned code = 0;
  mg_error_data err{&code, error.data(), error.size()};
  mg_init_data init_data{&callbacks, this, options.data()};
  ctx_ = mg_start2(&init_data, &err);
  if (ctx_ == nullptr) {
    throw std::runtime_error("cannot serve HTTP on " + bind + ": " + std::string(error.data()));
  }
  mg_set_request_handler(ctx_, "/", &HttpServer::on_request, this);
  std::array<mg_server_port, 4> ports{};
  const int n = mg_get_server_ports(ctx_, static_cast<int>(ports.size()), ports.data());
  port_ = n > 0 ? ports[0].port : port;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

std::string HttpServer::url() const {
  const bool v6 = address_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + address_ + "]" : address_) + ":" + std::to_string(port_);
}

int HttpServer::on_request(mg_connection* conn, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  const mg_request_info* info = mg_get_request_info(conn);
  HttpRequest req;
  req.method = info->request_method != nullptr ? info->request_method : "";
  req.path = info->local_uri != nullptr ? info->local_uri : "";
  for (int i = 0; i < info->num_headers; ++i) {
    const mg_header& h = info->http_headers[i];
    req.headers.emplace_back(h.name != nullptr ? h.name : "", h.value != nullptr ? h.value : "");
  }
  req.body_read = read_body(conn, info->content_length, server->max_body_bytes_, req.body);
  HttpReply reply;
  try {
    reply = server->handler_(req);
  } catch (const std::exception& e) {
    reply.status = 500;
    reply.content_type = "application/json";
    reply.body = std::string(R"({"error": )") + quoted(e.what()) + "}";
  }
  // A body not read to its end leaves the connection unusable: CivetWeb closes it.
  send(conn, reply, req.body_read != BodyRead::kWhole);
  return reply.status;
}

}  // namespace kvbm::router_process
