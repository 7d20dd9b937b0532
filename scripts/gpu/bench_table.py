#!/usr/bin/env python3
"""Prints a Google Benchmark JSON file as a short table: name, time, rate, counters.

    python3 scripts/gpu/bench_table.py build/gpu-out/cuda_bench.json

Used by scripts/gpu/run.sh device after cuda_bench and offload_bench, so that the figures are in
the log (and the device tool's output) beside the JSON. Standard library only.
"""

import json
import statistics
import sys


def spread(values: list) -> str:
    """ "median (min..max)" of `values`."""
    v = sorted(values)
    return f"{statistics.median(v):.3g} ({v[0]:.3g}..{v[-1]:.3g})"


def print_repeated(runs: list) -> None:
    """One line per case: the median and range over its repetitions of GB/s and vs_contiguous."""
    cases: dict = {}
    for b in runs:
        cases.setdefault(b["run_name"], []).append(b)
    print(f"# {len(next(iter(cases.values())))} repetitions each: median (min..max)")
    for name, reps in cases.items():
        ok = [b for b in reps if not b.get("error_occurred")]
        if not ok:
            print(f"{name:<58} ERROR {reps[0].get('error_message', '')}")
            continue
        line = f"{name:<58} GB/s " + spread([b.get("bytes_per_second", 0) / 1e9 for b in ok])
        if all("vs_contiguous" in b for b in ok):
            line += "  vs_contiguous " + spread([b["vs_contiguous"] for b in ok])
        labels = sorted({b.get("label", "") for b in ok} - {""})
        if labels:
            line += f"  [{','.join(labels)}]"
        print(line)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    ctx = data.get("context", {})
    print(f"# {ctx.get('executable', '?')}  {ctx.get('date', '')}  "
          f"cpus={ctx.get('num_cpus', '?')}  build={ctx.get('library_build_type', '?')}")
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
            "iterations", "real_time", "cpu_time", "time_unit", "family_index",
            "per_family_instance_index", "aggregate_name", "aggregate_unit",
            "bytes_per_second", "items_per_second", "label", "error_occurred", "error_message"}
    runs = [b for b in data.get("benchmarks", []) if b.get("run_type") != "aggregate"]
    if any(b.get("repetitions", 1) > 1 for b in runs):
        print_repeated(runs)
        return 0
    for b in runs:
        line = f"{b['name']:<58} "
        if b.get("error_occurred"):
            print(line + "ERROR " + b.get("error_message", ""))
            continue
        line += f"{b.get('real_time', 0):10.3f} {b.get('time_unit', '')}"
        if "bytes_per_second" in b:
            line += f"  {b['bytes_per_second'] / 1e9:8.2f} GB/s"
        extra = [f"{k}={v:.3g}" for k, v in b.items()
                 if k not in skip and isinstance(v, (int, float))]
        if extra:
            line += "  " + " ".join(extra)
        if b.get("label"):
            line += f"  [{b['label']}]"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
