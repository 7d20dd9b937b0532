#!/usr/bin/env python3
"""Fails on a function body longer than the house limit: 80 lines in the library (include/,
src/, cuda/), 120 in tools/.

A body's length is counted as clang-tidy's readability-function-size counts it: the line of its
closing brace minus the line of its opening brace. Lambdas and local classes count toward the
function they are written in. The scanner reads the clang-formatted sources without a compiler:
it drops comments, string and character literals and preprocessor lines, then follows the
braces. At namespace or class scope a '{' opens

  - a namespace or linkage block (namespace ..., extern "C"),
  - a class, struct, union or enum body,
  - an initializer (after '=', or right after a name: `int x_{0}`, a member init `b_{b}`),
  - otherwise a function body (after ')', a qualifier, a trailing return type or a requires
    clause), which is measured to its matching '}'.

Covers headers (every one, not only those a source includes) and CUDA sources, which
clang-tidy does not see here.

    python3 scripts/check_function_length.py               check the tree
    python3 scripts/check_function_length.py --self-test   check the scanner on known cases
    python3 scripts/check_function_length.py --limit N FILE...   check files against N lines
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

LIMITS = (("include/", 80), ("src/", 80), ("cuda/", 80), ("tools/", 120))
SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")

TOKEN = re.compile(r"""
    (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\()   # raw string opening
  | (?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")              # string literal
  | (?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')              # character literal
  | (?P<num>\.?\d(?:[\w.]|'(?=\w)|[eEpP][+-])*)            # number (with ' separators)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>->|::|[{}()\[\];:=<>,&*~!?.+\-/%^|])
  | (?P<nl>\n)
  | (?P<space>[ \t\r\f\v]+)
  | (?P<other>.)
""", re.VERBOSE)

QUALIFIERS = {"const", "noexcept", "override", "final", "mutable", "volatile", "&", "&&", "try",
              ")", "}"}
CLASS_KEYS = {"class", "struct", "union", "enum"}
ATTRIBUTES = {"__launch_bounds__", "alignas", "__attribute__", "__declspec", "(", ")"}


def strip_comments_and_preprocessor(text: str) -> str:
    """Comments become spaces (newlines kept); preprocessor lines (with continuations) become
    empty lines. String literals are left for the tokenizer."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
            continue
        m = TOKEN.match(text, i)
        if m and m.lastgroup == "raw":
            end = text.find(")" + m.group("delim") + '"', m.end())
            end = n if end < 0 else end + len(m.group("delim")) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
            continue
        if m and m.lastgroup in ("str", "chr", "num", "id"):
            out.append(m.group(0))
            i = m.end()
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        i += 1
    return "".join(out)


def tokens(text: str) -> list[tuple[str, int]]:
    """(token, line) pairs of the code: literals collapse to a placeholder."""
    out = []
    line = 1
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            line += 1
        elif kind in ("str", "chr"):
            out.append(("<lit>", line))
        elif kind != "space":
            out.append((m.group(0), line))
    return out


def strip_template_prefix(head: list[str]) -> list[str]:
    """The head without leading `template <...>` groups, attributes and export/friend."""
    while head:
        if head[0] == "template" and len(head) > 1 and head[1] == "<":
            depth, parens, i = 0, 0, 1
            while i < len(head):
                parens += {"(": 1, ")": -1}.get(head[i], 0)
                if parens == 0:
                    depth += {"<": 1, ">": -1}.get(head[i], 0)
                i += 1
                if depth <= 0:
                    break
            head = head[i:]
        elif head[0] == "[" and len(head) > 1 and head[1] == "[":
            depth, i = 0, 0
            while i < len(head):
                depth += {"[": 1, "]": -1}.get(head[i], 0)
                i += 1
                if depth == 0:
                    break
            head = head[i:]
        elif head[0] in ("export", "friend", "typedef"):
            head = head[1:]
        else:
            break
    return head


def at_depth_zero(head: list[str]) -> list[str]:
    """The tokens of head outside any parentheses or brackets."""
    out, depth = [], 0
    for t in head:
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        elif depth == 0:
            out.append(t)
    return out


def classify(head: list[str]) -> str:
    """What a '{' opens at namespace or class scope, given the tokens since the last statement:
    'namespace', 'class', 'init' or 'function'."""
    head = strip_template_prefix(head)
    if not head:
        return "init"  # a bare block at namespace scope: none in C++, but be safe
    if head[0] == "namespace" or head[:2] == ["inline", "namespace"]:
        return "namespace"
    if head[0] == "extern" and len(head) == 2 and head[1] == "<lit>":
        return "namespace"
    flat = at_depth_zero(head)
    if "=" in flat and "operator" not in flat:
        return "init"
    if head[0] in CLASS_KEYS and "(" not in head:
        return "class"
    if head[0] in CLASS_KEYS and head[-1] not in QUALIFIERS:
        return "class"  # class alignas(64) Foo {
    if "->" in flat or "requires" in flat:
        return "function"
    last = head[-1]
    if last in QUALIFIERS:
        return "function"
    return "init"  # `Type name{...}`, a member initializer `b_{b}`, `std::array<int, 2>{...}`


def function_name(head: list[str]) -> str:
    """A readable name for the report: the qualified name before the first '(' at depth 0."""
    head = strip_template_prefix(head)
    opens = [k for k, t in enumerate(head) if t == "(" and k > 0 and head[k - 1] not in ATTRIBUTES]
    if not opens:
        return " ".join(head[-3:])
    j = opens[0] - 1
    name = head[j]
    if j > 0 and head[j - 1] == "~":
        name, j = "~" + name, j - 1
    while j >= 2 and head[j - 1] == "::":
        name, j = head[j - 2] + "::" + name, j - 2
    return name


def long_functions(text: str, limit: int) -> list[tuple[int, int, str]]:
    """(opening line, length, name) of each function body longer than limit."""
    toks = tokens(strip_comments_and_preprocessor(text))
    found = []
    scopes = []  # 'namespace', 'class' or 'init' (at namespace or class scope)
    head: list[str] = []
    i = 0
    while i < len(toks):
        t, line = toks[i]
        if scopes and scopes[-1] == "init":
            if t == "{":
                scopes.append("init")
            elif t == "}":
                scopes.pop()
                if not scopes or scopes[-1] != "init":
                    head.append("}")  # `: a_{a} {`: the body comes after an initializer
            i += 1
            continue
        if t == ";":
            head = []
        elif t == ":" and head and head[-1] in ("public", "private", "protected"):
            head = []
        elif t == "}":
            if scopes:
                scopes.pop()
            head = []
        elif t == "{":
            kind = classify(head)
            if kind == "function":
                depth, j = 1, i + 1
                while j < len(toks) and depth:
                    depth += {"{": 1, "}": -1}.get(toks[j][0], 0)
                    j += 1
                end_line = toks[j - 1][1]
                if end_line - line > limit:
                    found.append((line, end_line - line, function_name(head)))
                i = j
                head = []
                continue
            scopes.append(kind)
            if kind != "init":
                head = []
        else:
            head.append(t)
        i += 1
    return found


def limit_for(path: str) -> int | None:
    for prefix, limit in LIMITS:
        if path.startswith(prefix):
            return limit
    return None


def check_tree(root: str) -> int:
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard", "--", *(p for p, _ in LIMITS)],
                         check=True, capture_output=True, text=True).stdout
    count = 0
    for rel in sorted(set(out.splitlines())):
        limit = limit_for(rel)
        if limit is None or not rel.endswith(SUFFIXES):
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for line, length, name in long_functions(text, limit):
            print(f"{rel}:{line}: {name} is {length} lines, over {limit}: split it")
            count += 1
    if count:
        print(f"check_function_length: {count} function(s) over the limit", file=sys.stderr)
    return 1 if count else 0


SELF_TEST = r'''
#define KVBM_MACRO(x) { if (x) { return; } }
namespace kvbm::detail {
namespace {
template <class T, typename U = std::enable_if_t<(1 > 0)>>
struct Widget final : Base<T> {
  int a_{0};
  std::array<int, 2> b_ = {1, 2};
  static constexpr auto kText = R"(unbalanced { in a raw string)";
  Widget(int a, int b) : a_(a), b_{b, '{'} {
LONG_BODY
  }
  void short_one() const noexcept { return; }
  auto trailing() -> std::vector<int> {
LONG_BODY
  }
  enum class Kind : std::uint8_t { kA, kB };
  public:
  template <typename V>
  void constrained(V v) requires std::integral<V> {
LONG_BODY
  }
};
}  // namespace
extern "C" {
int c_function(void) {
  const char* s = "}";  // a brace in a string } and a comment {
  /* { */
LONG_BODY
}
}
constexpr auto kTable = [] { std::array<int, 3> t{}; return t; }();
auto counted = std::size_t{1'000'000};
__global__ void kernel(const float* __restrict__ in) {
LONG_BODY
}
int exactly_at_the_limit() {
AT_LIMIT_BODY
}
}  // namespace kvbm::detail
'''


def self_test() -> int:
    body = "\n".join("  x += %d;" % i for i in range(90))
    at_limit = "\n".join("  x += %d;" % i for i in range(9))  # 10 lines from '{' to '}'
    text = SELF_TEST.replace("LONG_BODY", body).replace("AT_LIMIT_BODY", at_limit)
    found = [name for _, _, name in long_functions(text, 80)]
    want = ["Widget", "trailing", "constrained", "c_function", "kernel"]
    short = [name for _, _, name in long_functions(text, 9)]
    failures = []
    if found != want:
        failures.append(f"over 80: found {found}, want {want}")
    if "exactly_at_the_limit" not in short or "short_one" in short:
        failures.append(f"over 9: found {short}: want exactly_at_the_limit, not short_one")
    if "exactly_at_the_limit" in [name for _, _, name in long_functions(text, 10)]:
        failures.append("a body of 10 lines counted over a limit of 10")
    for f in failures:
        print(f"check_function_length self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 3 and argv[1] == "--limit":
        limit, count = int(argv[2]), 0
        for path in argv[3:]:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line, length, name in long_functions(f.read(), limit):
                    print(f"{path}:{line}: {name} is {length} lines, over {limit}")
                    count += 1
        return 1 if count else 0
    root = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                           "--show-toplevel"], check=True, capture_output=True,
                          text=True).stdout.strip()
    return check_tree(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
