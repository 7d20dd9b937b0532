"""One cluster model for every router: kvbm-replay's instances and prefill queue in Python.

Every router of router_compare.py (kvbm's own KvRouter through the Python
bindings, SGLang's cache_aware and Dynamo's default) places the requests of
a trace on the same model of kvbm-replay's cluster in metadata-only mode
(tools/replay/replay.cpp, tools/replay/cluster.cpp):

- Instance: G1 of 1,000 blocks and G2 (0: none) filled on G1 eviction, by
  the rules of the reference tier model (tools/tier_model/README.md), which
  kvbm-replay matches hit by hit. It records the KV events a KvBlockManager
  publishes: G1 as "GPU", G2 as "CPU".
- Cluster: each instance prefills one request at a time, in arrival order;
  prefill time = (computed tokens + G2 hit tokens x 0.05) / the prefill
  rate. A request is in flight, for every router's load, from its arrival
  until its simulated prefill ends.
- simulate(): routes each request, serves it on the chosen instance, then
  hands the instance's events to the router before the next request, as
  kvbm-replay flushes each instance's publisher after each request.

KvbmRouter is kvbm.KvRouter (policy kv or round_robin, the replay's defaults)
fed by a kvbm.KvIndexer from those events. With it the model must give
exactly the figures of `kvbm-replay --router kv` (and round_robin): the
requests, hit blocks per tier and computed tokens of every instance, the
prefix blocks the router predicted, and the TTFT mean and percentiles.
replay_figures() and model_figures() put both in one form;
tests/python/test_router_model.py checks them equal.

kvbm is imported only by KvbmRouter, so the module also runs under a Python
without it (sglang_real.py's).
"""

import heapq
import json
import math
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The LRU tier of the reference model (tools/tier_model/tier_model.py), whose rules this model
# follows: one class, so the two cannot drift apart.
sys.path.insert(0, os.path.join(ROOT, "tools", "tier_model"))
from tier_model import Tier  # noqa: E402

BLOCK_TOKENS = 512
G1_BLOCKS = 1000
TIERS = {"G1": 0, "G1+G2": 10000}  # configuration name -> G2 blocks per instance
G2_COST = 0.05  # kvbm's default tier_cost[G2], the cluster model's G2 copy cost
GPU, CPU = "GPU", "CPU"  # the media of kvbm's G1 and G2 events


def default_trace():
    for p in (os.path.join(ROOT, "examples", "data", "conversation_trace.jsonl"),
              os.path.join(ROOT, "..", "shared", "data", "conversation_trace.jsonl")):
        if os.path.exists(p):
            return p
    sys.exit("router_compare: no trace found; give --trace")


def load_trace(path, limit=None):
    """(arrival in s, input length, hash ids) per request, in file order; the first `limit`."""
    reqs = []
    with open(path) as f:
        for line in f:
            if limit is not None and len(reqs) >= limit:
                break
            if line.strip():
                o = json.loads(line)
                reqs.append((o["timestamp"] / 1000.0, o["input_length"], o["hash_ids"]))
    return reqs


def tokens_in_block(length, i):
    start = BLOCK_TOKENS * i
    return 0 if start >= length else min(BLOCK_TOKENS, length - start)


class Instance:
    """One kvbm-replay instance in metadata-only mode: G1 of `g1` blocks and G2
    of `g2` (0: none), G2 filled on G1 eviction, blocks released last block
    first. The rules are those of the reference model of kvbm's tiers
    (tools/tier_model/README.md, "One request" and "Copying a batch down"),
    which tests/tools/replay_model_test.py checks against kvbm-replay hit by
    hit, for G1 and G2 only:

    1. the prefix: each block from the fastest tier holding it (G1, then G2),
       taken (in use) there; the walk stops at the first block neither holds;
    2. the computed blocks: one G1 still holds is recomputed into that entry;
    3. one G1 allocation for the onboarded (G2) blocks and the computed ones
       that need an entry: G1 evicts the room it lacks in one batch, and that
       batch is copied to G2 as one batch: blocks G2 holds are refreshed
       first, then G2 evicts the room for the rest in one batch, then the
       rest are registered in eviction order;
    4. release: the G2 copies of the onboarded blocks, then the request's G1
       blocks, each last block first.

    Appends its KV events to `events` when that is a list, as a KvBlockManager
    publishes them: ("removed", medium, hashes) and ("stored", medium,
    parent, hashes), G1 as "GPU", G2 as "CPU"."""

    def __init__(self, g1, g2, events=None):
        self.g1 = Tier("G1", g1)
        self.g2 = Tier("G2", g2)
        self.events = events

    def _event(self, *event):
        if self.events is not None:
            self.events.append(event)

    def _copy_to_g2(self, keys):
        """Step 3's copy of G1's evicted batch `keys` to G2."""
        g2 = self.g2
        if not keys or not g2.capacity:
            return
        new = []
        for key in keys:
            if key in g2.free:
                g2.free.move_to_end(key)
            elif key not in g2.in_use:  # in use: refreshed at its release
                new.append(key)
        victims = g2.evict_for(len(new))
        if victims:
            self._event("removed", CPU, victims)
        room = g2.capacity - len(g2.free) - len(g2.in_use)
        copied = new[:max(0, room)]
        for key in copied:
            g2.free[key] = None
        for key in copied:  # one block each: a G2 copy has no parent in G2's order
            self._event("stored", CPU, None, [key])

    def _stored_runs(self, hashes, idx):
        """One G1 stored event per run of consecutive positions in `idx` (ascending)."""
        run = idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                self._event("stored", GPU, hashes[run - 1] if run > 0 else None,
                            hashes[run:a + 1])
                run = b

    def serve(self, hashes):
        """Serves one request; returns the tier (1: G1, 2: G2) of each block of its prefix."""
        g1, g2 = self.g1, self.g2
        cached = hashes[:g1.capacity]  # a longer request's tail is computed, never cached
        sources = []
        onboarded = []  # positions
        for key in cached:
            if key in g1:
                g1.take(key)
                sources.append(1)
            elif key in g2:
                g2.take(key)
                onboarded.append(len(sources))
                sources.append(2)
            else:
                break
        p = len(sources)
        fresh = onboarded + [i for i in range(p, len(cached)) if cached[i] not in g1.free]
        for key in cached[p:]:
            if key in g1.free:
                g1.take(key)
        victims = g1.evict_for(len(fresh))
        if victims:
            self._event("removed", GPU, victims)
        self._copy_to_g2(victims)
        g1.in_use.update(cached[i] for i in fresh)
        if fresh:
            self._stored_runs(hashes, sorted(fresh))
        for i in reversed(onboarded):
            g2.release(cached[i])
        for key in reversed(cached):
            g1.release(key)
        return sources


