#include "router/http_request.h"

#include <charconv>
#include <string>

#include <fmt/format.h>

namespace kvbm::router_process {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One Content-Length value: decimal digits only (RFC 9110 8.6).
std::uint64_t byte_count(std::string_view text) {
  const std::string_view digits = trimmed(text);
  std::uint64_t n = 0;
  const auto* end = digits.data() + digits.size();
  const auto [p, ec] = std::from_chars(digits.data(), end, n);
  const bool only_digits = digits.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits.empty() || !only_digits || ec != std::errc{} || p != end) {
    throw ClientError{400, fmt::format("Content-Length {} is not a byte count; send the "
                                       "body's length in bytes, once",
                                       quote(text))};
  }
  return n;
}

}  // namespace

std::optional<std::uint64_t> declared_length(const HttpRequest& request) {
  std::optional<std::uint64_t> length;
  bool transfer_encoding = false;
  for (const auto& [name, value] : request.headers) {
    if (same_name(name, "Transfer-Encoding")) transfer_encoding = true;
    if (!same_name(name, "Content-Length")) continue;
    const std::uint64_t n = byte_count(value);  // a list "5, 5" is refused: not a count
    if (length && *length != n) {
      throw ClientError{400, fmt::format("two Content-Length headers disagree ({} and {}); "
                                         "send one",
                                         *length, n)};
    }
    length = n;
  }
  if (length && transfer_encoding) {
    throw ClientError{400, "both Content-Length and Transfer-Encoding: send one of them"};
  }
  return length;
}

void check_body(const HttpRequest& request, std::size_t max_body_bytes) {
  const std::optional<std::uint64_t> length = declared_length(request);
  if (request.body_read == BodyRead::kOverLimit || request.body.size() > max_body_bytes ||
      (length && *length > max_body_bytes)) {
    throw ClientError{413, fmt::format("the body is over {} bytes (--max-body-bytes); send "
                                       "fewer hashes per request",
                                       max_body_bytes)};
  }
  if (request.body_read == BodyRead::kEndedEarly) {
    throw ClientError{400, fmt::format("the body ended after {} bytes, before its end (the "
                                       "connection closed, or a chunk broke); nothing was "
                                       "done: send the whole body",
                                       request.body.size())};
  }
  if (length && *length != request.body.size()) {
    throw ClientError{400, fmt::format("the body is {} bytes, its Content-Length says {}; "
                                       "nothing was done: send the whole body",
                                       request.body.size(), *length)};
  }
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < kExcerptBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (text.size() > kExcerptBytes) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace kvbm::router_process
