#include "router/json_body.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace kvbm::router_process {
namespace {

using nlohmann::json;

constexpr std::size_t kMessageBytes = 200;  // of a parser's message

// Returns the length of the UTF-8 sequence at s[i], or 0 when it is not one
// (RFC 3629, table 3-7 of the Unicode standard).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong form
    if (c == 0xED) hi = 0x9F;  // no surrogate
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong form
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (at(1) < lo || at(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(k) < 0x80 || at(k) > 0xBF) return 0;
  }
  return n;
}

// Appends a scalar's (or a key's) JSON text to `out`, unless `out` is over kExcerptBytes.
void append_leaf(const json& v, std::string& out) {
  if (out.size() > kExcerptBytes) return;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    out += json(s.substr(0, kExcerptBytes + 1)).dump(-1, ' ', true, json::error_handler_t::replace);
  } else {
    out += v.dump(-1, ' ', true, json::error_handler_t::replace);  // a scalar: short
  }
}

// Appends v's JSON text to `out` until `out` is over kExcerptBytes, then closes what it opened.
// A loop over an explicit stack, not a recursion: a worker thread's stack can be small
// (civetweb's, under ASan a few dozen frames), and each container opened appends a byte first,
// so the stack holds at most kExcerptBytes + 1 entries whatever the value's depth.
void append_excerpt(const json& root, std::string& out) {
  struct Open {
    const json* v;
    json::const_iterator it;
    bool first;
  };
  std::vector<Open> stack;
  const auto enter = [&](const json& v) {
    if (out.size() > kExcerptBytes) return;
    if (v.is_array() || v.is_object()) {
      out += v.is_array() ? '[' : '{';
      stack.push_back({&v, v.cbegin(), true});
    } else {
      append_leaf(v, out);
    }
  };
  enter(root);
  while (!stack.empty()) {
    Open& top = stack.back();
    if (top.it == top.v->cend() || out.size() > kExcerptBytes) {
      out += top.v->is_array() ? ']' : '}';
      stack.pop_back();
      continue;
    }
    if (!top.first) out += ',';
    top.first = false;
    const auto it = top.it++;
    if (top.v->is_object()) {
      append_leaf(json(it.key().substr(0, kExcerptBytes + 1)), out);
      out += ':';
    }
    enter(*it);  // may grow the stack: `top` is not used after it
  }
}

}  // namespace

std::string json_text_error(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;  // the previous byte was a backslash in a string
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {  // never structural: only check it
      const std::size_t n = utf8_length(text, i);
      if (n == 0) {
        return fmt::format("the body is not UTF-8 (byte {} is 0x{:02x}); send UTF-8 JSON", i,
                           static_cast<unsigned char>(c));
      }
      i += n;
      escaped = false;
      continue;
    }
    ++i;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return fmt::format(
            "the body nests arrays and objects over {} deep (byte {}, "
            "--max-json-depth); send a flat object",
            max_depth, i - 1);
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

json parse_body(std::string_view body, std::string_view shape, std::size_t max_depth) {
  if (const std::string e = json_text_error(body, max_depth); !e.empty()) {
    throw ClientError{400, fmt::format("{}: {}", e, shape)};
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error; out_of_range 406 for 1e400
    // e.what() ends with the token read ("last read: '...'"): left out, it may be long.
    const std::string_view what = e.what();
    const std::string_view why = what.substr(0, std::min(what.find("; last read"), kMessageBytes));
    throw ClientError{400, fmt::format("the body is not JSON ({}); send {}", why, shape)};
  }
  if (!j.is_object()) {
    throw ClientError{
        400, fmt::format("the body must be a JSON object, not {}: send {}", describe(j), shape)};
  }
  return j;
}

std::string describe(const json& v) {
  std::string text;
  append_excerpt(v, text);
  if (text.size() > kExcerptBytes) text = text.substr(0, kExcerptBytes) + "...";
  return fmt::format("{} ({})", text, v.type_name());
}

std::string string_field(const json& j, const char* name, std::string_view shape, bool required) {
  const auto it = j.find(name);
  if (it == j.end()) {
    if (!required) return {};
    throw ClientError{400, fmt::format("\"{}\" is missing; send {}", name, shape)};
  }
  if (!it->is_string()) {
    throw ClientError{400, fmt::format("\"{}\" must be a string, not {}", name, describe(*it))};
  }
  return it->get<std::string>();
}

std::string dump_reply(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvbm::router_process
