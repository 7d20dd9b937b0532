// fuzz/router_http_fuzz.cpp: kvbm-router's request handling (tools/router/:
// RouterService::handle behind http_request.h's checks), the code HttpServer
// runs for every request, without a socket.
//
// Input: one byte of flags (bit 0: the body ended early, bit 1: it was over
// the server's limit, bit 2: the router keyed by tokens with --max-json-depth
// 10000 instead of by hashes with 32), then a request as text:
// "METHOD PATH\n", header lines "Name: value\n", an empty line, the body.
// Both routers have one live instance, "engine-0", kvbm's own publisher (a
// ZmqEventSink with replay) on 127.0.0.1; --max-body-bytes is 4096.
//
// Invariants, for every request:
//   * handle() throws nothing and never answers 500;
//   * the answer is UTF-8 JSON (/metrics: Prometheus text); an error is
//     {"error": "..."} of at most 2 KiB, however large or deep the body;
//   * a body that ended early, is over the limit, or disagrees with its
//     Content-Length is refused (400 or 413) and routes nothing;
//   * every request routed can be finished, and then no instance holds load:
//     nothing a request does leaves load behind.
// POST /instances endpoints that name a transport are rewritten to that
// publisher's, so that the fuzzer connects nowhere else. (Not inproc://: libzmq
// keeps a socket connected to an inproc endpoint nobody bound, two descriptors
// each, after it is closed, and the fuzzer ran out of them.)

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "fuzz_check.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/router/kv_event_feed.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "router/http_request.h"
#include "router/json_body.h"
#include "router/router_service.h"

