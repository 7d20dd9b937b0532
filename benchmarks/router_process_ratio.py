#!/usr/bin/env python3
"""kvbm-router's /route latency beside a bare HTTP round trip, from router_process_bench JSON.

    ./build/release/benchmarks/router_process_bench --benchmark_repetitions=9 \\
        --benchmark_enable_random_interleaving=true --benchmark_min_time=0.5 \\
        --benchmark_out=rp.json --benchmark_out_format=json
    python3 benchmarks/router_process_ratio.py rp.json

Repetition i of each benchmark ran interleaved with the other's; each pair gives a ratio
(route / bare) of p50 and of p99. Prints each side's median p50 and p99 (min..max over the
repetitions) and the median ratio (min..max).
"""
import json
import statistics
import sys

ROUTE, BARE = "BM_RouterProcess_Route", "BM_Baseline_HttpRoundTrip"


def runs(data, name):
    return [b for b in data["benchmarks"]
            if b["name"].startswith(name) and b.get("run_type") == "iteration"]


def spread(xs, fmt="{:.1f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main(path):
    with open(path) as f:
        data = json.load(f)
    route, bare = runs(data, ROUTE), runs(data, BARE)
    if not route or len(route) != len(bare):
        sys.exit(f"{path}: expected as many {ROUTE} as {BARE} repetitions")
    for q in ("p50_us", "p99_us"):
        r = [x[q] for x in route]
        b = [x[q] for x in bare]
        ratios = [x / y for x, y in zip(r, b)]
        extra = [x - y for x, y in zip(r, b)]
        print(f"{q}: route {spread(r)} us, bare {spread(b)} us, "
              f"ratio {spread(ratios, '{:.2f}')} x, route - bare {spread(extra)} us")


if __name__ == "__main__":
    main(sys.argv[1])
