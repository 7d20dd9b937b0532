#!/usr/bin/env python3
"""benchmarks/compare.py against the real benchmark binaries of this build: each comparison it
names still exists in its binary, and a run writes one row per comparison with a ratio per round.

    KVBM_BUILD_DIR=build/release python3 tests/tools/compare_test.py
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(ROOT, "benchmarks", "compare.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import comparisons  # noqa: E402


def cases_of(build, binary):
    out = subprocess.run([os.path.join(build, "benchmarks", binary), "--benchmark_list_tests"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def main():
    build = os.environ["KVBM_BUILD_DIR"]
    comparisons.check_names()
    # Every Google Benchmark case a comparison names matches exactly one case of its binary.
    listed = {}
    for c in comparisons.all_comparisons():
        for m in (c.kvbm, c.baseline):
            if not isinstance(m, comparisons.GBench):
                continue
            if not os.path.exists(os.path.join(build, "benchmarks", m.binary)):
                continue  # remote_bench without hiredis, for one
            names = listed.setdefault(m.binary, cases_of(build, m.binary))
            hits = [n for n in names if re.match(m.case, n)]
            assert len(hits) == 1, f"{c.name}: {m.binary} {m.case!r} matches {hits}"
    # A run of two quick comparisons: a row each, medians within their ranges.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        subprocess.run([sys.executable, COMPARE, "--build", build, "--rounds", "2",
                        "--only", "match-active,hashing-16", "--json", out],
                       check=True, capture_output=True, text=True)
        rows = json.load(open(out))["rows"]
    assert [r["name"] for r in rows] == ["match-active", "hashing-16"], rows
    for r in rows:
        assert r["rounds"] == 2 and r["ratio"] > 0, r
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"], r
        assert r["verdict"].startswith(("<= 3", ">= 0.9")), r
    print(f"compare.py: {sum(len(v) for v in listed.values())} cases listed, 2 comparisons run")


if __name__ == "__main__":
    main()
