// replay/trace.h: request traces for kvbm-replay.
//
// A trace is JSON Lines, one request per line, in file order. Two forms are
// read, and a file may mix them:
//
//   block ids (the Mooncake trace format):
//     {"timestamp": 27482, "input_length": 6955, "output_length": 52,
//      "hash_ids": [46, 47, ...]}
//     one id per block of `block_tokens` prompt tokens, ceil(input_length /
//     block_tokens) of them, prefix-chained (equal ids at a position mean an
//     equal prefix). Id k at position i becomes SequenceHash(k, id at i - 1, i).
//
//   raw token ids:
//     {"timestamp": 0, "input_ids": [151644, 8948, ...], "output_length": 12}
//     the prompt's token ids (unsigned 32-bit); input_length is optional and,
//     when given, must equal the number of ids. The full blocks are hashed with
//     kvbm::hash_blocks (no salt); a partial tail block has no hash and is
//     never cached.
//
// `timestamp` is the arrival time in milliseconds (a finite, non-negative
// number; fractions are kept). Other fields are ignored. A line that is not
// valid JSON (a number too large for a double, such as 1e999, included), lacks
// a field, has a negative or non-integer length or id, a length over
// kMaxTraceTokens (2^32 - 1), or the wrong number of hash_ids is reported as a
// TraceError with its 1-based line number and left out; empty lines are
// skipped. A message is printable ASCII (other bytes of the line appear as
// \xNN) of at most about 200 bytes. No line can overflow Trace::blocks or
// Trace::input_tokens: one that would is an error too.
//
// Thread-safety: plain functions over values.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

#include "kvbm/sequence_hash.h"

namespace kvbm::replay {

/// The most tokens one line may give as `input_length` or `output_length`:
/// 2^32 - 1. Within it, ceil(input_length / block_tokens) cannot overflow and a
/// request's block positions fit a SequenceHash position (u32).
inline constexpr std::uint64_t kMaxTraceTokens = 0xFFFF'FFFF;

/// One request of a trace.
struct TraceRequest {
  double timestamp_ms = 0;           ///< arrival, ms from the trace's start
  std::uint64_t input_length = 0;    ///< prompt tokens
  std::uint64_t output_length = 0;   ///< generated tokens
  std::vector<SequenceHash> hashes;  ///< one per (cacheable) prompt block
  std::size_t line = 0;              ///< 1-based line in the file

  /// Returns the number of prompt tokens in block `i` (the last block of a
  /// block-id trace may be partial).
  [[nodiscard]] std::uint64_t tokens_in_block(std::size_t i,
                                              std::uint32_t block_tokens) const noexcept;
};

/// A line that could not be read.
struct TraceError {
  std::size_t line = 0;
  std::string message;
};

/// How to read a trace.
struct TraceOptions {
  std::uint32_t block_tokens = 512;   ///< tokens per hash id / per block (> 0)
  std::size_t max_requests = 0;       ///< stop after this many valid requests (0: all)
  std::size_t max_errors_kept = 100;  ///< errors beyond this are only counted
};

/// What a trace held.
struct Trace {
  std::string source;                  ///< path or "<stream>"
  std::uint32_t block_tokens = 0;      ///< TraceOptions::block_tokens it was read with
  std::vector<TraceRequest> requests;  ///< the valid lines, in file order
  std::vector<TraceError> errors;      ///< the first max_errors_kept invalid lines
  std::size_t error_count = 0;         ///< every invalid line
  std::size_t lines = 0;               ///< lines read (including empty and invalid ones)
  std::uint64_t blocks = 0;            ///< sum of requests[i].hashes.size()
  std::uint64_t input_tokens = 0;      ///< sum of input_length
};

/// Parses one line. Returns "" and fills `out` on success, else the reason.
/// Throws nothing but std::bad_alloc.
[[nodiscard]] std::string parse_trace_line(std::string_view line, const TraceOptions& options,
                                           TraceRequest& out);

/// Reads a whole trace from a stream.
[[nodiscard]] Trace read_trace(std::istream& in, const TraceOptions& options,
                               std::string source = "<stream>");

/// Reads a trace file. Throws std::runtime_error, with the reason, when the
/// path is a directory or cannot be opened for reading.
[[nodiscard]] Trace read_trace_file(const std::filesystem::path& path, const TraceOptions& options);

/// Returns the number of distinct sequence hashes in the trace.
[[nodiscard]] std::size_t unique_blocks(const Trace& trace);

}  // namespace kvbm::replay
