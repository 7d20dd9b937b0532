"""vLLM's file-system secondary tier beside kvbm's KvbmTier, through vLLM's own classes (0.33).

Each tier is loaded by vLLM's own SecondaryTierFactory, as `vllm serve --kv-transfer-config`
loads it: OffloadingConnector, spec TieringOffloadingSpec, one secondary tier, either vLLM's
built-in {"type": "fs", "root_dir": ...} (FileSystemTierManager: a file per chunk, O_DIRECT
where the file system has it, 16+16 I/O threads, existence checked on a lookup thread) or
{"type": "KvbmTier", "module_path": "kvbm.integrations.vllm", "disk_directory": ...} (G2 in
host memory, written through to a persistent, checksummed G3 file; no G4). The VllmConfig,
the scheduler's KVCacheConfig and the OffloadingConfig are built as the tests build them
(tests/engines/vllm_util.py), the manager by OffloadingSpecFactory.create_spec(...).
get_manager(). The benchmark then makes the calls OffloadingConnectorScheduler makes on that
TieringOffloadingManager, as tests/engines/test_vllm_engine.py does (store / evict / fetch);
only the GPU<->CPU copies are not vLLM's: the chunks are written into (and read out of) the
CPU primary tier's memory, outside the timings.

The model is a llama of which vLLM reads only config.json (load_format="dummy"), with the KV
geometry of a real one: --model 8b (default) is Llama-3.1-8B's (32 layers, 8 KV heads of
128, bf16), a 2 MiB chunk per 16-token block; --model 1b is Llama-3.2-1B's (16 layers, 8 KV
heads of 64), 512 KiB. A chunk is one vLLM block (16 tokens).

KvbmTier runs with its defaults (G1 64 blocks, 2 workers) but for a G2 of one round's chunks
(host_bytes = N chunks) and a G3 that holds the whole run; the fs tier with vLLM's defaults.

One round of one tier, on fresh keys (the same chunk bytes every round):
  store    prepare_store of N chunks, the bytes written into the primary (not timed),
           complete_store, then scheduler steps until has_pending_work() is false (the tier
           holds them, as vLLM sees it: KvbmTier once they are in G2). "on disk": KvbmTier
           also until kvbm's G3 writes are done (kv.drain(): written, fdatasync'd); the fs
           tier's files are written (O_DIRECT, no fsync) when it is idle: the same figure.
  promote  reset_cache (the primary forgets everything; its memory zeroed, not timed), then
           one request looks the N keys up every step until each is HIT or MISS (HIT_PENDING
           while the tier copies them into the primary), prepare_load / complete_load; from
           the first lookup to complete_load; the bytes checked afterwards. Twice: the
           chunks of this round (KvbmTier: from G2, host memory) and those of the round
           before (KvbmTier: from G3, its G2 holds only this round's; the line under the
           table says how many kvbm read from G3). The fs tier reads files either time.
  lookup   the time of each manager.lookup() call on the scheduler thread (the connector's
           call per chunk of a request): "present" = the calls for the stored keys of both
           promotions until each is found (the fs tier answers RETRY until its lookup thread
           has checked the file, then HIT; KvbmTier answers HIT at once), not the later
           calls the primary tier answers; "absent" = the calls for --absent never-stored
           keys until MISS. "call": p50 / p99 of those calls; "key": p50 / p99 of their sum
           per key (the scheduler's time on one key until it has its answer); "steps":
           lookup passes (scheduler steps) until every key had its answer.
Between steps the benchmark sleeps --step-ms (an engine's step is a forward pass: longer).
Rounds run first and are not counted (warmup_rounds) until kvbm's G1 has been used once: without
CUDA it is host memory that is touched for the first time then (page faults).

Rounds alternate (fs, kvbm, fs, kvbm, ...); each figure is the median of the rounds with
its min..max, and kvbm/fs the median (min..max) of the per-round ratios. Run in the engines
venv (scripts/engines_env.sh):

    PYTHONWARNINGS=ignore::DeprecationWarning build/engines-venv/bin/python \
        benchmarks/python/vllm_tier_bench.py [--rounds 5] [--chunks 64] [--model 8b] \
        [--dir DIR] [--json FILE]

Timing figures: they depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "engines"))
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import numpy as np  # noqa: E402

# KV geometry of real llamas (config.json fields); vLLM reads nothing else of the model.
MODELS = {
    "8b": dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
               num_hidden_layers=32, intermediate_size=14336),
    "1b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
               num_hidden_layers=16, intermediate_size=8192, head_dim=64),
}
TIERS = ("fs", "kvbm")
DEADLINE_S = 120
KVBM_G1_BLOCKS = 64  # KvbmTier's default device_blocks


def warmup_rounds(chunks):
    """Rounds not counted: one, then as many as it takes the G3 promotions (the round
    before's chunks) to go through every block of kvbm's G1 once."""
    return 1 + -(-KVBM_G1_BLOCKS // chunks)


def tier_dict(name, directory, chunk_bytes, chunks, total_chunks):
    if name == "fs":  # vLLM's defaults besides the directory
        return {"type": "fs", "root_dir": directory}
    # KvbmTier's defaults (G1 64 blocks, 2 workers) besides the directory, a G3 that holds
    # every chunk of the run and a G2 of one round's chunks: this round's are promoted from
    # G2 (host memory), the last round's from G3 (the disk)
    return {"type": "KvbmTier", "module_path": "kvbm.integrations.vllm",
            "disk_directory": directory, "disk_bytes": 2 * total_chunks * chunk_bytes,
            "host_bytes": chunks * chunk_bytes}


def build_engine(model_dir, name, directory, chunks, total_chunks, chunk_bytes):
    """vLLM's manager with one secondary tier, built as vLLM builds it."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm_util import make_vllm_config, offloading_config

    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 2 * chunks * chunk_bytes,
             "secondary_tiers": [tier_dict(name, directory, chunk_bytes, chunks, total_chunks)]}
    vc = make_vllm_config(model_dir, extra)
    oc = offloading_config(vc)
    assert oc.worker_kv_bytes_per_block == chunk_bytes, oc.worker_kv_bytes_per_block
    manager = OffloadingSpecFactory.create_spec(oc).get_manager()
    (tier,) = manager.secondary_tiers
    return manager, tier


