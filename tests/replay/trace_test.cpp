// Tests of replay/trace.h: both trace forms, every error with its line
// number, and the shipped trace's shape.

#include "replay/trace.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/hashing.h"
#include "kvbm/token_block_sequence.h"
#include "permission_checks.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace trace_test {

Trace read(const std::string& text, std::uint32_t block_tokens = 4) {
  std::istringstream in(text);
  return read_trace(in, TraceOptions{.block_tokens = block_tokens});
}

TEST(ReplayTrace, ReadsBlockIdLinesAsChainedSequenceHashes) {
  const Trace t =
      read(R"({"timestamp": 10, "input_length": 9, "output_length": 3, "hash_ids": [7, 8, 9]})"
           "\n"
           R"({"timestamp": 12.5, "input_length": 4,)"
           R"( "output_length": 0, "hash_ids": [7], "extra": "ignored"})"
           "\n");
  ASSERT_EQ(t.error_count, 0u);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.lines, 2u);
  EXPECT_EQ(t.blocks, 4u);
  EXPECT_EQ(t.input_tokens, 13u);
  EXPECT_EQ(t.block_tokens, 4u);
  const auto& r = t.requests[0];
  EXPECT_EQ(r.line, 1u);
  EXPECT_DOUBLE_EQ(r.timestamp_ms, 10.0);
  EXPECT_EQ(r.output_length, 3u);
  ASSERT_EQ(r.hashes.size(), 3u);
  EXPECT_EQ(r.hashes[0], SequenceHash(7, std::nullopt, 0));
  EXPECT_EQ(r.hashes[1], SequenceHash(8, 7, 1));
  EXPECT_EQ(r.hashes[2], SequenceHash(9, 8, 2));
  // The last block is partial: 9 tokens = 4 + 4 + 1.
  EXPECT_EQ(r.tokens_in_block(0, 4), 4u);
  EXPECT_EQ(r.tokens_in_block(2, 4), 1u);
  EXPECT_EQ(r.tokens_in_block(3, 4), 0u);
  EXPECT_DOUBLE_EQ(t.requests[1].timestamp_ms, 12.5);
  EXPECT_EQ(t.requests[1].line, 2u);
  EXPECT_EQ(unique_blocks(t), 3u);
}

TEST(ReplayTrace, HashesTokenIdsWithTheLibrarySequenceHashing) {
  // 10 tokens, blocks of 4: two full blocks are hashed, the 2-token tail is not.
  const std::vector<Token> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const Trace t =
      read(R"({"timestamp": 0, "input_ids": [1,2,3,4,5,6,7,8,9,10], "output_length": 5})"
           "\n");
  ASSERT_EQ(t.error_count, 0u) << t.errors[0].message;
  ASSERT_EQ(t.requests.size(), 1u);
  const auto& r = t.requests[0];
  EXPECT_EQ(r.input_length, 10u);
  TokenBlockSequence seq(4);
  seq.extend(tokens);
  const auto expected = seq.sequence_hashes();
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(r.hashes.size(), 2u);
  EXPECT_EQ(r.hashes[0], expected[0]);
  EXPECT_EQ(r.hashes[1], expected[1]);
  EXPECT_EQ(r.hashes[1].parent(), r.hashes[0].value());

  // A prompt sharing the first block shares its hash only.
  const Trace u = read(
      R"({"timestamp": 1, "input_ids": [1,2,3,4,5,6,7,99], "input_length": 8, "output_length": 1})"
      "\n");
  ASSERT_EQ(u.error_count, 0u) << u.errors[0].message;
  ASSERT_EQ(u.requests[0].hashes.size(), 2u);
  EXPECT_EQ(u.requests[0].hashes[0], r.hashes[0]);
  EXPECT_NE(u.requests[0].hashes[1], r.hashes[1]);
}

