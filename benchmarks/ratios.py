#!/usr/bin/env python3
"""Prints each kvbm benchmark beside its baseline from Google Benchmark JSON.

    ./build/release/benchmarks/block_manager_bench --benchmark_format=json > bm.json
    python3 benchmarks/ratios.py bm.json

For every benchmark it prints the per-item time (CPU ns per block, token or
byte as the benchmark counts items) and, where a baseline of the same binary
applies, the ratio to it. Repetition aggregates (_median) are used when present.
"""
import json
import sys

# benchmark name prefix -> (baseline name prefix, how to read the ratio)
PAIRS = {
    "BM_BlockManager_MatchInactive": ("BM_Baseline_UnorderedMapLookup", "cost"),
    "BM_BlockManager_MatchActive": ("BM_Baseline_UnorderedMapLookup", "cost"),
    "BM_BlockManager_MatchMiss": ("BM_Baseline_UnorderedMapLookup", "cost"),
    "BM_BlockManager_MatchInactiveThenDrop": ("BM_Baseline_UnorderedMapLookup", "cost"),
    "BM_BlockManager_MatchInactive_Threads": ("BM_Baseline_UnorderedMapLookup_Threads", "cost"),
    "BM_HashBlocks_Batch": ("BM_Xxh3_RawBlocks", "speed"),
    "BM_TokenBlockSequence_Extend": ("BM_Xxh3_RawBlocks", "speed"),
    "BM_Pipeline_HostEngine": ("BM_Engine_HostEngine_Alone", "speed"),
    "BM_Onboard_FromHost": ("BM_Engine_HostToDevice_Raw", "speed"),
    "BM_Onboard_FromDisk": ("BM_Engine_DiskRead_Raw", "speed"),
    "BM_KvIndexer_Apply": ("BM_Baseline_HashMapInsert", "cost"),
    "BM_KvIndexer_Overlaps": ("BM_Baseline_HashMapFind", "cost"),
    "BM_KvRouter_Route": ("BM_Baseline_HashMapFind", "cost"),
}


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        name = b["name"]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") != "median":
                continue
            name = b["run_name"]
        elif name in rows and rows[name].get("_median"):
            continue
        rows.setdefault(name, {})
        ips = b.get("items_per_second")
        rows[name] = {
            "ns_per_item": 1e9 / ips if ips else None,
            "real_ns": b.get("real_time"),
            "unit": b.get("time_unit"),
            "counters": {k: v for k, v in b.items() if k.startswith("bytes_per_block")},
            "_median": b.get("run_type") == "aggregate",
        }
    return rows


def suffix(name):
    parts = name.split("/", 1)
    return "/" + parts[1] if len(parts) > 1 else ""


def main():
    rows = {}
    for path in sys.argv[1:]:
        rows.update(load(path))
    print(f"{'benchmark':62} {'ns/item':>10} {'baseline ns/item':>17} {'ratio':>8}")
    for name, r in rows.items():
        base_prefix = None
        for prefix, (base, kind) in PAIRS.items():
            if name.split("/")[0] == prefix:
                base_prefix, how = base, kind
        ns = r["ns_per_item"]
        line = f"{name:62} {ns if ns is None else round(ns, 2)!s:>10}"
        if base_prefix:
            # Same arguments where the baseline has them, else the plain baseline.
            base = rows.get(base_prefix + suffix(name)) or rows.get(base_prefix)
            if "Threads" in name and base is None:
                base = rows.get(base_prefix + suffix(name))
            if base and base["ns_per_item"] and ns:
                b = base["ns_per_item"]
                ratio = ns / b if how == "cost" else b / ns
                label = "x cost" if how == "cost" else "x speed"
                line += f" {round(b, 2):>17} {ratio:>6.2f} {label}"
        for k, v in r["counters"].items():
            line += f"  {k}={v:.1f}"
        if r["unit"] == "ms":
            line += f"  ({r['real_ns']:.1f} ms)"
        print(line)


if __name__ == "__main__":
    main()
