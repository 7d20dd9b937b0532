#!/usr/bin/env python3
"""Checks that README.md's C++ snippets are the [readme] regions of real programs.

Every ```cpp block in README.md must follow a line

    <!-- snippet: examples/readme/<name>.cpp -->

and equal that file's regions: the lines between `// [readme]` and `// [/readme]`, each region
dedented, regions joined by one blank line, in file order. The programs are built and run by
ctest (examples.readme.<name>), so a snippet that compiles and runs there cannot drift from
the README.

    python3 scripts/readme_snippets.py          check; exit 1 and show a diff on any difference
    python3 scripts/readme_snippets.py --fix    rewrite README.md's blocks from the programs
"""

import difflib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- snippet: (\S+) -->\s*$")
BEGIN = re.compile(r"^\s*// \[readme\]\s*$")
END = re.compile(r"^\s*// \[/readme\]\s*$")


def regions(path: pathlib.Path) -> list[str]:
    """Returns the snippet of `path`: its [readme] regions, dedented and joined."""
    parts, current = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if BEGIN.match(line):
            if current is not None:
                sys.exit(f"{path}:{number}: [readme] inside a region")
            current = []
        elif END.match(line):
            if current is None:
                sys.exit(f"{path}:{number}: [/readme] without [readme]")
            parts.append(current)
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        sys.exit(f"{path}: a [readme] region is not closed")
    if not parts:
        sys.exit(f"{path}: no [readme] region")
    out = []
    for part in parts:
        indent = min((len(l) - len(l.lstrip()) for l in part if l.strip()), default=0)
        if out:
            out.append("")
        out.extend(l[indent:] if l.strip() else "" for l in part)
    return out


def main() -> int:
    fix = sys.argv[1:] == ["--fix"]
    if sys.argv[1:] and not fix:
        print(__doc__, file=sys.stderr)
        return 2
    lines = README.read_text().splitlines()
    out, failed, used, i = [], False, set(), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.strip() != "```cpp":
            continue
        start = i
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        block = lines[start:i]
        marker = MARKER.match(lines[start - 2]) if start >= 2 else None
        if marker is None:
            print(f"README.md:{start}: a C++ block without a <!-- snippet: examples/... --> "
                  "line before it", file=sys.stderr)
            failed = True
            out.extend(block)
            continue
        source = ROOT / marker.group(1)
        if not source.is_file():
            print(f"README.md:{start - 1}: {marker.group(1)} does not exist", file=sys.stderr)
            failed = True
            out.extend(block)
            continue
        used.add(source.resolve())
        want = regions(source)
        if block != want and not fix:
            print(f"README.md:{start + 1}: the block differs from {marker.group(1)}'s [readme] "
                  "regions (run scripts/readme_snippets.py --fix):", file=sys.stderr)
            sys.stderr.writelines(difflib.unified_diff(
                [l + "\n" for l in block], [l + "\n" for l in want], "README.md", marker.group(1)))
            failed = True
        out.extend(want if fix else block)
    for source in sorted((ROOT / "examples" / "readme").glob("*.cpp")):
        if source.resolve() not in used:
            print(f"{source.relative_to(ROOT)}: not shown in README.md (add a snippet marker)",
                  file=sys.stderr)
            failed = True
    if fix:
        README.write_text("\n".join(out) + "\n")
    if not failed:
        print(f"README.md: {len(used)} snippet(s) match examples/readme/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