def chunk_bytes_of(model_dir):
    from vllm_util import make_vllm_config, offloading_config

    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30}
    return offloading_config(make_vllm_config(model_dir, extra)).worker_kv_bytes_per_block


class Scheduler:
    """The calls OffloadingConnectorScheduler makes on a manager (under manager.lock)."""

    def __init__(self, manager, tier, step_s):
        self.m, self.tier, self.step_s = manager, tier, step_s
        self.req = 0

    def rows(self):
        return np.asarray(self.m.primary_tier.get_kv_memoryview())

    def step(self, new=()):
        from vllm.v1.kv_offload.base import ScheduleEndContext

        self.m.on_schedule_end(ScheduleEndContext(new_req_ids=list(new), preempted_req_ids=[]))

    def new_request(self):
        from vllm.v1.kv_offload.base import ReqContext

        self.req += 1
        ctx = ReqContext(req_id=f"bench-{self.req}")
        self.m.on_new_request(ctx)
        return ctx

    def wait_idle(self):
        deadline = time.monotonic() + DEADLINE_S
        while True:
            with self.m.lock:
                self.step()
                busy = self.m.has_pending_work()
            if not busy:
                return
            assert time.monotonic() < deadline, "transfers still pending"
            time.sleep(self.step_s)

    def store(self, keys, data):
        """Seconds from prepare_store to idle, less the copy into the primary."""
        t0 = time.perf_counter()
        with self.m.lock:
            ctx = self.new_request()
            out = self.m.prepare_store(keys, ctx)
            t1 = time.perf_counter()
            assert list(out.keys_to_store) == list(keys)
            rows = self.rows()
            for row, chunk in zip(data, out.store_spec.chunk_ids):
                rows[int(chunk)] = row  # the GPU -> CPU copy: not timed
            t2 = time.perf_counter()
            self.m.complete_store(keys, ctx)
            self.step([ctx.req_id])
        self.wait_idle()
        t3 = time.perf_counter()
        with self.m.lock:
            self.m.on_request_finished(ctx)
            self.step()
        return (t1 - t0) + (t3 - t2)

    def evict(self):
        with self.m.lock:
            self.m.reset_cache()
            self.m.on_reset_flushed()
        self.rows()[:] = 0  # a HIT can only come with promoted bytes

    def fetch(self, keys, load=True):
        """Lookups every step until each key is HIT or MISS, then the load of the HITs.
        Returns (seconds, results, loaded rows, the ns of each lookup call until its key's
        first answer other than RETRY, the ns of those calls summed per key, steps until
        every key had it)."""
        from vllm.v1.kv_offload.base import LookupResult

        pending_answer = {LookupResult.RETRY}
        final = (LookupResult.HIT, LookupResult.MISS)
        calls = []
        per_key = [0] * len(keys)
        answered = [False] * len(keys)
        answer_steps = 0
        steps = 0
        t0 = time.perf_counter()
        with self.m.lock:
            ctx = self.new_request()
        while True:
            steps += 1
            with self.m.lock:
                results = []
                for i, k in enumerate(keys):
                    a = time.perf_counter_ns()
                    r = self.m.lookup(k, ctx)
                    b = time.perf_counter_ns()
                    if not answered[i]:
                        calls.append(b - a)
                        per_key[i] += b - a
                        answered[i] = r not in pending_answer
                    results.append(r)
                self.step([ctx.req_id])
            if not answer_steps and all(answered):
                answer_steps = steps
            if all(r in final for r in results):
                break
            assert time.perf_counter() - t0 < DEADLINE_S, results
            time.sleep(self.step_s)
        hits = [i for i, r in enumerate(results) if r is LookupResult.HIT]
        loaded = None
        with self.m.lock:
            if hits and load:
                hk = [keys[i] for i in hits]
                self.m.touch(hk, ctx)
                spec = self.m.prepare_load(hk, ctx)
                loaded = self.rows()[np.asarray(spec.chunk_ids, dtype=np.int64)]  # GPU copy
                self.m.complete_load(hk, ctx)
            t1 = time.perf_counter()
            self.m.on_request_finished(ctx)
            self.step()
        return t1 - t0, results, loaded, calls, per_key, answer_steps


