#include "replay/trace.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "kvbm/hashing.h"

namespace kvbm::replay {

namespace {

using nlohmann::json;

// Returns a short description of `v` for a message: a scalar as JSON (cut at
// 40 bytes), a container by its kind and size. Never recurses, so a deeply
// nested value costs nothing.
std::string describe(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size());
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}

// Reads a non-negative integer field of at most `max`; returns "" or the reason.
std::string read_count(const json& obj, const char* key, bool required, std::uint64_t max,
                       std::optional<std::uint64_t>& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return std::string("missing field \"") + key + "\"";
    return {};
  }
  const std::string name = std::string("\"") + key + "\"";
  const std::string over = name + " is over the limit of " + std::to_string(max) + " (";
  if (it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (v > max) return over + describe(*it) + ")";
    out = v;
    return {};
  }
  if (it->is_number_integer()) return name + " is negative (" + describe(*it) + ")";
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (v < 0) return name + " is negative (" + describe(*it) + ")";
    if (v != std::floor(v)) return name + " is not an integer (" + describe(*it) + ")";
    if (v > static_cast<double>(max)) return over + describe(*it) + ")";
    out = static_cast<std::uint64_t>(v);
    return {};
  }
  return name + " is not a number (" + describe(*it) + ")";
}

std::string element_error(const char* key, std::size_t i, const json& v, const char* what) {
  return std::string("\"") + key + "\"[" + std::to_string(i) + "] is " + what + " (" + describe(v) +
         ")";
}

// Returns `message` with every byte outside printable ASCII written as \xNN,
// cut at kMaxMessage bytes: a message quotes the line, and the line may hold
// anything.
std::string printable(std::string_view message) {
  constexpr std::size_t kMaxMessage = 200;
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f) {
      out += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xf];
    }
    if (out.size() >= kMaxMessage) {
      out += "...";
      break;
    }
  }
  return out;
}

