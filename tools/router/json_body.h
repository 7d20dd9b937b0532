// router/json_body.h: reading a request's JSON body safely.
//
// parse_body() takes the body only when it is UTF-8 (RFC 3629: no overlong
// forms, no surrogates), nested at most `max_depth` arrays and objects deep
// (both checked on the raw bytes, before the parser sees them) and a JSON
// object; otherwise it throws ClientError 400 saying which, and where.
// describe() names a value in an error message by its JSON type and at most
// kExcerptBytes of its JSON text: it never writes a whole value, and its
// recursion is bounded by that budget, not by the value's depth.

#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "router/http_request.h"

namespace kvbm::router_process {

/// Returns "" when `text` is UTF-8 nested at most `max_depth` deep, else why not.
[[nodiscard]] std::string json_text_error(std::string_view text, std::size_t max_depth);

/// Parses `body` into a JSON object; throws ClientError 400 whose message
/// ends "send <shape>" when it is not one (see the file comment).
[[nodiscard]] nlohmann::json parse_body(std::string_view body, std::string_view shape,
                                        std::size_t max_depth);

/// Returns `v` for an error message: "<excerpt> (<type>)", e.g. `-2 (number)`,
/// `"x1" (string)`, `[[[[...` cut at kExcerptBytes, then " (array)".
[[nodiscard]] std::string describe(const nlohmann::json& v);

/// Returns the string field `name` of `j` ("" when absent and not `required`).
/// Throws ClientError 400 when it is missing but required, or not a string.
[[nodiscard]] std::string string_field(const nlohmann::json& j, const char* name,
                                       std::string_view shape, bool required);

/// Serialises an answer; bytes that are not UTF-8 become U+FFFD (never throws on them).
[[nodiscard]] std::string dump_reply(const nlohmann::json& j);

}  // namespace kvbm::router_process