namespace {

using kvbm::router_process::BodyRead;
using kvbm::router_process::HttpReply;
using kvbm::router_process::HttpRequest;
using kvbm::router_process::RouterProcessOptions;
using kvbm::router_process::RouterService;
using nlohmann::json;

constexpr std::size_t kMaxBodyBytes = 4096;

/// The one publisher every instance subscribes to, on loopback.
const kvbm::events::ZmqEventSink& publisher() {
  static const auto sink = [] {
    kvbm::events::ZmqEventSinkOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.replay_endpoint = "tcp://127.0.0.1:*";
    o.linger = std::chrono::milliseconds(0);
    return std::make_unique<kvbm::events::ZmqEventSink>(o);
  }();
  return *sink;
}

json engine_0() {
  return {{"name", "engine-0"},
          {"endpoint", publisher().endpoint()},
          {"replay_endpoint", publisher().replay_endpoint()}};
}

RouterService& service(bool tokens) {
  static const auto make = [](bool by_tokens) {
    RouterProcessOptions o;
    o.instances.push_back({"engine-0", publisher().endpoint(), "", publisher().replay_endpoint()});
    o.max_body_bytes = kMaxBodyBytes;
    o.max_json_depth = by_tokens ? 10000 : 32;
    o.key = by_tokens ? kvbm::router::BlockKey::kTokens : kvbm::router::BlockKey::kEngineHash;
    o.replay_timeout = std::chrono::milliseconds(10);
    return std::make_unique<RouterService>(o);
  };
  static const std::unique_ptr<RouterService> by_hash = make(false);
  static const std::unique_ptr<RouterService> by_tokens = make(true);
  return tokens ? *by_tokens : *by_hash;
}

std::string_view next_line(std::string_view& text) {
  const auto nl = text.find('\n');
  std::string_view line = text.substr(0, nl);
  text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

HttpRequest request_of(std::uint8_t flags, std::string_view text) {
  HttpRequest r;
  const std::string_view start = next_line(text);
  const auto space = start.find(' ');
  r.method = std::string(start.substr(0, space));
  r.path = space == std::string_view::npos ? "/" : std::string(start.substr(space + 1));
  for (std::string_view line = next_line(text); !line.empty(); line = next_line(text)) {
    const auto colon = line.find(':');
    r.headers.emplace_back(
        std::string(line.substr(0, colon)),
        colon == std::string_view::npos ? "" : std::string(line.substr(colon + 1)));
  }
  r.body = std::string(text);
  r.body_read = (flags & 2) != 0   ? BodyRead::kOverLimit
                : (flags & 1) != 0 ? BodyRead::kEndedEarly
                                   : BodyRead::kWhole;
  return r;
}

// Points a POST /instances body's endpoints at inproc:// (see the file comment).
// The body is rewritten only when it parses within the depth limit (so its dump cannot recurse
// deep), and its Content-Length, when it had the body's length, follows.
void keep_local(HttpRequest& r) {
  if (r.method != "POST" || r.path != "/instances") return;
  if (!kvbm::router_process::json_text_error(r.body, 32).empty()) return;
  json j = json::parse(r.body, nullptr, false);
  if (!j.is_object()) return;
  bool changed = false;
  for (const char* key : {"endpoint", "replay_endpoint"}) {
    const auto it = j.find(key);
    const std::string local =
        key[0] == 'e' ? publisher().endpoint() : publisher().replay_endpoint();
    if (it != j.end() && it->is_string() &&
        it->get_ref<const std::string&>().find("://") != std::string::npos && *it != local) {
      *it = local;
      changed = true;
    }
  }
  if (!changed) return;
  const std::string old_size = std::to_string(r.body.size());
  r.body = j.dump();
  for (auto& [name, value] : r.headers) {
    if (value == old_size || value == " " + old_size) value = std::to_string(r.body.size());
  }
}

HttpReply handle(RouterService& s, const HttpRequest& r) {
  try {
    return s.handle(r);
  } catch (const std::exception& e) {
    KVBM_FUZZ_CHECK(false, e.what());  // "RouterService::handle threw"
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "RouterService::handle threw");
  }
  return {};
}

HttpRequest post(const char* path, std::string body) {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.body = std::move(body);
  return r;
}

void check_reply(const HttpRequest& r, const HttpReply& reply) {
  KVBM_FUZZ_CHECK(reply.status != 500, reply.body.c_str());
  const bool metrics = r.path == "/metrics" && reply.status == 200;
  if (metrics) return;
  const json j = json::parse(reply.body, nullptr, false);  // throws nothing; refuses bad UTF-8
  KVBM_FUZZ_CHECK(!j.is_discarded(), "an answer is not UTF-8 JSON");
  if (reply.status >= 400) {
    KVBM_FUZZ_CHECK(j.is_object() && j.contains("error") && j["error"].is_string(),
                    "an error is not {\"error\": \"...\"}");
    KVBM_FUZZ_CHECK(reply.body.size() <= 2048, reply.body.substr(0, 300).c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  RouterService& s = service((flags & 4) != 0);
  HttpRequest r = request_of(flags, {reinterpret_cast<const char*>(data) + 1, size - 1});
  keep_local(r);
  const std::uint64_t decisions = s.router().stats().decisions;
  const HttpReply reply = handle(s, r);
  check_reply(r, reply);

  bool broken = r.body_read != BodyRead::kWhole;
  try {
    const auto n = kvbm::router_process::declared_length(r);
    broken = broken || r.body.size() > kMaxBodyBytes || (n && *n != r.body.size());
  } catch (const kvbm::router_process::ClientError&) {
    broken = true;
  }
  if (broken) {
    KVBM_FUZZ_CHECK(reply.status == 400 || reply.status == 413, "a broken body was not refused");
    KVBM_FUZZ_CHECK(s.router().stats().decisions == decisions, "a broken body was routed");
  }
  // Undo what the request did: finish what it routed, remove what it added.
  if (r.path == "/route" && reply.status == 200) {
    const json d = json::parse(reply.body);
    const HttpReply fin =
        handle(s, post("/finish", json{{"request_id", d["request_id"]}}.dump(
                                      -1, ' ', false, json::error_handler_t::replace)));
    KVBM_FUZZ_CHECK(fin.status == 200, fin.body.c_str());
  }
  if (r.path == "/instances" && reply.status == 201) {
    HttpRequest del;
    del.method = "DELETE";
    del.path = "/instances/" + json::parse(reply.body)["name"].get<std::string>();
    const HttpReply gone = handle(s, del);
    KVBM_FUZZ_CHECK(gone.status == 200, gone.body.c_str());
  }
  if (!s.instance_id("engine-0")) {  // the input removed it
    const HttpReply back = handle(s, post("/instances", engine_0().dump()));
    KVBM_FUZZ_CHECK(back.status == 201, back.body.c_str());
  }
  for (const std::uint64_t load : s.router().stats().load) {
    KVBM_FUZZ_CHECK(load == 0, "load left behind after every routed request was finished");
  }
  return 0;
}