TEST(ReplayTrace, ReportsEveryInvalidLineWithItsNumberAndKeepsTheRest) {
  const std::string text =
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n"  // 1 ok
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1)"
      "\n"  // 2 bad JSON
      "\n"  // 3 empty
      R"({"input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n"  // 4 no timestamp
      R"({"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": [1]})"
      "\n"  // 5 negative
      R"({"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [1, 2]})"
      "\n"  // 6 wrong count
      R"({"timestamp": 0, "input_length": 4, "output_length": 1})"
      "\n"  // 7 no ids
      R"({"timestamp": 0, "input_length": 4, "hash_ids": [1]})"
      "\n"  // 8 no output_length
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-1]})"
      "\n"  // 9 negative id
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": ["a"]})"
      "\n"  // 10 non-integer id
      R"([1, 2, 3])"
      "\n"  // 11 not an object
      R"({"timestamp": 0, "output_length": 1, "input_ids": [1, -2]})"
      "\n"  // 12 negative token
      R"({"timestamp": 0, "input_length": 3, "output_length": 1, "input_ids": [1, 2]})"
      "\n"  // 13 length mismatch
      R"({"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": [1]})"
      "\n"  // 14 fraction
      R"({"timestamp": -1, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n"  // 15 negative time
      R"({"timestamp": 5, "input_length": 8, "output_length": 2, "hash_ids": [1, 3]})"
      "\n";  // 16 ok
  const Trace t = read(text);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].line, 1u);
  EXPECT_EQ(t.requests[1].line, 16u);
  EXPECT_EQ(t.lines, 16u);
  ASSERT_EQ(t.error_count, 13u);
  std::vector<std::size_t> lines;
  for (const auto& e : t.errors) lines.push_back(e.line);
  EXPECT_EQ(lines, (std::vector<std::size_t>{2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  auto message = [&](std::size_t line) {
    for (const auto& e : t.errors) {
      if (e.line == line) return e.message;
    }
    return std::string();
  };
  EXPECT_NE(message(2).find("invalid JSON"), std::string::npos) << message(2);
  EXPECT_NE(message(4).find("timestamp"), std::string::npos) << message(4);
  EXPECT_NE(message(5).find("negative"), std::string::npos) << message(5);
  EXPECT_NE(message(6).find("has 2 ids"), std::string::npos) << message(6);
  EXPECT_NE(message(6).find("= 3"), std::string::npos) << message(6);
  EXPECT_NE(message(7).find("hash_ids"), std::string::npos) << message(7);
  EXPECT_NE(message(8).find("output_length"), std::string::npos) << message(8);
  EXPECT_NE(message(9).find("hash_ids\"[0]"), std::string::npos) << message(9);
  EXPECT_NE(message(12).find("input_ids\"[1]"), std::string::npos) << message(12);
  EXPECT_NE(message(13).find("input_length"), std::string::npos) << message(13);
  EXPECT_NE(message(14).find("not an integer"), std::string::npos) << message(14);
}

TEST(ReplayTrace, NumberOverflowIsALineErrorNotAnAbort) {
  // A number too large for a double makes the JSON parser throw out_of_range
  // rather than parse_error; it must stay one bad line of the trace.
  const std::string good =
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n";
  const Trace t =
      read(good +
           R"({"timestamp": 0, "input_length": 1e999, "output_length": 1, "hash_ids": [1]})"
           "\n"
           R"({"timestamp": 1e999, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
           "\n"
           R"({"timestamp": 0, "input_length": 4, "output_length": -1e999, "hash_ids": [1]})"
           "\n"
           R"({"timestamp": 0, "output_length": 1, "input_ids": [1, 2, 3, 1e400]})"
           "\n" +
           good);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[1].line, 6u);
  ASSERT_EQ(t.error_count, 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t.errors[i].line, i + 2);
    EXPECT_NE(t.errors[i].message.find("overflow"), std::string::npos) << t.errors[i].message;
  }
}

TEST(ReplayTrace, LengthsOverTheLimitAreLineErrorsAndNeverReachTheTotals) {
  // 2^64 - 1 tokens: ceil(input_length / block_tokens) used to wrap to 0, so
  // an empty hash_ids passed and the length went into input_tokens.
  const std::string max = std::to_string(kMaxTraceTokens);
  const std::string over = std::to_string(kMaxTraceTokens + 1);
  const Trace t = read(R"({"timestamp": 0, "input_length": 18446744073709551615,)"
                       R"( "output_length": 1, "hash_ids": []})"
                       "\n"
                       R"({"timestamp": 0, "input_length": 18446744073709551613,)"
                       R"( "output_length": 1, "hash_ids": []})"
                       "\n"
                       R"({"timestamp": 0, "input_length": )" +
                       over +
                       R"(, "output_length": 1, "hash_ids": []})"
                       "\n"
                       R"({"timestamp": 0, "input_length": 99999999999999999999999,)"
                       R"( "output_length": 1, "hash_ids": []})"
                       "\n"
                       R"({"timestamp": 0, "input_length": 4, "output_length": )" +
                       over +
                       R"(, "hash_ids": [1]})"
                       "\n"
                       R"({"timestamp": 0, "output_length": 1, "input_length": )" +
                       over +
                       R"(, "input_ids": [1]})"
                       "\n"
                       R"({"timestamp": 0, "input_length": 4, "output_length": )" +
                       max +
                       R"(, "hash_ids": [1]})"
                       "\n");
  ASSERT_EQ(t.error_count, 6u);
  for (const auto& e : t.errors) {
    EXPECT_NE(e.message.find("over the limit of " + max), std::string::npos)
        << e.line << ": " << e.message;
  }
  ASSERT_EQ(t.requests.size(), 1u);  // the limit itself is allowed
  EXPECT_EQ(t.requests[0].output_length, kMaxTraceTokens);
  EXPECT_EQ(t.input_tokens, 4u);
  EXPECT_EQ(t.blocks, 1u);
}

