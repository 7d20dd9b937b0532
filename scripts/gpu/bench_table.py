#!/usr/bin/env python3
"""Prints a Google Benchmark JSON file as a short table: name, time, rate, counters.

    python3 scripts/gpu/bench_table.py build/gpu-out/cuda_bench.json

Used by scripts/gpu/run.sh device after cuda_bench and offload_bench, so that the figures are in
the log (and the device tool's output) beside the JSON. Standard library only.
"""

import json
import sys


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
    for b in data.get("benchmarks", []):
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
