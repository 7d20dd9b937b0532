#!/usr/bin/env python3
"""The skipped tests of one stage of scripts/test.sh, grouped by reason.

    python3 scripts/skip_report.py ctest <ctest --output-junit file>
    python3 scripts/skip_report.py pytest <pytest log, run with -rs>

Prints one line, "skipped: N (<class> n, <class> n)" or "skipped: 0", where a reason's class is
its text before the first ": " (tests/skip_or_fail.h, tests/python/skips.py). Under CI=true it
then prints each skip whose class CI does not allow (skips.ALLOWED_IN_CI: no GPU, ...), one
"<test>: <reason>" a line, and exits 1 when there is one.
"""

import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
from skips import in_ci, skip_allowed_in_ci  # noqa: E402

# pytest -rs: "SKIPPED [3] tests/python/test_x.py:58: <reason>"
PYTEST_SKIP = re.compile(r"^SKIPPED \[(\d+)\] (\S+?):(\d+): (.*)$")


def ctest_skips(path):
    """(test, reason) for each skipped case of a ctest JUnit file; the reason is the line after
    GoogleTest's "<file>:<line>: Skipped", else (a program's SKIP_RETURN_CODE) "skipped by its
    exit code: <its last line of output>"."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is None:
            continue
        text = [line for line in (case.findtext("system-out") or "").splitlines() if line.strip()]
        reason = "skipped by its exit code: " + (text[-1].strip() if text else "no output")
        for i, line in enumerate(text[:-1]):
            if line.endswith(": Skipped"):
                reason = text[i + 1].strip()
                break
        out.append((case.get("name", "?"), reason))
    return out


def pytest_skips(path):
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        m = PYTEST_SKIP.match(line.strip())
        if m:
            out.extend([(f"{m.group(2)}:{m.group(3)}", m.group(4))] * int(m.group(1)))
    return out


def reason_class(reason):
    return reason.split(": ", 1)[0]


def main(argv):
    if len(argv) != 3 or argv[1] not in ("ctest", "pytest"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path = Path(argv[2])
    if not path.exists():
        print(f"skipped: ? ({path} not found)")
        return 1 if in_ci() else 0
    skips = ctest_skips(path) if argv[1] == "ctest" else pytest_skips(path)
    counts = Counter(reason_class(r) for _, r in skips)
    groups = ", ".join(f"{c} {n}" for c, n in counts.most_common())
    print(f"skipped: {len(skips)}" + (f" ({groups})" if groups else ""))
    if not in_ci():
        return 0
    refused = [(t, r) for t, r in skips if not skip_allowed_in_ci(r)]
    for t, r in refused:
        print(f"{t}: {r}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
