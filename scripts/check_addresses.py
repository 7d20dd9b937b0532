#!/usr/bin/env python3
"""Fails on any IP address literal other than loopback in code that runs.

Tests, benchmarks and scripts talk only to this machine: loopback (127.0.0.0/8, ::1), Unix
sockets, or network namespaces they create (docs/building.md, "Loopback only"). Help texts and
docs name hosts (tcp://engine-0:5557), never addresses. This check reads every file git tracks
(and untracked files it does not ignore) under the directories of code that runs and reports
each IPv4 or IPv6 literal that is not loopback:

  - 0.0.0.0 (the unspecified address) passes only where the code binds or listens (the line
    or one of the three above it says bind, bound or listen): it names where a server
    listens, never where a client connects. A bare :: is not checked (C++'s scope operator
    far more often than an address; it names this machine either way).
  - A dotted quad after a version operator (==, >=, <=, ~=, !=: requirements files) is a
    version, not an address.
  - An IPv6 candidate counts when Python's ipaddress parses it and it has two groups
    (fe80::1, 2001:db8::5) or stands alone in quotes or brackets before a port ("::2",
    [::2]:6379); a Python slice (x[::2]) is not an address.

    python3 scripts/check_addresses.py              check the tree (exit 0 clean, 1 findings)
    python3 scripts/check_addresses.py --self-test  plant addresses in a temporary copy of a
                                                    test file and check they are found
    python3 scripts/check_addresses.py FILE...      check these files only

scripts/lint.sh runs both the check and the self-test (no clang needed).
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
import tempfile

# The directories of code that runs (and the CI entry point).
CODE_DIRS = ("tests", "benchmarks", "scripts", "tools", "examples", "fuzz", "src", "include",
             "python", "cuda", "cmake", ".ci")
# Files checked besides those directories: the build and package definitions.
CODE_FILES = ("CMakeLists.txt", "CMakePresets.json", "pyproject.toml")

IPV4 = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3})(?![\w]|\.\w)")
IPV6 = re.compile(r"(?<![\w:.])((?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|"
                  r"(?:\d{1,3}\.){3}\d{1,3})?)(?![\w:])")
VERSION_OPERATOR = re.compile(r"(==|>=|<=|~=|!=)\s*$")
BINDS = re.compile(r"bind|bound|listen", re.IGNORECASE)
BIND_CONTEXT_LINES = 3
BINARY_SUFFIXES = (".png", ".svg", ".gz", ".bin", ".so", ".a", ".o", ".pyc")


def allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address, context: str) -> bool:
    """Loopback always; the unspecified address only where the context (the line and the
    three above it) binds or listens."""
    if address.is_loopback:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        if address.ipv4_mapped.is_loopback:
            return True
    return address.is_unspecified and BINDS.search(context) is not None


def ipv6_counts(text: str, line: str, start: int, end: int) -> bool:
    """An IPv6 candidate is an address when it has two groups or stands alone in quotes or
    brackets before a port (see the module's comment)."""
    groups = [g for g in re.split(r":+", text) if g]
    if len(groups) >= 2:
        return True
    before = line[start - 1] if start > 0 else ""
    after = line[end:end + 2]
    if before in "\"'" and after[:1] == before:
        return True
    return before == "[" and re.match(r"\]:\d", line[end:end + 3]) is not None


def findings_in_line(line: str, context: str) -> list[str]:
    """The non-loopback address literals of one line; context: it and the lines above it."""
    found = []
    for m in IPV4.finditer(line):
        if VERSION_OPERATOR.search(line[:m.start()]):
            continue
        octets = [int(o) for o in m.group(1).split(".")]
        if max(octets) > 255:
            continue  # 999.1.2.3 and such: not an address
        # Built from the numbers: a dotted quad with leading zeros (which ipaddress refuses) is
        # an address too.
        address = ipaddress.IPv4Address(".".join(map(str, octets)))
        if not allowed(address, context):
            found.append(m.group(1))
    for m in IPV6.finditer(line):
        text = m.group(1)
        if text.count(":") < 2 or text.strip(":") == "":
            continue  # a bare "::" is C++'s scope operator far more often than an address
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            continue
        if ipv6_counts(text, line, m.start(1), m.end(1)) and not allowed(address, context):
            found.append(text)
    return found


def check_file(path: str, shown: str) -> list[str]:
    """Findings of one file as 'path:line: address ...' lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except (IsADirectoryError, FileNotFoundError):
        return []
    out = []
    for n, line in enumerate(lines, 1):
        context = "\n".join(lines[max(0, n - 1 - BIND_CONTEXT_LINES):n])
        for address in findings_in_line(line, context):
            out.append(f"{shown}:{n}: {address} is not a loopback address: talk to 127.0.0.1 "
                       "or ::1 (or a Unix socket); in help texts and docs name a host "
                       "(tcp://engine-0:5557)")
    return out


def tracked_files(root: str) -> list[str]:
    """Files of the code directories that git tracks or would track."""
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard", "--", *CODE_DIRS, *CODE_FILES],
                         check=True, capture_output=True, text=True).stdout
    this = os.path.relpath(os.path.abspath(__file__), root)  # its self-test plants addresses
    return sorted({p for p in out.splitlines()
                   if p and p != this and not p.endswith(BINARY_SUFFIXES)})


def check_tree(root: str) -> int:
    findings = []
    for rel in tracked_files(root):
        findings += check_file(os.path.join(root, rel), rel)
    for f in findings:
        print(f)
    if findings:
        print(f"check_addresses: {len(findings)} non-loopback address literal(s)",
              file=sys.stderr)
        return 1
    return 0


def self_test(root: str) -> int:
    """Plants addresses in a temporary copy of a test file: each must be found, and the
    loopback, bind and version lines must not."""
    source = os.path.join(root, "tests", "engines", "test_vllm_engine.py")
    with open(source, encoding="utf-8") as f:
        clean = f.read()
    # The planted addresses are assembled here, so that this file holds no address literal of its
    # own for a scan of the tree to report.
    private = ".".join(["10", "255", "255", "1"])
    lan = ".".join(["192", "168", "1", "20"])
    zeros = ".".join(["010", "000", "000", "001"])
    planted = {
        f'URL = "redis://{private}:6379"': private,
        f'ENDPOINT = "tcp://{lan}:5557"': lan,
        'PEER = "[fe80::1]:6379"': "fe80::1",
        'ALONE = "::2"': "::2",
        'CONNECT = ("0.0.0.0", 80)  # connect': "0.0.0.0",
        f'ZEROS = "redis://{zeros}:6379"': zeros,
    }
    passes = [
        'OK = "redis://127.0.0.2:6379"', 'OK6 = "redis://[::1]:6379"',
        'sock.bind(("0.0.0.0", 0))', "numpy==1.26.4.1", "half = x[::2]",
    ]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "test_vllm_engine.py")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(clean)
        if check_file(copy, "copy"):
            failures.append("the unchanged test file has findings")
        for line, address in planted.items():
            with open(copy, "w", encoding="utf-8") as f:
                f.write(clean + "\n" + line + "\n")
            found = check_file(copy, "copy")
            if len(found) != 1 or f": {address} is not" not in found[0]:
                failures.append(f"planted {line!r}: expected {address}, found {found}")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(clean + "\n" + "\n".join(passes) + "\n")
        found = check_file(copy, "copy")
        if found:
            failures.append(f"allowed lines reported: {found}")
    for f in failures:
        print(f"check_addresses self-test: {f}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    root = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                           "--show-toplevel"], check=True, capture_output=True,
                          text=True).stdout.strip()
    if argv[1:] == ["--self-test"]:
        return self_test(root)
    if len(argv) > 1:
        findings = [f for p in argv[1:] for f in check_file(p, p)]
        for f in findings:
            print(f)
        return 1 if findings else 0
    return check_tree(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
