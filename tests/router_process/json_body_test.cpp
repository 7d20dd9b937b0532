// tests/router_process/json_body_test.cpp: tools/router/json_body.h, the checks
// kvbm-router runs on a body's raw bytes before its JSON parser sees them.
// Their property: the depth scan never counts fewer levels than the parser
// nests (strings full of brackets, quotes and escapes must not fool it), and
// the UTF-8 check accepts exactly what the parser accepts in a string. Both
// are tried adversarially: seeded random values whose strings are made of the
// characters that matter, and every 1-, 2- and 3-byte sequence.

#include "router/json_body.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvbm::router_process {
namespace json_body_test {

using nlohmann::json;

std::size_t depth_of(const json& v) {
  if (!v.is_array() && !v.is_object()) return 0;
  std::size_t d = 0;
  for (const auto& e : v) d = std::max(d, depth_of(e));
  return d + 1;
}

json random_value(std::mt19937_64& rng, int budget) {
  static const char* const kPieces[] = {"[",       "]", "{",        "}",  "\"",
                                        "\\",      "a", "\xc3\xa9", "\n", "\xf0\x9f\x98\x80",
                                        "\\u005b", ":", ","};
  const auto pick = [&](std::uint64_t n) { return rng() % n; };
  const std::uint64_t kind = budget <= 0 ? 3 + pick(2) : pick(5);
  if (kind == 0 || kind == 1) {  // an array or an object
    json v = kind == 0 ? json::array() : json::object();
    for (std::uint64_t i = 0, n = pick(4); i < n; ++i) {
      json e = random_value(rng, budget - 1 - static_cast<int>(pick(3)));
      if (kind == 0) {
        v.push_back(std::move(e));
      } else {
        v[std::string(kPieces[pick(std::size(kPieces))]) + std::to_string(i)] = std::move(e);
      }
    }
    return v;
  }
  if (kind == 3) {
    std::string s;
    for (std::uint64_t i = 0, n = pick(8); i < n; ++i) s += kPieces[pick(std::size(kPieces))];
    return s;
  }
  return kind == 2 ? json(static_cast<std::int64_t>(rng())) : json(nullptr);
}

TEST(JsonBody, TheDepthScanCountsExactlyTheParsersNesting) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::size_t deepest = 0;
  for (int i = 0; i < 3000; ++i) {
    const json v = random_value(rng, 12);
    const std::size_t d = depth_of(v);
    deepest = std::max(deepest, d);
    for (const std::string& text : {v.dump(), v.dump(2), v.dump(-1, ' ', true)}) {
      ASSERT_EQ(json_text_error(text, d), "") << text;
      if (d > 0) {
        EXPECT_NE(json_text_error(text, d - 1).find("over " + std::to_string(d - 1) + " deep"),
                  std::string::npos)
            << text;
      }
    }
  }
  EXPECT_GE(deepest, 6u);  // the values were not all flat
}

// A string literal holding `bytes` (none of them '"', '\\' or a control
// character): the parser accepts it exactly when the bytes are UTF-8.
void expect_same_verdict(const std::string& bytes) {
  const std::string literal = "\"" + bytes + "\"";
  const bool parser = json::accept(literal);
  const std::string scan = json_text_error(literal, 0);  // in a string: brackets do not count
  ASSERT_EQ(scan.empty(), parser) << ::testing::PrintToString(bytes) << " " << scan;
  if (!parser) {
    ASSERT_NE(scan.find("not UTF-8"), std::string::npos) << scan;
  }
}

// Every sequence of one and two bytes, and of three bytes with a non-ASCII lead; at
// KVBM_STRESS_SCALE < 1 (the sanitizer stages, where the parser is 15x slower) that fraction
// of the three-byte ones, spread over every lead and second byte (the release stage checks them
// all).
TEST(JsonBody, TheUtf8CheckAgreesWithTheParserOnEverySequenceUpToThreeBytes) {
  const auto ok = [](int b) { return b != '"' && b != '\\' && b >= 0x20; };
  const int every = std::max(1, static_cast<int>(1.0 / kvbm::test::stress_scale() + 0.5));
  for (int a = 0; a < 256; ++a) {
    if (!ok(a)) continue;
    expect_same_verdict(std::string(1, char(a)));
    for (int b = 0; b < 256; ++b) {
      if (!ok(b)) continue;
      expect_same_verdict({char(a), char(b)});
      if (a < 0xC0) continue;  // an ASCII or continuation lead: the 2-byte verdict says it all
      for (int c = (a + b) % every; c < 256; c += every) {
        if (ok(c)) expect_same_verdict({char(a), char(b), char(c)});
      }
    }
  }
  std::mt19937_64 rng(7);
  const auto fours = static_cast<int>(kvbm::test::scaled(200000, 1000));
  for (int i = 0; i < fours; ++i) {  // 4-byte sequences, leads 0xF0..0xF7, around the edges
    std::string s{char(0xF0 + rng() % 8), char(0x70 + rng() % 0x60), char(0x70 + rng() % 0x60),
                  char(0x70 + rng() % 0x60)};
    if (s.find_first_of("\"\\") == std::string::npos) expect_same_verdict(s);
  }
}

TEST(JsonBody, DescribeQuotesTheTypeAndAtMost64Bytes) {
  EXPECT_EQ(describe(json(-2)), "-2 (number)");
  EXPECT_EQ(describe(json("x1")), "\"x1\" (string)");
  EXPECT_EQ(describe(json::parse(R"({"k": [1, null]})")), R"({"k":[1,null]} (object))");
  EXPECT_EQ(describe(json(std::string(100, 'y'))), "\"" + std::string(63, 'y') + "... (string)");
  json deep = json::array();
  for (int i = 0; i < 50000; ++i) {  // built without parsing, moved (a copy would recurse)
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(describe(deep), std::string(64, '[') + "... (array)");
  EXPECT_EQ(describe(json("\xff")), "\"\\ufffd\" (string)");  // never throws on bad bytes
}

}  // namespace json_body_test
}  // namespace kvbm::router_process
