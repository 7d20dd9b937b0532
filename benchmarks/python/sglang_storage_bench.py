"""SGLang's HiCacheFile beside kvbm's KvbmStorage, through SGLang's own classes (0.5.23).

Both backends are made by SGLang's StorageBackendFactory over one real MHA host pool
(page_first, bf16, pin_memory off) and driven with the calls HiCacheController makes on the
generic path: batch_set of flat host pages (a backup), batch_exists (the prefetch check) and
batch_get into flat pages (the prefetch). Rounds alternate (file, kvbm, file, kvbm, ...) on
fresh keys each round, and the figures are the median of the rounds with their min..max, and
the ratio kvbm/file of each round's medians. kvbm runs with its defaults for SGLang (G2 in
host memory, written through to a persistent, checksummed G3 file); HiCacheFile writes one
file per page into the same file system. Run in the engines venv (scripts/engines_env.sh):

    PYTHONWARNINGS=ignore::DeprecationWarning build/engines-venv/bin/python \
        benchmarks/python/sglang_storage_bench.py [--rounds 5] [--pages 32] [--dir DIR] [--json F]

Timing figures: they depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import torch

PAGE_TOKENS, LAYERS, HEADS, HEAD_DIM = 64, 8, 8, 128  # a 2 MiB bf16 page (K and V)


def host_pool(pages):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    tokens = pages * PAGE_TOKENS
    dev = MHATokenToKVPool(tokens, PAGE_TOKENS, torch.bfloat16, head_num=HEADS,
                           head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                           enable_memory_saver=False, start_layer=0, end_layer=LAYERS)
    info = dev.get_device_pool_infos()[0].buffer_info
    return MHATokenToKVPoolHost(info, 2.0, 0, PAGE_TOKENS, "page_first", pin_memory=False,
                                device="cpu", device_capacity_tokens=dev.size, start_layer=0,
                                end_layer=LAYERS, write_back_staging=dev.hicache_write_back_staging)


def storage_config(extra):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                                is_page_first_layout=True, model_name="bench", extra_config=extra)


def backends(directory, host, pages):
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    page_bytes = int(host.get_dummy_flat_data_page().nbytes)
    os.makedirs(os.path.join(directory, "file"), exist_ok=True)
    os.makedirs(os.path.join(directory, "kvbm"), exist_ok=True)
    fb = StorageBackendFactory.create_backend(
        "file", storage_config({"file_storage_path": os.path.join(directory, "file")}), host)
    fb.register_mem_pool_host(host)
    kb = StorageBackendFactory.create_backend("dynamic", storage_config({
        "backend_name": "kvbm", "module_path": "kvbm.integrations.sglang",
        "class_name": "KvbmStorage", "disk_directory": os.path.join(directory, "kvbm"),
        "disk_bytes": 4 * pages * 8 * page_bytes, "host_bytes": 4 * pages * page_bytes,
        "device_blocks": max(8, pages)}), host)
    kb.register_mem_pool_host(host)
    return {"file": fb, "kvbm": kb}, page_bytes


def one_round(backend, keys, pages, targets):
    t0 = time.perf_counter()
    assert backend.batch_set(keys, pages)
    t1 = time.perf_counter()
    for _ in range(20):
        assert backend.batch_exists(keys) == len(keys)
    t2 = time.perf_counter()
    got = backend.batch_get(keys, targets)
    t3 = time.perf_counter()
    assert all(g is not None for g in got)
    return t1 - t0, (t2 - t1) / 20, t3 - t2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=32)
    ap.add_argument("--dir", default=None, help="directory for both backends (default: a temp)")
    ap.add_argument("--json", default=None, help="write each round's figures to this file")
    a = ap.parse_args()
    directory = a.dir or tempfile.mkdtemp(prefix="kvbm-sglang-bench-")
    host = host_pool(a.pages)
    idx = host.alloc(a.pages * PAGE_TOKENS)
    g = torch.Generator().manual_seed(1)
    for j in range(a.pages):
        like = host.get_dummy_flat_data_page()
        host.set_from_flat_data_page(int(idx[j * PAGE_TOKENS]),
                                     torch.randn(like.numel(), generator=g).to(like.dtype))
    pages = [host.get_data_page(int(idx[j * PAGE_TOKENS]), flat=True) for j in range(a.pages)]
    targets = [host.get_dummy_flat_data_page() for _ in range(a.pages)]
    bs, page_bytes = backends(directory, host, a.pages)
    gb = a.pages * page_bytes / 1e9
    res = {name: {"set": [], "exists": [], "get": []} for name in bs}
    try:
        for r in range(a.rounds):
            for name in ("file", "kvbm"):  # interleaved, fresh keys each round
                keys = [f"{r:03d}-{j:05d}".ljust(64, "0") for j in range(a.pages)]
                s, e, gt = one_round(bs[name], keys, pages, targets)
                res[name]["set"].append(gb / s)
                res[name]["exists"].append(e * 1e6)
                res[name]["get"].append(gb / gt)
        bs["kvbm"].close()
    finally:
        if a.dir is None:
            shutil.rmtree(directory, ignore_errors=True)

    def fmt(v):
        return f"{statistics.median(v):8.2f} ({min(v):.2f}..{max(v):.2f})"

    load = os.getloadavg()
    print(f"# {a.rounds} interleaved rounds, {a.pages} pages of {page_bytes >> 10} KiB "
          f"({gb * 1e3:.0f} MB a batch); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'figure':<28}{'HiCacheFile':>26}{'KvbmStorage':>26}{'kvbm/file':>26}")
    for key, label in (("set", "batch_set GB/s"), ("get", "batch_get GB/s"),
                       ("exists", f"batch_exists({a.pages}) us")):
        f, k = res["file"][key], res["kvbm"][key]
        ratio = [y / x for x, y in zip(f, k)]
        print(f"{label:<28}{fmt(f):>26}{fmt(k):>26}{fmt(ratio):>26}")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"rounds": a.rounds, "pages": a.pages, "page_bytes": page_bytes,
                       "loadavg": load, "per_round": res}, out, indent=1)


if __name__ == "__main__":
    main()