TEST(ReplayTrace, DeeplyNestedValuesAreLineErrors) {
  // Describing a value in a message must not recurse through it.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::string deep_object =
      "{\"a\": " + std::string(50'000, '[') + std::string(50'000, ']') + "}";
  const Trace t = read(
      R"({"timestamp": )" + deep +
      R"(, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n"
      R"({"timestamp": 0, "input_length": )" +
      deep_object +
      R"(, "output_length": 1, "hash_ids": [1]})"
      "\n"
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [)" +
      deep + "]}\n" + R"({"timestamp": 0, "output_length": 1, "input_ids": [)" + deep + "]}\n" +
      R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "extra": )" +
      deep + "}\n");
  ASSERT_EQ(t.error_count, 4u);
  for (const auto& e : t.errors) EXPECT_LT(e.message.size(), 300u) << e.message;
  ASSERT_EQ(t.requests.size(), 1u);  // a nested field that is ignored is fine
  EXPECT_EQ(t.requests[0].line, 5u);
}

TEST(ReplayTrace, ErrorMessagesArePrintableAscii) {
  // Raw bytes from the line (control characters, invalid UTF-8) are escaped.
  const Trace t = read(
      std::string("{\"timestamp\": \x1b[2J\xff}\n") +
      R"({"timestamp": "\u001b[31mred", "input_length": 4, "output_length": 1, "hash_ids": [1]})"
      "\n");
  ASSERT_EQ(t.error_count, 2u);
  for (const auto& e : t.errors) {
    for (const char c : e.message) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f)
          << "byte " << int(static_cast<unsigned char>(c)) << " in " << e.message;
    }
  }
}

TEST(ReplayTrace, StopsAtMaxRequestsAndCapsKeptErrors) {
  std::string text;
  for (int i = 0; i < 5; ++i) text += "garbage\n";
  for (int i = 0; i < 5; ++i) {
    text += R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
            "\n";
  }
  std::istringstream in(text);
  const Trace t =
      read_trace(in, TraceOptions{.block_tokens = 4, .max_requests = 3, .max_errors_kept = 2});
  EXPECT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.error_count, 5u);
  EXPECT_EQ(t.errors.size(), 2u);
  EXPECT_EQ(t.lines, 8u);
}

TEST(ReplayTrace, MissingFileThrows) {
  EXPECT_THROW((void)read_trace_file("/nonexistent/trace.jsonl", TraceOptions{}),
               std::runtime_error);
}

TEST(ReplayTrace, DirectoryThrowsInsteadOfReadingAsEmpty) {
  const test::ScratchDir dir("kvbm-trace-dir");
  try {
    (void)read_trace_file(dir.path(), TraceOptions{});
    FAIL() << "a directory was read as an empty trace";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

TEST(ReplayTrace, UnreadableFileThrowsWithTheReason) {
  const test::ScratchDir dir("kvbm-trace-unreadable");
  const auto p = dir.path() / "trace.jsonl";
  std::ofstream(p) << R"({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]})"
                   << "\n";
  std::filesystem::permissions(p, std::filesystem::perms::none);
  // Root too: without CAP_DAC_OVERRIDE on this thread a mode-000 file cannot be opened.
  const kvbm::test::PermissionChecksOn checks;
  ASSERT_TRUE(checks.active()) << checks.why_not();
  ASSERT_FALSE(std::ifstream(p)) << "a mode-000 file opened with permission checks on";
  try {
    (void)read_trace_file(p, TraceOptions{});
    FAIL() << "an unreadable file did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ermission denied"), std::string::npos) << e.what();
  }
}

TEST(ReplayTrace, OpenFailureSaysWhy) {
  // Runs as root too: no permission bit makes a path under a file openable.
  const test::ScratchDir dir("kvbm-trace-notdir");
  std::ofstream(dir.path() / "file") << "x\n";
  try {
    (void)read_trace_file(dir.path() / "file" / "trace.jsonl", TraceOptions{});
    FAIL() << "a path under a regular file did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
}

TEST(ReplayTrace, ShippedTraceHasTheDocumentedShape) {
  const std::filesystem::path p = KVBM_SOURCE_DIR "/examples/data/conversation_trace.jsonl";
  if (!std::filesystem::exists(p)) KVBM_SKIP_OR_FAIL("shipped trace missing: " + p.string());
  const Trace t = read_trace_file(p, TraceOptions{});
  EXPECT_EQ(t.error_count, 0u);
  EXPECT_EQ(t.requests.size(), 12'031u);
  EXPECT_EQ(t.blocks, 288'500u);
  EXPECT_EQ(unique_blocks(t), 182'790u);
}

}  // namespace trace_test
}  // namespace kvbm::replay