std::string parse_line(std::string_view line, const TraceOptions& options, TraceRequest& out) {
  if (options.block_tokens == 0) return "block_tokens must be > 0";
  json obj;
  try {
    obj = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {
    // parse_error for bad syntax, out_of_range for a number that overflows a
    // double ("1e999"); either is this line's error. Drop the "[json.exception...] ".
    std::string what = e.what();
    if (const auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return "invalid JSON: " + what;
  }
  if (!obj.is_object()) return "not a JSON object";

  out = TraceRequest{};
  const auto ts = obj.find("timestamp");
  if (ts == obj.end() || ts->is_null()) return "missing field \"timestamp\"";
  if (!ts->is_number()) return "\"timestamp\" is not a number (" + describe(*ts) + ")";
  out.timestamp_ms = ts->get<double>();
  if (out.timestamp_ms < 0 || !std::isfinite(out.timestamp_ms)) {
    return "\"timestamp\" is negative (" + describe(*ts) + ")";
  }

  std::optional<std::uint64_t> output_length;
  if (auto e = read_count(obj, "output_length", true, kMaxTraceTokens, output_length); !e.empty())
    return e;
  out.output_length = *output_length;

  const auto ids = obj.find("hash_ids");
  const auto tokens = obj.find("input_ids");
  const bool has_ids = ids != obj.end() && !ids->is_null();
  const bool has_tokens = tokens != obj.end() && !tokens->is_null();
  if (has_ids && has_tokens) return "both \"hash_ids\" and \"input_ids\" given; use one";
  if (!has_ids && !has_tokens) return "missing field \"hash_ids\" (or \"input_ids\")";

  std::optional<std::uint64_t> input_length;
  if (auto e = read_count(obj, "input_length", has_ids, kMaxTraceTokens, input_length); !e.empty())
    return e;

  const std::uint32_t bt = options.block_tokens;
  if (has_ids) {
    if (!ids->is_array()) return "\"hash_ids\" is not an array";
    out.input_length = *input_length;
    const std::uint64_t expected = (out.input_length + bt - 1) / bt;
    if (ids->size() != expected) {
      return "\"hash_ids\" has " + std::to_string(ids->size()) + " ids but input_length " +
             std::to_string(out.input_length) + " needs ceil(" + std::to_string(out.input_length) +
             "/" + std::to_string(bt) + ") = " + std::to_string(expected);
    }
    out.hashes.reserve(ids->size());
    std::uint64_t prev = 0;
    for (std::size_t i = 0; i < ids->size(); ++i) {
      const json& v = (*ids)[i];
      if (!v.is_number_integer()) return element_error("hash_ids", i, v, "not an integer");
      if (!v.is_number_unsigned()) return element_error("hash_ids", i, v, "negative");
      const std::uint64_t id = v.get<std::uint64_t>();
      out.hashes.emplace_back(id, i == 0 ? std::nullopt : std::optional<std::uint64_t>(prev),
                              static_cast<std::uint32_t>(i));
      prev = id;
    }
    return {};
  }

  if (!tokens->is_array()) return "\"input_ids\" is not an array";
  if (tokens->size() > kMaxTraceTokens) {
    return "\"input_ids\" has " + std::to_string(tokens->size()) + " tokens, over the limit of " +
           std::to_string(kMaxTraceTokens);
  }
  std::vector<Token> toks;
  toks.reserve(tokens->size());
  for (std::size_t i = 0; i < tokens->size(); ++i) {
    const json& v = (*tokens)[i];
    if (!v.is_number_integer()) return element_error("input_ids", i, v, "not an integer");
    if (!v.is_number_unsigned()) return element_error("input_ids", i, v, "negative");
    const std::uint64_t t = v.get<std::uint64_t>();
    if (t > std::numeric_limits<Token>::max())
      return element_error("input_ids", i, v, "over 2^32 - 1");
    toks.push_back(static_cast<Token>(t));
  }
  if (input_length && *input_length != toks.size()) {
    return "\"input_length\" is " + std::to_string(*input_length) + " but \"input_ids\" has " +
           std::to_string(toks.size()) + " tokens";
  }
  out.input_length = toks.size();
  const std::size_t full = toks.size() / bt * bt;
  std::vector<std::uint64_t> block_hashes;
  if (full > 0) {
    hash_blocks(std::span<const Token>(toks.data(), full), bt, kNoSalt, std::nullopt, block_hashes,
                out.hashes);
  }
  return {};
}

}  // namespace

std::uint64_t TraceRequest::tokens_in_block(std::size_t i,
                                            std::uint32_t block_tokens) const noexcept {
  const std::uint64_t start = std::uint64_t{block_tokens} * i;
  if (start >= input_length) return 0;
  const std::uint64_t left = input_length - start;
  return left < block_tokens ? left : block_tokens;
}

std::string parse_trace_line(std::string_view line, const TraceOptions& options,
                             TraceRequest& out) {
  std::string error = parse_line(line, options, out);
  if (!error.empty()) error = printable(error);
  return error;
}

Trace read_trace(std::istream& in, const TraceOptions& options, std::string source) {
  Trace t;
  t.source = std::move(source);
  t.block_tokens = options.block_tokens;
  std::string line;
  TraceRequest req;
  while (std::getline(in, line)) {
    ++t.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (auto err = parse_trace_line(line, options, req); !err.empty()) {
      ++t.error_count;
      if (t.errors.size() < options.max_errors_kept) t.errors.push_back({t.lines, std::move(err)});
      continue;
    }
    // Each line is within kMaxTraceTokens, so only a trace of over 2^32 lines
    // could overflow a total; that line is refused rather than wrap it.
    constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
    if (req.input_length > kMax - t.input_tokens || req.hashes.size() > kMax - t.blocks) {
      ++t.error_count;
      if (t.errors.size() < options.max_errors_kept)
        t.errors.push_back({t.lines, "the trace's token total would overflow 2^64 - 1"});
      continue;
    }
    req.line = t.lines;
    t.blocks += req.hashes.size();
    t.input_tokens += req.input_length;
    t.requests.push_back(std::move(req));
    if (options.max_requests != 0 && t.requests.size() >= options.max_requests) break;
  }
  return t;
}

Trace read_trace_file(const std::filesystem::path& path, const TraceOptions& options) {
  // A directory opens like a file and then reads as empty: an empty trace
  // that would replay "successfully".
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error("cannot read trace " + path.string() + ": it is a directory");
  }
  errno = 0;
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    throw std::runtime_error("cannot open trace " + path.string() +
                             (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
  }
  Trace t = read_trace(in, options, path.string());
  if (in.bad()) throw std::runtime_error("error reading trace " + path.string());
  return t;
}

std::size_t unique_blocks(const Trace& trace) {
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(trace.blocks);
  for (const auto& r : trace.requests) {
    for (const auto& h : r.hashes) seen.insert(h.value());
  }
  return seen.size();
}

}  // namespace kvbm::replay