class Cluster:
    """kvbm-replay's cluster model (tools/replay/cluster.cpp) for a Python router,
    and what it counts per instance."""

    def __init__(self, n, g2, rate, events=False):
        self.n = n
        self.rate = rate
        self.events = [[] for _ in range(n)] if events else None
        self.inst = [Instance(G1_BLOCKS, g2, self.events[k] if events else None)
                     for k in range(n)]
        self.busy = [0.0] * n
        self.ttft = []
        self.requests = [0] * n
        self.blocks = [0] * n
        self.hit_blocks = [[0, 0] for _ in range(n)]  # per instance: G1, G2
        self.computed_tokens = [0] * n

    def finish(self, k, arrival, length, g2_tokens, hit_tokens):
        """The request's simulated prefill on instance k; returns when it ends.
        The work is summed as Cluster::completed sums it (G1 tokens cost 0)."""
        computed = max(length - hit_tokens, 0)
        work = computed * 1.0 + G2_COST * g2_tokens
        start = max(arrival, self.busy[k])
        end = start + work / self.rate
        self.busy[k] = end
        self.ttft.append(end - arrival)
        self.requests[k] += 1
        self.computed_tokens[k] += computed
        return end


def percentile(v, q):
    """As cluster.cpp's percentile(): the value at ceil(q n) - 1 of the sorted values."""
    if not v:
        return 0.0
    s = sorted(v)
    i = math.ceil(q * len(s)) - 1
    return s[min(i, len(s) - 1)]


class Result:
    """What one simulation gave."""

    def __init__(self, cluster, router):
        self.cluster = cluster
        self.router = router

    @property
    def hit_ratio(self):
        blocks = sum(self.cluster.blocks)
        return sum(map(sum, self.cluster.hit_blocks)) / blocks if blocks else 0.0

    def ttft(self, q):
        return percentile(self.cluster.ttft, q)

    @property
    def p99(self):
        return self.ttft(0.99)

    def ttft_mean(self):
        total = 0.0
        for t in self.cluster.ttft:  # in order, one addition at a time, as cluster.cpp sums
            total += t
        return total / len(self.cluster.ttft) if self.cluster.ttft else 0.0


def simulate(trace, n, g2, rate, router):
    """Replays `trace` through n model instances behind `router`, an object with
    attach(cluster), route(arrival, length, hashes) -> (k, token), started(k, token,
    prefix), finished(k, token), extra() and, when its wants_events is true,
    apply_events(k, events). Returns a Result."""
    cl = Cluster(n, g2, rate, events=getattr(router, "wants_events", False))
    router.attach(cl)
    in_flight = []  # (end, seq, k, token)
    for seq, (arrival, length, hashes) in enumerate(trace):
        while in_flight and in_flight[0][0] <= arrival:
            _, _, k, tok = heapq.heappop(in_flight)
            router.finished(k, tok)
        k, tok = router.route(arrival, length, hashes)
        src = cl.inst[k].serve(hashes)
        p = len(src)
        hit_tokens = sum(tokens_in_block(length, i) for i in range(p))
        g2_tokens = sum(tokens_in_block(length, i) for i in range(p) if src[i] == 2)
        end = cl.finish(k, arrival, length, g2_tokens, hit_tokens)
        cl.blocks[k] += len(hashes)
        for s in src:
            cl.hit_blocks[k][s - 1] += 1
        router.started(k, tok, p)
        if cl.events is not None:
            router.apply_events(k, cl.events[k])
            cl.events[k].clear()
        heapq.heappush(in_flight, (end, seq, k, tok))
    return Result(cl, router)


