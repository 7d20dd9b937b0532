// tests/router_process/hostile_requests_test.cpp: the kvbm-router program
// survives any request. Run as a child process and sent, over loopback, what
// a broken or hostile client sends: JSON nested thousands deep in each field
// the router checks (it answers 400 naming the value's type with a short
// excerpt, and keeps answering), bodies that are not UTF-8 (400), a body
// shorter than its Content-Length from a client that then goes away (refused:
// nothing routed, no load left), a body over --max-body-bytes (413), a
// number beyond a double (400).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/config.h"
#include "router_child.h"
#include "router_process_test_util.h"
#include "skip_or_fail.h"
#include "zmq_tsan.h"  // libzmq is not instrumented for TSan

namespace kvbm::router_process {
namespace hostile_requests_test {

using nlohmann::json;
using test::Child;
using test::HttpClient;
using test::HttpResponse;

#if KVBM_HAVE_ZMQ

/// JSON arrays, or objects ({"a": {"a": ...}}), nested `depth` deep.
std::string nested(std::size_t depth, bool objects = false) {
  std::string s;
  s.reserve(depth * 6);
  for (std::size_t i = 0; i < depth; ++i) s += objects ? R"({"a": )" : "[";
  s += objects ? "1" : "";
  s.append(depth, objects ? '}' : ']');
  return s;
}

/// `data` as one chunk of a chunked body.
std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

/// The port of a URL "http://host:port".
std::uint16_t port_of(const std::string& url) {
  return static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

/// Sends `bytes` on one connection to 127.0.0.1:port, then shuts
/// down its sending side (the client has nothing more) and returns whatever
/// the server answers before closing.
std::string send_raw(std::uint16_t port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    shutdown(fd, SHUT_WR);
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, std::size_t(n));
  }
  close(fd);
  return answer;
}

/// A kvbm-router child with one live instance (a real kvbm publisher).
struct RouterProcess {
  explicit RouterProcess(std::vector<std::string> extra = {}) : publisher("engine-0") {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--instance", publisher.spec()};
    args.insert(args.end(), extra.begin(), extra.end());
    child = std::make_unique<Child>(args);
    url = test::listening_url(*child);
  }
  /// Returns true when the process runs, answers /health, holds no request
  /// and no load, and routed `decisions` requests in all.
  ::testing::AssertionResult idle(std::uint64_t decisions = 0) {
    if (!child->alive()) return ::testing::AssertionFailure() << "ended " << child->ended();
    const HttpResponse h = http.get(url + "/health");
    if (h.status != 200) {
      test::poll_until([&] { return !child->alive(); });  // how it ended, if it did
      return ::testing::AssertionFailure()
             << "/health: " << h.status << " " << h.error << "; exit status " << child->ended()
             << " (1000 + N: killed by signal N, -1: still running)";
    }
    const json j = json::parse(h.body);
    if (j["in_flight"] != 0 || j["decisions"] != decisions || j["instances"][0]["load"] != 0) {
      return ::testing::AssertionFailure() << h.body;
    }
    return ::testing::AssertionSuccess();
  }
  test::KvbmPublisher publisher;
  std::unique_ptr<Child> child;
  std::string url;
  HttpClient http;
};

/// Expects `res` to be `status` with an error message holding `says`, of at most 1 KiB.
void expect_refused(const HttpResponse& res, long status, const std::string& says,
                    const std::string& what) {
  EXPECT_EQ(res.error, "") << what;
  EXPECT_EQ(res.status, status) << what << ": " << res.body.substr(0, 300);
  json j;
  ASSERT_NO_THROW(j = json::parse(res.body)) << what << ": " << res.body.substr(0, 300);
  const std::string message = j.value("error", "");
  EXPECT_NE(message.find(says), std::string::npos) << what << ": " << message.substr(0, 300);
  EXPECT_LE(res.body.size(), 1024u) << what;
}

// Each field the router checks, with a value of `deep` in it.
std::vector<std::pair<std::string, std::string>> deep_fields(const std::string& deep) {
  return {{"/route", R"({"hashes": )" + deep + R"(, "tokens": 16})"},
          {"/route", R"({"hashes": [1, )" + deep + R"(], "tokens": 16})"},
          {"/route", R"({"hashes": [1], "tokens": )" + deep + "}"},
          {"/route", R"({"hashes": [1], "tokens": 16, "request_id": )" + deep + "}"},
          {"/finish", R"({"request_id": )" + deep + "}"},
          {"/instances", R"({"name": )" + deep + R"(, "endpoint": "tcp://127.0.0.1:1"})"},
          {"/instances", R"({"name": "x", "endpoint": )" + deep + "}"},
          {"/route", deep}};
}

TEST(RouterProcessHostile, DeepNestingInAnyCheckedFieldIs400AndTheProcessLives) {
  RouterProcess r;
  ASSERT_NE(r.url, "");
  for (const std::size_t depth : {700, 100'000}) {
    for (const std::string& deep : {nested(depth), nested(depth, true)}) {
      for (const auto& [path, body] : deep_fields(deep)) {
        const std::string what =
            path + " " + body.substr(0, 40) + " depth " + std::to_string(depth);
        expect_refused(r.http.post(r.url + path, body), 400, "over 32 deep", what);
        ASSERT_TRUE(r.idle()) << what;
      }
    }
  }
}

TEST(RouterProcessHostile, ADeepValueUnderTheDepthLimitIsNamedByTypeAndExcerpt) {
  // With the limit raised, a deep value reaches the field checks: the
  // message names its type and quotes its first 64 bytes, never the whole.
  RouterProcess r({"--max-json-depth", "10000"});
  ASSERT_NE(r.url, "");
  for (const auto& [path, body] : deep_fields(nested(9000))) {
    const std::string what = path + " " + body.substr(0, 40);
    const HttpResponse res = r.http.post(r.url + path, body);
    if (body.front() == '[') {
      expect_refused(res, 400, "must be a JSON object, not [[[[", what);
    } else {
      expect_refused(res, 400, std::string(64, '[') + "... (array)", what);
    }
    ASSERT_TRUE(r.idle()) << what;
  }
  const HttpResponse big =
      r.http.post(r.url + "/route", R"({"hashes": [1], "tokens": 1, "request_id": ")" +
                                        std::string(5000, 'x') + R"("})");
  expect_refused(big, 400, "1 to 256 bytes", "a long request_id");
}

TEST(RouterProcessHostile, ABodyThatIsNotUtf8Is400) {
  RouterProcess r;
  ASSERT_NE(r.url, "");
  const std::vector<std::string> bodies = {
      "{\"hashes\": [1], \"tokens\": 16, \"request_id\": \"\xff\xfe\"}",
      "\xff{\"hashes\": [1], \"tokens\": 16}",
      "{\"hashes\": [1], \"tokens\": 16, \"request_id\": \"\xed\xa0\x80\"}",  // a surrogate
      "{\"hashes\": [1], \"tokens\": 16, \"request_id\": \"\xc0\xaf\"}",      // overlong '/'
      "{\"hashes\": [1], \"tokens\": 16, \"request_id\": \"\xe2\x82\"}",      // cut short
  };
  for (const std::string& body : bodies) {
    expect_refused(r.http.post(r.url + "/route", body), 400, "not UTF-8", body);
    ASSERT_TRUE(r.idle());
  }
  expect_refused(r.http.post(r.url + "/instances", "{\"name\": \"\xc3\x28\", \"endpoint\": 1}"),
                 400, "not UTF-8", "an instance name");
  // A path that decodes to bytes that are not UTF-8 is named, escaped, in the 404.
  expect_refused(r.http.request("DELETE", r.url + "/instances/%FF%FE"), 404,
                 "no instance named \"\\xff\\xfe\"", "DELETE /instances/%FF%FE");
  expect_refused(r.http.get(r.url + "/%C3%28"), 404, "\"/\\xc3(\"", "GET /%C3%28");
  // A valid UTF-8 id is routed as it is.
  const HttpResponse ok =
      r.http.post(r.url + "/route", R"({"hashes": [1], "tokens": 16, "request_id": "é"})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["request_id"], "é");
  EXPECT_EQ(r.http.post(r.url + "/finish", R"({"request_id": "é"})").status, 200);
  EXPECT_TRUE(r.idle(1));
}

TEST(RouterProcessHostile, ANumberBeyondADoubleIs400) {
  // Found by router_http_fuzz: the parser throws out_of_range, not parse_error, for these.
  RouterProcess r;
  ASSERT_NE(r.url, "");
  for (const std::string body :
       {R"({"hashes": [1e400], "tokens": 16})", R"({"hashes": [1], "tokens": -1e999})",
        R"({"name": "x", "endpoint": 1E+400})"}) {
    const std::string path = body.starts_with(R"({"name")") ? "/instances" : "/route";
    expect_refused(r.http.post(r.url + path, body), 400, "number overflow", body);
    ASSERT_TRUE(r.idle()) << body;
  }
}

TEST(RouterProcessHostile, ABodyShorterThanItsContentLengthIsRefusedAndRoutesNothing) {
  RouterProcess r;
  ASSERT_NE(r.url, "");
  const std::string body = R"({"hashes": [1, 2], "tokens": 32, "request_id": "cut"})";
  const std::string head =
      "POST /route HTTP/1.1\r\nHost: router\r\nContent-Type: "
      "application/json\r\nContent-Length: ";
  // The client sends a whole JSON object but fewer bytes than it declared and
  // goes away without reading: the refusal is counted, and nothing was routed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_of(r.url));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string cut = head + std::to_string(body.size() + 100) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, cut.data(), cut.size(), MSG_NOSIGNAL), static_cast<ssize_t>(cut.size()));
  close(fd);
  EXPECT_TRUE(test::poll_until([&] {
    return r.http.get(r.url + "/metrics")
               .body.find(R"(requests_total{code="400",endpoint="route",pool="router"} 1)") !=
           std::string::npos;
  }));
  EXPECT_TRUE(r.idle());
  // The same, but the client ends only its side and reads: 400, nothing routed.
  const std::string answer =
      send_raw(port_of(r.url), head + std::to_string(body.size() + 100) + "\r\n\r\n" + body);
  EXPECT_NE(answer.find("HTTP/1.1 400"), std::string::npos) << answer;
  EXPECT_NE(answer.find("the body ended after " + std::to_string(body.size()) + " bytes"),
            std::string::npos)
      << answer;
  EXPECT_TRUE(r.idle());
  // A whole body on the same kind of connection is routed (the test can tell).
  const std::string whole =
      send_raw(port_of(r.url), head + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(whole.find("HTTP/1.1 200"), std::string::npos) << whole;
  EXPECT_EQ(r.http.post(r.url + "/finish", R"({"request_id": "cut"})").status, 200);
  EXPECT_TRUE(r.idle(1));
  // Content-Length headers that disagree, or one beside Transfer-Encoding, are refused.
  const std::string n = std::to_string(body.size());
  for (const std::string& headers :
       {"Content-Length: " + n + "\r\nContent-Length: " + n + "1\r\n",
        "Content-Length: " + n + "x\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: " + n + "\r\n"}) {
    const bool chunked = headers.starts_with("Transfer");
    const std::string res =
        send_raw(port_of(r.url), "POST /route HTTP/1.1\r\nHost: router\r\n" + headers + "\r\n" +
                                     (chunked ? chunk(body) + "0\r\n\r\n" : body));
    EXPECT_EQ(res.rfind("HTTP/1.1 4", 0), 0u) << headers << res;
    EXPECT_EQ(res.find("HTTP/1.1 200"), std::string::npos) << headers << res;
  }
  EXPECT_TRUE(r.idle(1));
}

TEST(RouterProcessHostile, ABodyOverMaxBodyBytesIs413) {
  RouterProcess r({"--max-body-bytes", "1024"});
  ASSERT_NE(r.url, "");
  std::string hashes = "1";
  while (hashes.size() < 2000) hashes += ", 1";
  const std::string big = R"({"hashes": [)" + hashes + R"(], "tokens": 16})";
  expect_refused(r.http.post(r.url + "/route", big), 413, "over 1024 bytes", "a 2 KB body");
  EXPECT_TRUE(r.idle());
  // Sent chunked (no Content-Length), it is refused once it grows past the limit.
  const std::string chunked = send_raw(
      port_of(r.url), "POST /route HTTP/1.1\r\nHost: router\r\nTransfer-Encoding: chunked\r\n\r\n" +
                          chunk(big) + "0\r\n\r\n");
  EXPECT_NE(chunked.find("HTTP/1.1 413"), std::string::npos) << chunked;
  EXPECT_TRUE(r.idle());
  // Under the limit it is routed.
  const HttpResponse small = r.http.post(r.url + "/route", R"({"hashes": [1], "tokens": 16})");
  EXPECT_EQ(small.status, 200) << small.body;
}

#else

TEST(RouterProcessHostile, DeepNestingInAnyCheckedFieldIs400AndTheProcessLives) {
  KVBM_SKIP_OR_FAIL(
      "kvbm built without ZeroMQ: install libzmq3-dev and cppzmq-dev (bash scripts/deps.sh)");
}

#endif

}  // namespace hostile_requests_test
}  // namespace kvbm::router_process
