#!/usr/bin/env python3
"""The one way kvbm's figures are measured: interleaved rounds of kvbm and its baseline.

    python3 benchmarks/compare.py                      # every comparison, 5 rounds
    python3 benchmarks/compare.py --only hashing,match --rounds 9
    python3 benchmarks/compare.py --list
    python3 benchmarks/compare.py --markdown out.md --json out.json
    python3 benchmarks/compare.py --only replay-metadata --baseline-commit main

Each comparison (benchmarks/comparisons.py) names a kvbm measure and its baseline: two Google
Benchmark cases of one binary (block manager, hashing, host engine beside memcpy at equal threads,
recovery beside bare pread, persistent beside scratch writes, offload pipeline and onboarding
beside the raw engines, router index and router process beside bare maps and a bare HTTP round
trip), kvbm's disk engine and fio at the same engine, queue depth and I/O size, the remote tier and
redis-benchmark on one redis-server or on a 3-primary Redis Cluster (both started on loopback by
the script), kvbm-replay runs (write-through beside on-eviction), and the Python benchmarks of
benchmarks/python/ (SGLang's HiCacheFile beside KvbmStorage, vLLM's fs tier beside KvbmTier: one
run of the script a round, which alternates the two sides itself; skipped without
build/engines-venv or KVBM_ENGINES_VENV). A round runs kvbm once, then the baseline once (A B A B
...), each in its own process, reads the load average before each, and keeps the ratio of the two.
The report gives, per comparison, the median of each side, the median ratio with its min..max over
the rounds, the load average over the rounds, and the target judged on the median ratio ("range
crosses" where one round falls on the other side of it); an absolute mark on kvbm's own median
(e.g. recovery <= 2000 ms) is judged beside it. The machine is shared: only ratios within one round
compare.

How long --rounds 5 takes, as measured with --rounds 2 on the 2 shared cores at load 10-17
(quieter, less): hashing-*, match-*, lifecycle-*, router-apply/-overlaps-*/-route and host-* about
20-30 s each; router-process, replay-write-through and durability-fio about 30-50 s each;
offload-*, onboard-* and durability-8/-64 1-1.5 min each; remote-cluster-* about 2 min each;
recovery-* 2-3 min each (each process fills its 800 MB pool first); replay-bytes and
replay-bytes-write-through about 1.5 and 3.5 min; vllm-* 5 min for all 14 together and sglang-*
up to 12 min for the 3 together (a run of the script a round serves all of them; most of a
run is importing the engine).

Two commits: --baseline-commit REV checks REV out in a worktree under build/baseline-<hash>,
builds there the binaries the selected comparisons run (benchmarks/baseline_commit.py), and
compares each comparison's kvbm measure of this build with the same measure of REV's, in
interleaved rounds (this tree, then REV, in each): the ratio is this tree / REV, so a
regression shows before it lands. --baseline-build DIR does the same with a tree already built.

Options: --build DIR (default build/release), --rounds N (default 5, at least 5 for a figure
in docs/benchmarks.md), --only a,b (names or prefixes), --markdown FILE, --json FILE,
--baseline-commit REV, --baseline-build DIR.
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline_commit  # noqa: E402
import comparisons  # noqa: E402  (benchmarks/comparisons.py, beside this file)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def judge(target, ratio, low, high):
    """Returns the verdict of `target` ("<= 8", ">= 0.9" or None) on the median ratio."""
    if not target:
        return "-"
    op, bound = target.split()
    bound = float(bound)
    ok = (lambda r: r <= bound) if op == "<=" else (lambda r: r >= bound)
    if not ok(ratio):
        return f"{target}: not met"
    return f"{target}: met" + ("" if ok(low) and ok(high) else ", range crosses it")


def round_ratios(kvbm, base):
    """The ratio of each round (kvbm / baseline, rounds paired in order) and their median,
    min and max: only the two sides of one round ran under the same load."""
    if len(kvbm) != len(base) or not kvbm:
        raise ValueError(f"{len(kvbm)} kvbm figures and {len(base)} baseline figures: "
                         "one of each a round")
    if any(b <= 0 for b in base):
        raise ValueError(f"a baseline figure is not positive ({base}): no ratio to it")
    ratios = [a / b for a, b in zip(kvbm, base)]
    return ratios, statistics.median(ratios), min(ratios), max(ratios)


def run_one(comp, rounds, ctx):
    kvbm, base, loads = [], [], []
    for i in range(rounds):
        loads.append(loadavg())
        a = comp.kvbm.measure(ctx)
        loads.append(loadavg())
        b = comp.baseline.measure(ctx) if comp.baseline else None
        kvbm.append(a)
        if b is not None:
            base.append(b)
        print(f"  round {i + 1}: kvbm {a:.4g} {comp.kvbm.unit}"
              + (f", baseline {b:.4g} {comp.baseline.unit}, ratio {a / b:.3f}" if b else ""),
              file=sys.stderr, flush=True)
    row = {
        "name": comp.name, "what": comp.what, "unit": comp.kvbm.unit,
        "kvbm": statistics.median(kvbm), "kvbm_min": min(kvbm), "kvbm_max": max(kvbm),
        "rounds": rounds, "load_min": min(loads), "load_max": max(loads),
    }
    if base:
        _, median, low, high = round_ratios(kvbm, base)
        row.update(baseline=statistics.median(base), baseline_what=comp.baseline.what,
                   baseline_unit=comp.baseline.unit, ratio=median, ratio_min=low,
                   ratio_max=high, verdict=judge(comp.target, median, low, high))
    else:
        row["verdict"] = judge(comp.target, row["kvbm"], row["kvbm_min"], row["kvbm_max"])
    if comp.kvbm_target:
        absolute = "kvbm " + judge(comp.kvbm_target, row["kvbm"], row["kvbm_min"],
                                   row["kvbm_max"])
        row["verdict"] = absolute if row["verdict"] == "-" else f"{row['verdict']}; {absolute}"
    return row


def markdown(rows, header):
    out = [header, "",
           "| comparison | kvbm (median, min..max) | baseline (median) | ratio: median (min..max) "
           "| load | target |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        k = f"{r['kvbm']:.4g} {r['unit']} ({r['kvbm_min']:.4g}..{r['kvbm_max']:.4g})"
        if "ratio" in r:
            b = f"{r['baseline_what']}: {r['baseline']:.4g} {r['baseline_unit']}"
            q = f"{r['ratio']:.2f} ({r['ratio_min']:.2f}..{r['ratio_max']:.2f})"
        else:
            b, q = "-", "-"
        load = f"{r['load_min']:.1f}-{r['load_max']:.1f}"
        out.append(f"| {r['what']} | {k} | {b} | {q} | {load} | {r['verdict']} |")
    return "\n".join(out) + "\n"


def baseline_of(args, root, comps):
    """(build directory, label) of --baseline-commit or --baseline-build, or (None, None)."""
    if not (args.baseline_commit or args.baseline_build):
        return None, None
    if args.baseline_commit and args.baseline_build:
        sys.exit("compare: give --baseline-commit or --baseline-build, not both")
    other = [c.name for c in comps if baseline_commit.targets_of(c) is None]
    if other:
        sys.exit(f"compare: {', '.join(other)} run no binary of this tree, so another commit "
                 "cannot change them; leave them out with --only")
    if args.baseline_build:
        return os.path.abspath(args.baseline_build), args.baseline_build
    targets = sorted({t for c in comps for t in baseline_commit.targets_of(c)})
    build, commit = baseline_commit.prepare(root, args.baseline_commit, targets, sys.stderr)
    return build, commit[:12]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    ap.add_argument("--baseline-commit")
    ap.add_argument("--baseline-build")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.join(root, args.build) if not os.path.isabs(args.build) else args.build
    comps = comparisons.all_comparisons()
    if args.list:
        for c in comps:
            mark = c.target or "-"
            if c.kvbm_target:
                mark += f", kvbm {c.kvbm_target} {c.kvbm.unit}"
            print(f"{c.name:34} {c.what}   [target {mark}]")
        return 0
    wanted = [w for w in args.only.split(",") if w]
    if wanted:
        comps = [c for c in comps if any(c.name == w or c.name.startswith(w) for w in wanted)]
        if not comps:
            sys.exit(f"compare: no comparison matches --only {args.only}; see --list")
    if args.rounds < 1:
        sys.exit("compare: --rounds must be at least 1 (5 or more for a published figure)")
    base_build, label = baseline_of(args, root, comps)
    rows = []
    base_ctx = comparisons.Context(base_build) if base_build else contextlib.nullcontext()
    with comparisons.Context(build) as ctx, base_ctx as bctx:
        if base_build:
            comps = baseline_commit.against(comps, bctx, label)
        for c in comps:
            missing = c.missing(ctx)
            if missing:
                print(f"[compare] {c.name}: skipped: {missing}", file=sys.stderr)
                continue
            print(f"[compare] {c.name}: {args.rounds} rounds", file=sys.stderr, flush=True)
            rows.append(run_one(c, args.rounds, ctx))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    against = (f" --baseline-commit {args.baseline_commit}" if args.baseline_commit else
               f" --baseline-build {args.baseline_build}" if args.baseline_build else "")
    header = (f"{date}, {platform.node()}, {os.cpu_count()} CPUs, {args.rounds} rounds "
              f"(kvbm then baseline in each), `python3 benchmarks/compare.py "
              f"--rounds {args.rounds}{' --only ' + args.only if args.only else ''}{against}`")
    text = markdown(rows, header)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": date, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
