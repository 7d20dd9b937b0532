#!/usr/bin/env python3
"""Python call overhead and throughput beside the same calls in C++ (docs/python.md).

    python benchmarks/python/bindings_bench.py
        [--cpp build/release/benchmarks/python_baseline_bench]

Same manager and blocks as benchmarks/python_baseline_bench.cpp (64 KiB blocks,
G1 64, G2 1024, no G3): a 256-block lookup (probe, present, and vLLM's way, 256
KvbmTier.lookup calls), store of 32 blocks, load of 32 blocks. Each figure is the
median of 5 runs; with --cpp the C++ benchmark runs too and the ratio C++/Python
time (1.0: no overhead) is printed.
"""

import argparse
import json
import statistics
import subprocess
import time
from types import SimpleNamespace

import numpy as np

import kvbm

BLOCK = 64 << 10


def manager():
    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=1, outer_dim=1, page_size=1, inner_dim=BLOCK,
                                 dtype_bytes=1),
        device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS,
        device=kvbm.TierConfig(blocks=64), host=kvbm.TierConfig(blocks=1024),
        device_to_host=kvbm.OffloadMode.NONE)
    return kvbm.KvBlockManager(cfg)


def flat(first, n):
    return np.array([(first + i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(n)],
                    dtype=np.uint64)


def rows(n):
    return np.random.default_rng(1).integers(0, 256, size=(n, BLOCK), dtype=np.uint8)


def timed(fn, min_time=0.3):
    """Median over 5 runs of the time per call, each run at least min_time seconds."""
    runs = []
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        runs.append(elapsed / n)
    return statistics.median(runs)


def python_figures():
    out = {}
    kv = manager()
    h = flat(1, 256)
    assert kv.store(h, rows(256)) == 256
    out["Probe256"] = timed(lambda: kv.probe(h, chained=False))
    out["Present256"] = timed(lambda: kv.present(h, chained=False))

    # vLLM's way: one lookup() per chunk, 256 of them, keys hashed per call.
    import tempfile
    from kvbm.integrations.vllm import KvbmTier
    primary = np.zeros((8, BLOCK), np.uint8)
    with tempfile.TemporaryDirectory() as d:
        tier = KvbmTier(SimpleNamespace(), memoryview(primary), disk_directory=d,
                        namespace="bench",  # no vLLM spec here to take the model from
                        disk_bytes=64 * BLOCK, host_bytes=512 * BLOCK, device_blocks=64)
        keys = [b"key-%d" % i for i in range(256)]
        tier.kv.store(kvbm.hash_keys(keys), rows(256))
        req = SimpleNamespace(req_id="bench")
        out["TierLookup256"] = timed(lambda: [tier.lookup(k, req) for k in keys])
        tier.shutdown()

    src = rows(32)
    nxt = [1]

    def store():
        kv.store(flat(nxt[0], 32), src)
        nxt[0] += 32
    out["Store32"] = timed(store)

    kv2 = manager()
    all_h = flat(1, 512)
    assert kv2.store(all_h, rows(512)) == 512
    dst = np.empty((32, BLOCK), np.uint8)
    at = [0]

    def load():
        n = kv2.load(all_h[at[0]:at[0] + 32], dst)
        assert n == 32
        at[0] = (at[0] + 32) % 512
    out["Load32"] = timed(load)
    kv.close()
    kv2.close()
    return out


def cpp_figures(binary):
    proc = subprocess.run([binary, "--benchmark_format=json", "--benchmark_repetitions=5",
                           "--benchmark_report_aggregates_only=true"],
                          capture_output=True, text=True, check=True)
    res = {}
    for b in json.loads(proc.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = (b["run_name"].replace("BM_KvBlockManager_", "").replace("/32", "32")
                .replace("BM_", ""))
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
        res[name] = b["real_time"] * scale
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpp", help="the C++ benchmark binary (python_baseline_bench)")
    args = p.parse_args()
    kvbm.set_log_level("error")
    py = python_figures()
    cpp = cpp_figures(args.cpp) if args.cpp else {}
    print(f"{'call':<16}{'Python':>12}{'C++':>12}{'C++/Python':>12}   per block (Python)")
    per = {"Probe256": 256, "Present256": 256, "TierLookup256": 256, "Store32": 32, "Load32": 32}
    for name, t in py.items():
        c = cpp.get(name)
        ratio = f"{c / t:.2f}" if c else "-"
        cs = f"{c * 1e6:.1f} us" if c else "-"
        gbs = f", {BLOCK * per[name] / t / 1e9:.2f} GB/s" if name in ("Store32", "Load32") else ""
        print(f"{name:<16}{t * 1e6:>9.1f} us{cs:>12}{ratio:>12}"
              f"   {t / per[name] * 1e9:.0f} ns{gbs}")
    if "Memcpy_Block32" in cpp:
        t = cpp["Memcpy_Block32"]
        print(f"{'memcpy 32 blocks':<16}{'':>12}{t * 1e6:>9.1f} us{'':>12}   "
              f"{BLOCK * 32 / t / 1e9:.2f} GB/s (the machine's copy ceiling)")


if __name__ == "__main__":
    main()
