// fuzz/trace_fuzz.cpp: kvbm-replay's trace reader (tools/replay/replay/trace.h).
//
// Input: one byte choosing block_tokens, then the text of a trace.
//
// Invariants, for every line and for the whole text:
//   * parse_trace_line() throws nothing; it returns "" or a line error, which
//     is non-empty printable ASCII of at most 256 bytes;
//   * an accepted line is within the documented bounds: a finite timestamp
//     >= 0, lengths <= kMaxTraceTokens, block positions 0, 1, 2, ... each
//     naming the one before as parent; a block-id line has
//     ceil(input_length / block_tokens) hashes whose values are its hash_ids,
//     a token-id line has the sequence hashes kvbm::TokenBlockSequence gives
//     its tokens, and tokens_in_block() adds up to the tokens its blocks hold;
//   * parsing is deterministic;
//   * read_trace() agrees with parse_trace_line() line by line: the same
//     requests and errors, with their line numbers, and totals that are the
//     sums of the accepted lines.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "kvbm/token_block_sequence.h"
#include "replay/trace.h"

namespace {

using kvbm::replay::kMaxTraceTokens;
using kvbm::replay::TraceOptions;
using kvbm::replay::TraceRequest;

constexpr std::uint32_t kBlockTokens[] = {1, 2, 3, 4, 16, 512, 0xFFFF'FFFF};

bool same(const TraceRequest& a, const TraceRequest& b) {
  // NaN cannot be accepted, so == on the timestamp is exact.
  return a.timestamp_ms == b.timestamp_ms && a.input_length == b.input_length &&
         a.output_length == b.output_length && a.hashes == b.hashes;
}

// Checks one line; returns its error ("" when accepted) and fills `req`.
std::string check_line(std::string_view line, const TraceOptions& options, TraceRequest& req) {
  std::string error;
  try {
    error = kvbm::replay::parse_trace_line(line, options, req);
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "parse_trace_line threw");
  }
  TraceRequest again;
  std::string error_again;
  try {
    error_again = kvbm::replay::parse_trace_line(line, options, again);
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "parse_trace_line threw the second time");
  }
  KVBM_FUZZ_CHECK(error == error_again, "parsing the same line twice gave two answers");

  if (!error.empty()) {
    KVBM_FUZZ_CHECK(error.size() <= 256, error.c_str());
    for (const char c : error) KVBM_FUZZ_CHECK(c >= 0x20 && c < 0x7f, error.c_str());
    return error;
  }
  KVBM_FUZZ_CHECK(same(req, again), "parsing the same line twice gave two requests");

  const std::uint32_t bt = options.block_tokens;
  KVBM_FUZZ_CHECK(std::isfinite(req.timestamp_ms) && req.timestamp_ms >= 0, "timestamp");
  KVBM_FUZZ_CHECK(req.input_length <= kMaxTraceTokens, "input_length over the limit");
  KVBM_FUZZ_CHECK(req.output_length <= kMaxTraceTokens, "output_length over the limit");
  for (std::size_t i = 0; i < req.hashes.size(); ++i) {
    const auto& h = req.hashes[i];
    KVBM_FUZZ_CHECK(h.position() == i, "block positions are not 0, 1, 2, ...");
    if (i > 0) KVBM_FUZZ_CHECK(h.parent() == req.hashes[i - 1].value(), "broken parent chain");
  }

  // The line parsed, so it is JSON; read the form back to check the hashes.
  const auto obj = nlohmann::json::parse(line.begin(), line.end());
  const auto ids = obj.find("hash_ids");
  const bool block_ids = ids != obj.end() && !ids->is_null();
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < req.hashes.size(); ++i) covered += req.tokens_in_block(i, bt);
  if (block_ids) {
    KVBM_FUZZ_CHECK(req.hashes.size() == (req.input_length + bt - 1) / bt,
                    "hash_ids is not ceil(input_length / block_tokens) long");
    for (std::size_t i = 0; i < req.hashes.size(); ++i) {
      KVBM_FUZZ_CHECK(req.hashes[i].value() == (*ids)[i].get<std::uint64_t>(),
                      "a block id is not its hash");
    }
    KVBM_FUZZ_CHECK(covered == req.input_length, "the blocks do not hold input_length tokens");
  } else {
    const auto& toks = obj.at("input_ids");
    KVBM_FUZZ_CHECK(toks.size() == req.input_length, "input_length is not the token count");
    std::vector<kvbm::Token> tokens;
    for (const auto& t : toks) tokens.push_back(t.get<kvbm::Token>());
    kvbm::TokenBlockSequence seq(bt);
    seq.extend(tokens);
    const auto expected = seq.sequence_hashes();
    KVBM_FUZZ_CHECK(
        std::equal(expected.begin(), expected.end(), req.hashes.begin(), req.hashes.end()),
        "token ids are not hashed like TokenBlockSequence hashes them");
    KVBM_FUZZ_CHECK(covered == req.hashes.size() * std::uint64_t{bt},
                    "full blocks do not hold block_tokens tokens each");
  }
  return error;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  TraceOptions options;
  options.block_tokens = kBlockTokens[data[0] % std::size(kBlockTokens)];
  options.max_errors_kept = std::numeric_limits<std::size_t>::max();
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  // Line by line, as read_trace() cuts them.
  std::vector<TraceRequest> requests;
  std::vector<std::pair<std::size_t, std::string>> errors;
  std::uint64_t blocks = 0, tokens = 0;
  std::size_t lines = 0;
  {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      ++lines;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      TraceRequest req;
      std::string error = check_line(line, options, req);
      if (!error.empty()) {
        errors.emplace_back(lines, std::move(error));
        continue;
      }
      req.line = lines;
      blocks += req.hashes.size();
      tokens += req.input_length;
      requests.push_back(std::move(req));
    }
  }

  std::istringstream in(text);
  kvbm::replay::Trace t;
  try {
    t = kvbm::replay::read_trace(in, options);
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "read_trace threw");
  }
  KVBM_FUZZ_CHECK(t.lines == lines, "read_trace counted other lines");
  KVBM_FUZZ_CHECK(t.block_tokens == options.block_tokens, "block_tokens");
  KVBM_FUZZ_CHECK(t.requests.size() == requests.size(), "read_trace kept other requests");
  for (std::size_t i = 0; i < requests.size(); ++i) {
    KVBM_FUZZ_CHECK(same(t.requests[i], requests[i]) && t.requests[i].line == requests[i].line,
                    "read_trace read a line unlike parse_trace_line");
  }
  KVBM_FUZZ_CHECK(t.error_count == errors.size() && t.errors.size() == errors.size(),
                  "read_trace counted other errors");
  for (std::size_t i = 0; i < errors.size(); ++i) {
    KVBM_FUZZ_CHECK(t.errors[i].line == errors[i].first && t.errors[i].message == errors[i].second,
                    "read_trace reported an error unlike parse_trace_line");
  }
  KVBM_FUZZ_CHECK(t.blocks == blocks && t.input_tokens == tokens, "totals are not the sums");
  KVBM_FUZZ_CHECK(kvbm::replay::unique_blocks(t) <= t.blocks, "more unique blocks than blocks");
  return 0;
}
