// tests/router_process/http_request_test.cpp: tools/router/http_request.h, the
// checks every kvbm-router request passes before its body is used: what a
// Content-Length may look like, when a body is too long, cut short or
// ambiguous, and how a client's value is quoted in an error message.

#include "router/http_request.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace kvbm::router_process {
namespace http_request_test {

HttpRequest with(std::vector<std::pair<std::string, std::string>> headers, std::string body,
                 BodyRead read = BodyRead::kWhole) {
  HttpRequest r;
  r.method = "POST";
  r.path = "/route";
  r.headers = std::move(headers);
  r.body = std::move(body);
  r.body_read = read;
  return r;
}

/// Returns the status check_body() throws, 0 when it accepts.
int status_of(const HttpRequest& r, std::size_t limit = 100) {
  try {
    check_body(r, limit);
  } catch (const ClientError& e) {
    EXPECT_FALSE(e.message.empty());
    return e.status;
  }
  return 0;
}

TEST(HttpRequest, AContentLengthIsOneDecimalByteCount) {
  EXPECT_EQ(declared_length(with({}, "")), std::nullopt);
  EXPECT_EQ(declared_length(with({{"Content-Length", "5"}}, "12345")), 5u);
  EXPECT_EQ(declared_length(with({{"content-length", " 5 "}}, "12345")), 5u);  // OWS, any case
  EXPECT_EQ(declared_length(with({{"Content-Length", "5"}, {"CONTENT-LENGTH", "5"}}, "12345")),
            5u);  // repeats that agree
  for (const char* bad :
       {"", "x", "5x", "+5", "-1", "0x5", "5, 5", "5 5", "1e3", "18446744073709551616"}) {
    EXPECT_EQ(status_of(with({{"Content-Length", bad}}, "12345")), 400) << bad;
  }
  EXPECT_EQ(status_of(with({{"Content-Length", "5"}, {"Content-Length", "6"}}, "12345")), 400);
  EXPECT_EQ(status_of(with({{"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}, "12345")),
            400);
}

TEST(HttpRequest, ABodyIsWholeWithinTheLimitOrRefused) {
  EXPECT_EQ(status_of(with({{"Content-Length", "5"}}, "12345")), 0);
  EXPECT_EQ(status_of(with({}, "12345")), 0);                           // chunked, read whole
  EXPECT_EQ(status_of(with({{"Content-Length", "9"}}, "12345")), 400);  // shorter than declared
  EXPECT_EQ(status_of(with({{"Content-Length", "3"}}, "12345")), 400);  // longer
  EXPECT_EQ(status_of(with({}, "12", BodyRead::kEndedEarly)), 400);
  EXPECT_EQ(status_of(with({{"Content-Length", "2"}}, "12", BodyRead::kEndedEarly)), 400);
  EXPECT_EQ(status_of(with({}, "", BodyRead::kOverLimit)), 413);
  EXPECT_EQ(status_of(with({{"Content-Length", "101"}}, "")), 413);  // declared over, unread
  EXPECT_EQ(status_of(with({}, std::string(101, 'x'))), 413);
  EXPECT_EQ(status_of(with({}, std::string(100, 'x'))), 0);  // the limit itself is allowed
}

TEST(HttpRequest, QuoteIsPrintableAsciiOfAtMost64Bytes) {
  EXPECT_EQ(quote("ghost"), "\"ghost\"");
  EXPECT_EQ(quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(quote("\xff\n\xc3\xa9"), R"("\xff\x0a\xc3\xa9")");
  EXPECT_EQ(quote(std::string(65, 'q')), "\"" + std::string(64, 'q') + "\"... (65 bytes)");
  const std::string q = quote(std::string(100000, '\x01'));
  EXPECT_LE(q.size(), 4u * 64 + 32);
}

}  // namespace http_request_test
}  // namespace kvbm::router_process
