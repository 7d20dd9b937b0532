#!/usr/bin/env python3
"""Per-block lifecycle cost of two KV cache groups beside one, from hybrid_block_manager_bench JSON.

    ./build/release/benchmarks/hybrid_block_manager_bench --benchmark_repetitions=9 \\
        --benchmark_enable_random_interleaving=true \\
        --benchmark_out=hybrid.json --benchmark_out_format=json
    python3 benchmarks/hybrid_ratio.py hybrid.json

Repetition i of each benchmark ran interleaved with the others'; each repetition gives a
ratio (groups:2 / groups:1, and groups:1 / the bare BlockManager) of the CPU time per block.
Prints each side's median ns per block (min..max over the repetitions) and the median ratio
(min..max). The issue's target: groups:2 / groups:1 at most 2.2.
"""
import json
import statistics
import sys

TWO, ONE, BARE = ("BM_Hybrid_Lifecycle/groups:2", "BM_Hybrid_Lifecycle/groups:1",
                  "BM_Baseline_BlockManagerLifecycle")


def per_block_ns(data, name):
    """CPU ns per block of each repetition of `name`, in repetition order."""
    out = []
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b["run_name"] != name:
            continue
        out.append(1e9 / b["items_per_second"])
    return out


def spread(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def main(path):
    with open(path) as f:
        data = json.load(f)
    two, one, bare = (per_block_ns(data, n) for n in (TWO, ONE, BARE))
    if not two or not (len(two) == len(one) == len(bare)):
        sys.exit(f"{path}: expected as many repetitions of {TWO}, {ONE} and {BARE}")
    for name, xs in ((BARE, bare), (ONE, one), (TWO, two)):
        print(f"{name}: {spread(xs, '{:.0f}')} ns per block")
    print(f"two groups / one group: {spread([a / b for a, b in zip(two, one)], '{:.2f}')} x "
          f"over {len(two)} repetitions (target <= 2.2)")
    print(f"one group / bare BlockManager: "
          f"{spread([a / b for a, b in zip(one, bare)], '{:.2f}')} x")


if __name__ == "__main__":
    main(sys.argv[1])
