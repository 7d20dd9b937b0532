#include "replay/trace.h"

#include <cmath>
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

// Reads a non-negative integer field; returns "" or the reason.
std::string read_count(const json& obj, const char* key, bool required,
                       std::optional<std::uint64_t>& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return std::string("missing field \"") + key + "\"";
    return {};
  }
  if (it->is_number_unsigned()) {
    out = it->get<std::uint64_t>();
    return {};
  }
  if (it->is_number_integer()) {
    return std::string("\"") + key + "\" is negative (" + std::to_string(it->get<std::int64_t>()) +
           ")";
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (v < 0) return std::string("\"") + key + "\" is negative (" + it->dump() + ")";
    if (v != std::floor(v) || v > 1e18)
      return std::string("\"") + key + "\" is not an integer (" + it->dump() + ")";
    out = static_cast<std::uint64_t>(v);
    return {};
  }
  return std::string("\"") + key + "\" is not a number (" + it->dump() + ")";
}

std::string element_error(const char* key, std::size_t i, const json& v, const char* what) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return std::string("\"") + key + "\"[" + std::to_string(i) + "] is " + what + " (" + s + ")";
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
  if (options.block_tokens == 0) return "block_tokens must be > 0";
  json obj = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    // Parse again with exceptions for a message that says where.
    try {
      [[maybe_unused]] const json again = json::parse(line.begin(), line.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      if (const auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
      return "invalid JSON: " + what;
    }
    return "invalid JSON";
  }
  if (!obj.is_object()) return "not a JSON object";

  out = TraceRequest{};
  const auto ts = obj.find("timestamp");
  if (ts == obj.end() || ts->is_null()) return "missing field \"timestamp\"";
  if (!ts->is_number()) return "\"timestamp\" is not a number (" + ts->dump() + ")";
  out.timestamp_ms = ts->get<double>();
  if (out.timestamp_ms < 0 || !std::isfinite(out.timestamp_ms)) {
    return "\"timestamp\" is negative (" + ts->dump() + ")";
  }

  std::optional<std::uint64_t> output_length;
  if (auto e = read_count(obj, "output_length", true, output_length); !e.empty()) return e;
  out.output_length = *output_length;

  const auto ids = obj.find("hash_ids");
  const auto tokens = obj.find("input_ids");
  const bool has_ids = ids != obj.end() && !ids->is_null();
  const bool has_tokens = tokens != obj.end() && !tokens->is_null();
  if (has_ids && has_tokens) return "both \"hash_ids\" and \"input_ids\" given; use one";
  if (!has_ids && !has_tokens) return "missing field \"hash_ids\" (or \"input_ids\")";

  std::optional<std::uint64_t> input_length;
  if (auto e = read_count(obj, "input_length", has_ids, input_length); !e.empty()) return e;

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
    req.line = t.lines;
    t.blocks += req.hashes.size();
    t.input_tokens += req.input_length;
    t.requests.push_back(std::move(req));
    if (options.max_requests != 0 && t.requests.size() >= options.max_requests) break;
  }
  return t;
}

Trace read_trace_file(const std::filesystem::path& path, const TraceOptions& options) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open trace " + path.string());
  return read_trace(in, options, path.string());
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
