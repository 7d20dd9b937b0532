#!/usr/bin/env python3
"""benchmarks/compare.py against the real benchmark binaries of this build: each comparison it
names still exists in its binary (Google Benchmark cases, kvbm-replay's options, the Python
benchmarks' figures), the Redis Cluster it starts serves and goes away, a run writes one row
per comparison with a ratio per round, each round's ratio pairs that round's two figures, and
a comparison against another build (--baseline-build, as --baseline-commit uses) runs this
build's measure on both sides.

    KVBM_BUILD_DIR=build/release python3 tests/tools/compare_test.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(ROOT, "benchmarks", "compare.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import compare  # noqa: E402
import comparisons  # noqa: E402
import redis_cluster  # noqa: E402


def cases_of(build, binary):
    out = subprocess.run([os.path.join(build, "benchmarks", binary), "--benchmark_list_tests"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def measures(kind):
    for c in comparisons.all_comparisons():
        for m in (c.kvbm, c.baseline):
            if isinstance(m, kind):
                yield c, m


def check_gbench_cases(build):
    """Every Google Benchmark case a comparison names matches exactly one case of its binary."""
    listed = {}
    for c, m in measures(comparisons.GBench):
        if not os.path.exists(os.path.join(build, "benchmarks", m.binary)):
            continue  # remote_bench without hiredis, for one
        names = listed.setdefault(m.binary, cases_of(build, m.binary))
        hits = [n for n in names if re.match(m.case, n)]
        assert len(hits) == 1, f"{c.name}: {m.binary} {m.case!r} matches {hits}"
    return sum(len(v) for v in listed.values())


def check_replay_options(build):
    """Every kvbm-replay option a comparison passes is one kvbm-replay --help lists."""
    replay = os.path.join(build, "tools", "replay", "kvbm-replay")
    if not os.path.exists(replay):
        return
    usage = subprocess.run([replay, "--help"], capture_output=True, text=True).stdout
    for c, m in measures(comparisons.Replay):
        for opt in [a for a in m.args if a.startswith("--")] + ["--metadata-only", "--json"]:
            assert re.search(rf"{opt}\b", usage), f"{c.name}: kvbm-replay has no {opt}"


def check_script_figures():
    """Every figure read from a Python benchmark's --json is one the script writes a round
    (its source names the key), and the script takes --rounds and --json."""
    for c, m in measures(comparisons.ScriptFigure):
        src = open(os.path.join(ROOT, "benchmarks", "python", m.script)).read()
        for opt in ("--rounds", "--json", *[a for a in m.args if a.startswith("--")]):
            assert f'add_argument("{opt}"' in src, f"{c.name}: {m.script} takes no {opt}"
        assert f'"{m.key}"' in src and '"per_round"' in src, f"{c.name}: {m.script} {m.key}"


def check_cluster():
    """The cluster a Context starts serves every slot (a key set through one primary is read
    back through another, redirected), and its servers are gone once the Context ends."""
    if not all(shutil.which(t) for t in ("redis-server", "redis-cli", "redis-benchmark")):
        return False
    with comparisons.Context("unused") as ctx:
        cluster = ctx.cluster()
        ports = list(cluster.ports)
        assert len(ports) == 3 and cluster.url().startswith("redis+cluster://127.0.0.1:")
        for i, key in enumerate(("a", "b", "c", "d", "e", "f")):
            set_port, get_port = ports[i % 3], ports[(i + 1) % 3]
            out = subprocess.run(["redis-cli", "-c", "-p", str(set_port), "set", key, key],
                                 capture_output=True, text=True).stdout
            assert out.strip() == "OK", out
            out = subprocess.run(["redis-cli", "-c", "-p", str(get_port), "get", key],
                                 capture_output=True, text=True).stdout
            assert out.strip() == key, out
        owners = {p: redis_cluster.cli(p, "dbsize").strip() for p in ports}
        assert all(int(n) > 0 for n in owners.values()), owners  # the keys spread over all 3
    for p in ports:
        r = subprocess.run(["redis-cli", "-p", str(p), "ping"], capture_output=True, text=True)
        assert r.stdout.strip() != "PONG", f"redis-server on {p} outlived the Context"
    return True


def check_round_ratios():
    """A round's ratio is its own two figures' (not a median of one side over the other's),
    and figures that cannot give a ratio are refused."""
    ratios, median, low, high = compare.round_ratios([2.0, 9.0, 3.0], [1.0, 3.0, 6.0])
    assert ratios == [2.0, 3.0, 0.5] and (median, low, high) == (2.0, 0.5, 3.0), ratios
    for kvbm, base in (([1.0, 2.0], [1.0]), ([], []), ([1.0], [0.0])):
        try:
            compare.round_ratios(kvbm, base)
        except ValueError:
            continue
        raise AssertionError(f"round_ratios({kvbm}, {base}) gave a ratio")


def check_against_build(build):
    """--baseline-build: each selected comparison becomes this build / that build, a measure
    of the same binary on both sides (here the same build: the ratio only measures noise);
    a comparison that runs no binary of the tree is refused with what to do."""
    if not os.path.exists(os.path.join(build, "tools", "replay", "kvbm-replay")):
        return False
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        subprocess.run([sys.executable, COMPARE, "--build", build, "--rounds", "2", "--only",
                        "replay-metadata", "--baseline-build", build, "--json", out],
                       check=True, capture_output=True, text=True)
        rows = json.load(open(out))["rows"]
    assert [r["name"] for r in rows] == ["replay-metadata"], rows
    r = rows[0]
    assert r["baseline_what"] == f"{build}: kvbm-replay --metadata-only", r
    assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"] and r["ratio"] > 0, r
    refused = subprocess.run([sys.executable, COMPARE, "--build", build, "--only", "sglang-set",
                              "--baseline-build", build], capture_output=True, text=True)
    assert refused.returncode != 0 and "leave them out with --only" in refused.stderr, refused
    return True


def main():
    build = os.environ["KVBM_BUILD_DIR"]
    comparisons.check_names()
    cases = check_gbench_cases(build)
    check_replay_options(build)
    check_script_figures()
    check_round_ratios()
    against = check_against_build(build)
    cluster = check_cluster()
    # A run of quick comparisons: a row each, medians within their ranges; on the cluster
    # too where remote_bench is built (the G4 GET of 64 KiB blocks: the cluster's measures
    # start it, run both sides on it, and the Context stops it).
    names = ["match-active", "hashing-16"]
    if cluster and os.path.exists(os.path.join(build, "benchmarks", "remote_bench")):
        names.append("remote-cluster-get-64k")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        subprocess.run([sys.executable, COMPARE, "--build", build, "--rounds", "2",
                        "--only", ",".join(names), "--json", out],
                       check=True, capture_output=True, text=True)
        rows = json.load(open(out))["rows"]
    assert [r["name"] for r in rows] == names, rows
    for r in rows:
        assert r["rounds"] == 2 and r["ratio"] > 0, r
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"], r
        assert r["verdict"].startswith(("<= 3", ">= 0.9", ">= 0.8")), r
    print(f"compare.py: {cases} cases listed, {len(rows)} comparisons run, cluster "
          f"{'checked' if cluster else 'not checked (no redis-server)'}, against another build "
          f"{'checked' if against else 'not checked (no kvbm-replay)'}")

if __name__ == "__main__":
    main()