class KvbmRouter:
    """kvbm's own router, kvbm.KvRouter, on the model: its kvbm.KvIndexer fed
    every instance's G1 and G2 events (kvbm.BlockStored, kvbm.BlockRemoved) as
    one batch per request, the instances added as kvbm-replay adds them
    ("instance-<k>", in order), the replay's options (block size 512, the
    library's default weights and seed unless `options` says otherwise)."""

    wants_events = True

    def __init__(self, policy="kv", **options):
        self.policy = policy
        self.options = options

    def attach(self, cl):
        import kvbm  # noqa: PLC0415 (only this router needs the bindings)

        self.kvbm = kvbm
        self.index = kvbm.KvIndexer()
        self.ids = [self.index.add_instance(f"instance-{k}") for k in range(cl.n)]
        self.position = {i: k for k, i in enumerate(self.ids)}
        self.router = kvbm.KvRouter(self.index, policy=self.policy, block_size=BLOCK_TOKENS,
                                    **self.options)
        self.sequence = [0] * cl.n
        self.predicted = 0  # prefix blocks the router's decisions expected

    def route(self, arrival, length, hashes):
        d = self.router.route(hashes, length)
        self.predicted += d.overlap.prefix_blocks
        return self.position[d.instance], d

    def started(self, k, decision, prefix):
        pass  # route() has put the decision's tokens on the instance's load

    def finished(self, k, decision):
        self.router.finish(decision)

    def apply_events(self, k, events):
        if not events:
            return  # kvbm-replay's publisher sends no empty batch either
        batch = []
        for ev in events:
            if ev[0] == "stored":
                batch.append(self.kvbm.BlockStored(ev[3], parent_block_hash=ev[2], medium=ev[1],
                                                   block_size=BLOCK_TOKENS))
            else:
                batch.append(self.kvbm.BlockRemoved(ev[2], medium=ev[1]))
        status = self.index.apply(self.ids[k], self.sequence[k], batch)
        assert status[0] == "applied", f"instance {k}: batch {self.sequence[k]} {status}"
        self.sequence[k] += 1

    def extra(self):
        return f"prefix blocks predicted {self.predicted:,}"


def kvbm_replay_args(binary, trace_path, n, g2, policy, limit=None):
    tier = ["--host-blocks", str(g2), "--disk-blocks", "0"] if g2 else ["--host-blocks", "0"]
    lim = ["--limit", str(limit)] if limit is not None else []
    return [binary, "--quiet", "--metadata-only", "--json", "--trace", trace_path,
            "--instances", str(n), "--device-blocks", str(G1_BLOCKS), *tier, *lim,
            "--router", policy]


def run_replay(binary, trace_path, n, g2, policy, limit=None):
    """kvbm-replay's JSON "result" for the configuration."""
    cmd = kvbm_replay_args(binary, trace_path, n, g2, policy, limit)
    # kvbm-replay is a release build: a sanitizer runtime preloaded into this python (the
    # python-asan and python-tsan stages of scripts/test.sh) is not for it.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)["result"]


FIGURES = ("requests", "hit_blocks_G1", "hit_blocks_G2", "computed_tokens",
           "predicted_prefix_blocks", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s")


def replay_figures(result):
    """The figures the model must reproduce, from kvbm-replay's JSON result."""
    c = result["cluster"]
    each = result["instances"]["each"]
    return {
        "requests": [x["requests"] for x in each],
        "hit_blocks_G1": [x["hit_blocks"]["G1"] for x in each],
        "hit_blocks_G2": [x["hit_blocks"]["G2"] for x in each],
        "computed_tokens": list(c["computed_tokens"]),
        "predicted_prefix_blocks": c["predicted_prefix_blocks"],
        "ttft_mean_s": c["ttft_s"]["mean"],
        "ttft_p50_s": c["ttft_s"]["p50"],
        "ttft_p90_s": c["ttft_s"]["p90"],
        "ttft_p99_s": c["ttft_s"]["p99"],
    }


def model_figures(result):
    """The same figures from a simulation behind a KvbmRouter."""
    cl = result.cluster
    return {
        "requests": list(cl.requests),
        "hit_blocks_G1": [h[0] for h in cl.hit_blocks],
        "hit_blocks_G2": [h[1] for h in cl.hit_blocks],
        "computed_tokens": list(cl.computed_tokens),
        "predicted_prefix_blocks": result.router.predicted,
        "ttft_mean_s": result.ttft_mean(),
        "ttft_p50_s": result.ttft(0.50),
        "ttft_p90_s": result.ttft(0.90),
        "ttft_p99_s": result.ttft(0.99),
    }


def differences(replay, model):
    """The figures that differ, as 'name: replay ... model ...' lines (none: equal)."""
    return [f"{k}: kvbm-replay {replay[k]!r}, model {model[k]!r}" for k in FIGURES
            if replay[k] != model[k]]