def make_keys(n, tag):
    from vllm.v1.kv_offload.base import make_offload_key

    return [make_offload_key((f"{tag}:{i}:".encode() * 32)[:32], 0) for i in range(n)]


def g3_onboarded(tier):
    """Chunks kvbm has read from G3 so far (0 for the fs tier)."""
    kv = getattr(tier, "kv", None)
    return kv.stats()["onboarding"]["onboarded"].get("G3", 0) if kv is not None else 0


def one_round(sched, name, r, data, n_absent, previous):
    """One round of one tier; returns its figures and the keys it stored."""
    from vllm.v1.kv_offload.base import LookupResult

    n = len(data)
    gb = n * data.shape[1] / 1e9
    keys = make_keys(n, f"{name}-{r}")
    store_s = sched.store(keys, data)
    disk_s = store_s
    if name == "kvbm":
        t = time.perf_counter()
        sched.tier.kv.drain()
        disk_s += time.perf_counter() - t
    out = {"store": gb / store_s, "store_disk": gb / disk_s}
    present_ns, present_key, present_steps = [], [], []
    for label, ks in (("promote", keys), ("promote_old", previous)):
        if ks is None:
            continue
        sched.evict()
        g3 = g3_onboarded(sched.tier)
        promote_s, results, loaded, calls, per_key, steps = sched.fetch(ks)
        out[f"{label}_from_g3"] = g3_onboarded(sched.tier) - g3
        assert all(x is LookupResult.HIT for x in results), results
        assert np.array_equal(loaded, data), "promoted bytes differ"
        out[label] = gb / promote_s
        present_ns += calls
        present_key += per_key
        present_steps.append(steps)
    _, results, _, absent_ns, absent_key, absent_steps = sched.fetch(
        make_keys(n_absent, f"no-{name}-{r}"))
    assert all(x is LookupResult.MISS for x in results)
    us = lambda v, q: float(np.percentile(v, q)) / 1e3  # noqa: E731
    out.update({
        "present_p50": us(present_ns, 50), "present_p99": us(present_ns, 99),
        "present_key_p50": us(present_key, 50), "present_key_p99": us(present_key, 99),
        "absent_p50": us(absent_ns, 50), "absent_p99": us(absent_ns, 99),
        "absent_key_p50": us(absent_key, 50), "absent_key_p99": us(absent_key, 99),
        "present_steps": max(present_steps), "absent_steps": absent_steps})
    return out, keys


ROWS = (("store", "store GB/s (until idle)"),
        ("store_disk", "store GB/s (until on disk)"),
        ("promote", "promote GB/s, this round"),
        ("promote_old", "promote GB/s, last round"),
        ("present_p50", "lookup present, call p50 us"),
        ("present_p99", "lookup present, call p99 us"),
        ("present_key_p50", "lookup present, key p50 us"),
        ("present_key_p99", "lookup present, key p99 us"),
        ("absent_p50", "lookup absent, call p50 us"),
        ("absent_p99", "lookup absent, call p99 us"),
        ("absent_key_p50", "lookup absent, key p50 us"),
        ("absent_key_p99", "lookup absent, key p99 us"),
        ("present_steps", "steps to answer, present"),
        ("absent_steps", "steps to answer, absent"))
KEYS = [key for key, _ in ROWS] + ["promote_from_g3", "promote_old_from_g3"]


def file_system(directory):
    try:
        out = subprocess.run(["df", "-T", directory], capture_output=True, text=True).stdout
        return out.splitlines()[-1].split()[1]
    except Exception:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunks", type=int, default=64, help="chunks stored and promoted a round")
    ap.add_argument("--absent", type=int, default=256, help="never-stored keys looked up")
    ap.add_argument("--model", choices=sorted(MODELS), default="8b")
    ap.add_argument("--step-ms", type=float, default=1.0, help="sleep between scheduler steps")
    ap.add_argument("--dir", default=None,
                    help="directory for both tiers (default: a temp dir under /var/tmp)")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    a = ap.parse_args()
    from vllm_util import write_model

    load0 = os.getloadavg()
    run = os.urandom(4).hex()  # keys never seen before, even in a --dir used before

    base = a.dir or tempfile.mkdtemp(prefix="kvbm-vllm-bench-",
                                     dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    os.makedirs(base, exist_ok=True)
    fstype = file_system(base)
    warmup = warmup_rounds(a.chunks)
    res = {name: {key: [] for key in KEYS} for name in TIERS}
    with contextlib.ExitStack() as stack:
        if a.dir is None:
            stack.callback(shutil.rmtree, base, True)
        model = write_model(os.path.join(base, "model"), **MODELS[a.model])
        chunk_bytes = chunk_bytes_of(model)
        scheds = {}
        for name in TIERS:
            d = os.path.join(base, name)
            os.makedirs(d, exist_ok=True)
            manager, tier = build_engine(model, name, d, a.chunks,
                                         (a.rounds + warmup) * a.chunks, chunk_bytes)
            stack.callback(manager.shutdown)
            scheds[name] = Scheduler(manager, tier, a.step_ms / 1e3)
        data = np.random.default_rng(1).integers(-128, 128, size=(a.chunks, chunk_bytes),
                                                 dtype=np.int8)  # the primary's dtype
        previous = {name: None for name in TIERS}
        for r in range(-warmup, a.rounds):  # the warm-up rounds are not counted
            for name in TIERS:  # interleaved, fresh keys each round
                figures, previous[name] = one_round(scheds[name], name, f"{run}-{r}", data,
                                                    a.absent, previous[name])
                for key, v in figures.items():
                    if r >= 0:
                        res[name][key].append(v)

    load = os.getloadavg()
    gb = a.chunks * chunk_bytes / 1e9

    def fmt(v):
        return f"{statistics.median(v):8.2f} ({min(v):.2f}..{max(v):.2f})"

    print(f"# vLLM secondary tiers: {a.rounds} interleaved rounds (after {warmup} not "
          f"counted), {a.chunks} chunks of "
          f"{chunk_bytes >> 10} KiB ({gb * 1e3:.0f} MB a round; model {a.model}), "
          f"{a.absent} absent keys, {fstype} under {os.path.dirname(base.rstrip('/'))}, "
          f"step {a.step_ms:g} ms; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
          f"at the start, {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    print(f"{'figure':<30}{'vLLM fs':>26}{'KvbmTier':>26}{'kvbm/fs':>26}")
    summary = {}
    for key, label in ROWS:
        f, k = res["fs"][key], res["kvbm"][key]
        ratio = [y / x if x else float("nan") for x, y in zip(f, k)]
        print(f"{label:<30}{fmt(f):>26}{fmt(k):>26}{fmt(ratio):>26}")
        summary[key] = {"fs": statistics.median(f), "kvbm": statistics.median(k),
                        "ratio": statistics.median(ratio), "ratio_min": min(ratio),
                        "ratio_max": max(ratio)}
    src = {k: statistics.median(res["kvbm"][f"{k}_from_g3"])
           for k in ("promote", "promote_old")}
    print(f"# KvbmTier's promotions read from G3 (median a round): this round "
          f"{src['promote']:.0f} of {a.chunks} chunks, last round {src['promote_old']:.0f}")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"rounds": a.rounds, "warmup_rounds": warmup, "chunks": a.chunks,
                       "chunk_bytes": chunk_bytes, "model": a.model, "absent": a.absent,
                       "step_ms": a.step_ms, "file_system": fstype, "loadavg_start": load0,
                       "loadavg": load, "date": time.strftime("%F"), "per_round": res,
                       "median": summary}, out, indent=1)


if __name__ == "__main__":
    main()
