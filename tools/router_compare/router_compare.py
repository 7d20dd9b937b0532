#!/usr/bin/env python3
"""kvbm's router beside SGLang's cache_aware and Dynamo's default, on one cluster model.

Replays the shipped trace (examples/data/conversation_trace.jsonl, metadata
only) through 4 and 8 instances, G1 only (1,000 blocks each) and G1 + G2
(1,000 + 10,000), and prints the block hit ratio and p99 time to first token
per router:

- kvbm: `kvbm-replay --instances N --router kv` at its default flags (the
  real router and the real KvBlockManagers);
- dynamo: Dynamo 1.6.1's real indexer, `dynamo._core.RadixTree` from the
  ai-dynamo-runtime wheel, fed the instances' G1 events, with Dynamo's default
  cost re-expressed here (see dynamo_select);
- sglang: SGLang's cache_aware policy (sglang-router 0.3.2, defaults),
  re-expressed here (see SglangCacheAware): its policy lives in the Rust
  router server only; with --sglang-python, also that real router, over
  HTTP in front of tiny workers (sglang_real.py);
- round_robin, in both: kvbm-replay's and this model's, which must agree
  exactly (the check that the Python instance model is kvbm-replay's).

The peers run on a Python model of kvbm-replay's instances (Instance: G1 LRU
with tail-first release, G2 filled on G1 eviction, kvbm-replay's onboarding)
and of its cluster (each instance prefills one request at a time, in arrival
order; prefill time = (computed tokens + G2 hit tokens x 0.05) / prefill
tokens per second, the rate kvbm-replay reports). A request is in flight, for
every router's load, from its arrival until its simulated prefill ends.

    build/engines-venv/bin/python tools/router_compare/router_compare.py \\
        --replay build/rcmp/tools/replay/kvbm-replay \\
        [--sglang-python build/rcmp-peers/venv/bin/python]

Without dynamo._core importable the dynamo column is skipped.
"""

import argparse
import heapq
import json
import math
import os
import random
import subprocess
import sys
from collections import OrderedDict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BLOCK_TOKENS = 512
G1_BLOCKS = 1000
TIERS = {"G1": 0, "G1+G2": 10000}
INSTANCES = (4, 8)
G2_COST = 0.05  # kvbm's default tier_cost[G2], the cluster model's G2 copy cost


def default_trace():
    for p in (os.path.join(ROOT, "examples", "data", "conversation_trace.jsonl"),
              os.path.join(ROOT, "..", "shared", "data", "conversation_trace.jsonl")):
        if os.path.exists(p):
            return p
    sys.exit("router_compare: no trace found; give --trace")


def load_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                reqs.append((o["timestamp"] / 1000.0, o["input_length"], o["hash_ids"]))
    return reqs


def tokens_in_block(length, i):
    start = BLOCK_TOKENS * i
    return 0 if start >= length else min(BLOCK_TOKENS, length - start)


class Instance:
    """One kvbm-replay instance in metadata-only mode (tools/replay/replay.cpp,
    Replay::replay_request): G1 of `g1` blocks, evicting its least recently
    released block first; G2 of `g2` blocks (0: none) filled on G1 eviction,
    LRU too. Collects Dynamo-format G1 events when `events` is a list."""

    def __init__(self, g1, g2, events=None):
        self.g1_total = g1
        self.g1_free = g1          # never-registered blocks
        self.g1 = set()            # hashes registered in G1
        self.g1_lru = OrderedDict()  # released (evictable) G1 blocks, oldest first
        self.g2_total = g2
        self.g2 = OrderedDict()    # G2 blocks, oldest first
        self.events = events

    def _evict_one(self):
        h, _ = self.g1_lru.popitem(last=False)
        self.g1.discard(h)
        if self.events is not None:
            self.events.append(("removed", [h]))
        if self.g2_total:
            if h in self.g2:
                self.g2.move_to_end(h)
            else:
                if len(self.g2) >= self.g2_total:
                    self.g2.popitem(last=False)
                self.g2[h] = None

    def _allocate(self, k):
        """k fresh G1 blocks (evicting), or None when fewer are available."""
        if k == 0 or k > self.g1_free + len(self.g1_lru):
            return None
        from_free = min(k, self.g1_free)
        self.g1_free -= from_free
        for _ in range(k - from_free):
            self._evict_one()
        return k

    def _stored(self, hashes, i0, i1):
        if self.events is not None and i1 > i0:
            self.events.append(("stored", hashes[i0 - 1] if i0 > 0 else None, hashes[i0:i1]))

    def _stored_runs(self, hashes, idx):
        """One stored event per run of consecutive positions in `idx` (ascending)."""
        if not idx:
            return
        run = idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                self._stored(hashes, run, a + 1)
                run = b

    def serve(self, hashes):
        """Serves one request; returns the tier (1: G1, 2: G2) of each block of its prefix."""
        n = len(hashes)
        # The prefix held in G1 or G2.
        p = 0
        sources = []
        while p < n and (hashes[p] in self.g1 or hashes[p] in self.g2):
            sources.append(1 if hashes[p] in self.g1 else 2)
            p += 1
        held = [False] * n
        # Blocks after the prefix still in G1 are taken first (scan_matches).
        for i in range(p, n):
            if hashes[i] in self.g1:
                self.g1_lru.pop(hashes[i], None)
                held[i] = True
        # Onboard: G1 blocks taken, G2 blocks brought into G1.
        for i in range(p):
            if sources[i] == 1:
                self.g1_lru.pop(hashes[i], None)
                held[i] = True
        g2_idx = [i for i in range(p) if sources[i] == 2]
        if g2_idx:
            got = self._allocate(len(g2_idx))
            assert got, "G1 cannot hold a request's G2 prefix"
            for i in g2_idx:
                self.g1.add(hashes[i])
                held[i] = True
                if hashes[i] in self.g2:
                    self.g2.move_to_end(hashes[i])
            self._stored_runs(hashes, g2_idx)
        # The rest is computed: fresh blocks for the leading missing ones.
        missing = [i for i in range(p, n) if not held[i]]
        if missing:
            need = len(missing)
            fit = need if self._allocate(need) else 0
            if not fit:
                fit = min(need, self.g1_free + len(self.g1_lru))
                if not self._allocate(fit):
                    fit = 0
            cached = missing[:fit]
            for i in cached:
                self.g1.add(hashes[i])
                held[i] = True
            self._stored_runs(hashes, cached)
        # Released last block first.
        for i in range(n - 1, -1, -1):
            if held[i]:
                self.g1_lru[hashes[i]] = None
        return sources


class Cluster:
    """kvbm-replay's cluster model (tools/replay/cluster.cpp) for a Python router."""

    def __init__(self, n, g2, rate, events=False):
        self.n = n
        self.rate = rate
        self.events = [[] for _ in range(n)] if events else None
        self.inst = [Instance(G1_BLOCKS, g2, self.events[k] if events else None)
                     for k in range(n)]
        self.busy = [0.0] * n
        self.ttft = []

    def finish(self, k, arrival, length, g2_tokens, hit_tokens):
        computed = max(length - hit_tokens, 0)
        work = computed + G2_COST * g2_tokens
        start = max(arrival, self.busy[k])
        end = start + work / self.rate
        self.busy[k] = end
        self.ttft.append(end - arrival)
        return end


def percentile(v, q):
    if not v:
        return 0.0
    s = sorted(v)
    i = math.ceil(q * len(s)) - 1
    return s[min(i, len(s) - 1)]


def simulate(trace, n, g2, rate, router):
    """Replays `trace` through n Python instances behind `router` (an object
    with route(arrival, length, hashes, cluster) -> k, started(k, ...) and
    finished(k, token)); returns (block hit ratio, p99 TTFT, extra)."""
    cl = Cluster(n, g2, rate, events=getattr(router, "wants_events", False))
    router.attach(cl)
    in_flight = []  # (end, seq, k, token)
    seq = 0
    hits = blocks = 0
    for arrival, length, hashes in trace:
        while in_flight and in_flight[0][0] <= arrival:
            _, _, k, tok = heapq.heappop(in_flight)
            router.finished(k, tok)
        k, tok = router.route(arrival, length, hashes)
        inst = cl.inst[k]
        # Sources by tier, to charge the G2 hits' tokens their copy cost.
        n_blocks = len(hashes)
        src = inst.serve(hashes)
        p = len(src)
        hit_tokens = sum(tokens_in_block(length, i) for i in range(p))
        g2_tokens = sum(tokens_in_block(length, i) for i in range(p) if src[i] == 2)
        end = cl.finish(k, arrival, length, g2_tokens, hit_tokens)
        hits += p
        blocks += n_blocks
        router.started(k, tok, p)
        if cl.events is not None:
            router.apply_events(k, cl.events[k])
            cl.events[k].clear()
        heapq.heappush(in_flight, (end, seq, k, tok))
        seq += 1
    return hits / blocks, percentile(cl.ttft, 0.99), router.extra()


class RoundRobin:
    """KvRouter's kRoundRobin: the next instance after the last one chosen."""

    def __init__(self, first=0):
        self.next = first

    def attach(self, cl):
        self.n = cl.n

    def route(self, arrival, length, hashes):
        k = self.next % self.n
        self.next = k + 1
        return k, None

    def started(self, k, tok, prefix):
        pass

    def finished(self, k, tok):
        pass

    def extra(self):
        return ""


class DynamoDefault:
    """Dynamo 1.6.1's default KV routing, on its real RadixTree.

    Overlap: `dynamo._core.RadixTree.find_matches` over the request's block
    hashes, the tree fed every instance's G1 events (BlockStored with parent,
    BlockRemoved) in the JSON form tests/engines/test_dynamo_indexer.py uses.
    The tree takes no tier: G2 is invisible to it, as to Dynamo's binding.

    Selection, re-expressed from lib/kv-router/src/scheduling/selector.rs
    (DefaultWorkerSelector) with KvRouterConfig's 1.6.1 defaults
    (dynamo/_core.pyi: overlap_score_credit 1.0, credit decay 0,
    prefill_load_scale 1.0, router_temperature 0, decode_active_request_weight
    0, router_track_active_blocks and router_assume_kv_reuse on):

        prefill = (active prefill tokens + request tokens) / block_size
                  - overlap_score_credit * overlap blocks      (clamped at 0)
        decode  = distinct blocks of the worker's active requests and this one
        cost    = prefill_load_scale * prefill + decode

    least cost wins; temperature 0 breaks ties at random (seeded here). A
    request's prefill tokens (its tokens minus the overlap it was routed on)
    and its blocks stay on the worker until its simulated prefill ends: the
    cluster model has no decode phase."""

    wants_events = True

    def __init__(self, core, seed=0):
        self.core = core
        self.rng = random.Random(seed)
        self.event_id = 0
        self.rejected = 0

    def attach(self, cl):
        self.n = cl.n
        self.cl = cl
        self.mismatches = 0
        self.tree = self.core.RadixTree()
        self.prefill = [0] * cl.n
        self.active = [dict() for _ in range(cl.n)]  # block -> refcount

    def route(self, arrival, length, hashes):
        # Keyed by (worker id, data-parallel rank); every instance is rank 0.
        scores = {(w[0] if isinstance(w, tuple) else w): v
                  for w, v in self.tree.find_matches(list(hashes)).scores.items()}
        for k, inst in enumerate(self.cl.inst):  # the tree agrees with each G1
            m = 0
            while m < len(hashes) and hashes[m] in inst.g1:
                m += 1
            self.mismatches += scores.get(k, 0) != m
        costs = []
        for k in range(self.n):
            ov = scores.get(k, 0)
            pre = max((self.prefill[k] + length) / BLOCK_TOKENS - 1.0 * ov, 0.0)
            act = self.active[k]
            dec = len(act) + sum(1 for h in hashes if h not in act)
            costs.append(1.0 * pre + dec)
        best = min(costs)
        ties = [k for k in range(self.n) if costs[k] == best]
        k = ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]
        ov = scores.get(k, 0)
        new_tokens = max(length - ov * BLOCK_TOKENS, 0)
        return k, (new_tokens, list(hashes))

    def started(self, k, tok, prefix):
        new_tokens, hashes = tok
        self.prefill[k] += new_tokens
        act = self.active[k]
        for h in hashes:
            act[h] = act.get(h, 0) + 1

    def finished(self, k, tok):
        new_tokens, hashes = tok
        self.prefill[k] -= new_tokens
        act = self.active[k]
        for h in hashes:
            c = act[h] - 1
            if c:
                act[h] = c
            else:
                del act[h]

    def apply_events(self, k, events):
        for ev in events:
            self.event_id += 1
            if ev[0] == "stored":
                blocks = [{"block_hash": h, "tokens_hash": h} for h in ev[2]]
                data = {"stored": {"parent_hash": ev[1], "blocks": blocks}}
            else:
                data = {"removed": {"block_hashes": ev[1]}}
            try:
                self.tree.apply_event(k, json.dumps({"event_id": self.event_id,
                                                     "data": data}).encode())
            except Exception:  # noqa: BLE001 (the tree refuses what it cannot place)
                self.rejected += 1

    def extra(self):
        return (f"events refused by the RadixTree: {self.rejected}, overlaps differing "
                f"from the instances' G1 prefix: {self.mismatches}")


class SglangCacheAware:
    """SGLang's cache_aware policy (sglang-router 0.3.2), re-expressed.

    Source read: sgl-router/src/policies/cache_aware.rs (select_worker,
    select_worker_min_load; the 0.3.2 binary has select_worker_min_load, and
    sent one request at a time it sends all of them to one worker, as this
    version does and the older smallest-tree fallback would not) and
    sgl-router/src/policies/tree.rs (Tree::insert, prefix_match,
    evict_tenant_by_size); defaults from the wheel's router_args.py:
    cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5,
    eviction_interval_secs 60, max_tree_size 2**26 characters.

    - load = the worker's requests in flight (sent, not finished);
      imbalanced when max - min > 64 and max > 1.5 * min: the least loaded
      worker (the first of equals in the router's worker list, whose order
      is that of registration: a seeded permutation here), and the request
      is inserted in its tree;
    - otherwise the longest prefix any worker's approximate tree holds; the
      worker is a tenant of the deepest matched node (the first key of a
      hash map with a random seed: here drawn with a seeded generator); if
      matched / request characters > 0.3, that worker, else the least
      loaded (first of equals, as above; `fallback="smallest_tree"`: the one
      whose tree has the fewest characters, as older versions did); the
      request is inserted for it;
    - every 60 s (trace time), each worker's tree beyond max_tree_size
      characters loses its least recently used leaves.

    The real tree holds the request's text; this one holds the trace's block
    ids (each id names a whole prefix, so a block is a node), and a block of
    t tokens counts t * chars_per_token characters (4 by default, an
    assumption: the trace has no text)."""

    def __init__(self, seed=0, chars_per_token=4, cache_threshold=0.3, abs_threshold=64,
                 rel_threshold=1.5, eviction_interval=60.0, max_tree_size=2 ** 26,
                 fallback="min_load"):
        self.rng = random.Random(seed)
        self.fallback = fallback
        self.cpt = chars_per_token
        self.th = cache_threshold
        self.abs_th = abs_threshold
        self.rel_th = rel_threshold
        self.interval = eviction_interval
        self.max_size = max_tree_size
        self.balanced_decisions = 0
        self.lb_decisions = 0

    def attach(self, cl):
        self.n = cl.n
        self.order = list(range(cl.n))  # the router's worker list
        self.rng.shuffle(self.order)
        self.load = [0] * cl.n
        self.nodes = {}      # block id -> {tenant: last access}
        self.parent = {}     # block id -> parent id (None at the root)
        self.chars = {}      # block id -> characters of its text
        self.child_count = {}  # (block id, tenant) -> children holding tenant
        self.size = [0] * cl.n
        self.clock = 0
        self.next_evict = self.interval

    def _touch_path(self, hashes, upto, k):
        for i in range(upto):
            self.nodes[hashes[i]][k] = self.clock

    def _insert(self, hashes, length, k):
        prev = None
        for i, h in enumerate(hashes):
            ten = self.nodes.get(h)
            if ten is None:
                ten = self.nodes[h] = {}
                self.parent[h] = prev
                self.chars[h] = tokens_in_block(length, i) * self.cpt
            if k not in ten:
                self.size[k] += self.chars[h]
                if prev is not None:
                    key = (prev, k)
                    self.child_count[key] = self.child_count.get(key, 0) + 1
            ten[k] = self.clock
            prev = h

    def _evict(self):
        for k in range(self.n):
            if self.size[k] <= self.max_size:
                continue
            leaves = [(ten[k], h) for h, ten in self.nodes.items()
                      if k in ten and not self.child_count.get((h, k))]
            heapq.heapify(leaves)
            while leaves and self.size[k] > self.max_size:
                _, h = heapq.heappop(leaves)
                ten = self.nodes[h]
                del ten[k]
                self.size[k] -= self.chars[h]
                p = self.parent[h]
                if not ten:
                    del self.nodes[h]
                    del self.parent[h]
                    del self.chars[h]
                if p is not None:
                    key = (p, k)
                    self.child_count[key] -= 1
                    if not self.child_count[key]:
                        del self.child_count[key]
                        heapq.heappush(leaves, (self.nodes[p][k], p))

    def route(self, arrival, length, hashes):
        self.clock += 1  # access order (the real tree stamps milliseconds)
        while arrival >= self.next_evict:
            self._evict()
            self.next_evict += self.interval
        mx, mn = max(self.load), min(self.load)
        least = min(self.order, key=lambda j: self.load[j])  # min_by_key: first of equals
        if mx - mn > self.abs_th and mx > mn * self.rel_th:
            k = least
            self.lb_decisions += 1
        else:
            self.balanced_decisions += 1
            m = 0
            while m < len(hashes) and hashes[m] in self.nodes:
                m += 1
            text = length * self.cpt
            matched = sum(tokens_in_block(length, i) for i in range(m)) * self.cpt
            k = None
            if m:
                tenants = list(self.nodes[hashes[m - 1]])
                k = tenants[self.rng.randrange(len(tenants))]
                self._touch_path(hashes, m, k)
            if not (text and matched / text > self.th):
                if self.fallback == "min_load":
                    k = least
                else:  # get_smallest_tenant: the first of equals, in the map's order
                    k = min(self.order, key=lambda j: self.size[j])
        self._insert(hashes, length, k)
        return k, None

    def started(self, k, tok, prefix):
        self.load[k] += 1

    def finished(self, k, tok):
        self.load[k] -= 1

    def extra(self):
        return (f"cache-aware decisions {self.balanced_decisions}, "
                f"load-balancing {self.lb_decisions}")


def kvbm_replay(binary, trace, n, g2, router_args):
    tier = ["--host-blocks", str(g2), "--disk-blocks", "0"] if g2 else ["--host-blocks", "0"]
    out = subprocess.run([binary, "--quiet", "--metadata-only", "--json", "--trace", trace,
                          "--instances", str(n), *tier, *router_args],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)["result"]
    c = r["cluster"]
    return r["hits"]["total"]["block_ratio"], c["ttft_s"]["p99"], c["prefill_tokens_per_s"]


def cell(v):
    if v is None:
        return "-"
    if len(v) == 2:
        return f"{100 * v[0]:.2f}% / {v[1]:.2f} s"
    return (f"{100 * v[0]:.2f}% ({100 * v[2]:.2f}-{100 * v[3]:.2f}) / "
            f"{v[1]:.2f} s ({v[4]:.2f}-{v[5]:.2f})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", default=os.path.join(ROOT, "build", "release", "tools", "replay",
                                                    "kvbm-replay"))
    p.add_argument("--trace", default=None)
    p.add_argument("--instances", default=",".join(map(str, INSTANCES)))
    p.add_argument("--kvbm-args", default="",
                   help="extra kvbm-replay router flags for an added kvbm row, "
                        "e.g. '--router-load-weight 0.1'")
    p.add_argument("--sglang-chars-per-token", type=float, default=4)
    p.add_argument("--sglang-seeds", default="0,1,2,3,4",
                   help="seeds of the tenant drawn at a matched node (mean and range shown)")
    p.add_argument("--sglang-python",
                   help="a Python with sglang-router 0.3.2 installed: adds a row for SGLang's "
                        "real router (sglang_real.py; about 25 minutes on 2 loaded cores)")
    p.add_argument("--json", help="every figure, as JSON")
    args = p.parse_args(argv)
    trace_path = args.trace or default_trace()
    trace = load_trace(trace_path)
    try:
        import dynamo._core as dynamo_core
    except ImportError:
        dynamo_core = None
        print("dynamo._core not importable: no dynamo column (run with build/engines-venv)",
              file=sys.stderr)
    rows = []
    for n in map(int, args.instances.split(",")):
        for tiers, g2 in TIERS.items():
            fig = {}
            rr_k = kvbm_replay(args.replay, trace_path, n, g2, ["--router", "round_robin"])
            rate = rr_k[2]
            fig["round_robin (kvbm-replay)"] = rr_k[:2]
            rr_py = simulate(trace, n, g2, rate, RoundRobin())
            fig["round_robin (Python model)"] = rr_py[:2]
            fig["kvbm kv, defaults"] = kvbm_replay(args.replay, trace_path, n, g2,
                                                   ["--router", "kv"])[:2]
            if args.kvbm_args:
                fig["kvbm kv " + args.kvbm_args] = kvbm_replay(
                    args.replay, trace_path, n, g2, ["--router", "kv", *args.kvbm_args.split()])[:2]
            sgs = [simulate(trace, n, g2, rate, SglangCacheAware(
                seed=int(s), chars_per_token=args.sglang_chars_per_token))
                for s in args.sglang_seeds.split(",")]
            hs, ps = [r[0] for r in sgs], [r[1] for r in sgs]
            fig["sglang cache_aware"] = (sum(hs) / len(hs), sum(ps) / len(ps),
                                         min(hs), max(hs), min(ps), max(ps))
            notes = {"sglang cache_aware": sgs[0][2]}
            if dynamo_core is not None:
                dy = simulate(trace, n, g2, rate, DynamoDefault(dynamo_core))
                fig["dynamo default"] = dy[:2]
                notes["dynamo default"] = dy[2]
            same = abs(rr_k[0] - rr_py[0]) < 1e-9 and abs(rr_k[1] - rr_py[1]) < 1e-6
            rows.append((n, tiers, fig, notes, same))
            print(f"# {n} x {tiers}: round-robin model matches kvbm-replay: {same}; "
                  + "; ".join(f"{k}: {v}" for k, v in notes.items()), file=sys.stderr, flush=True)
    if args.sglang_python:
        out = os.path.join(os.path.dirname(args.json or "/tmp/x"), "sglang-real.json")
        subprocess.run([args.sglang_python, os.path.join(os.path.dirname(__file__),
                                                         "sglang_real.py"),
                        "--replay", args.replay, "--trace", trace_path,
                        "--instances", args.instances, "--json", out], check=True)
        with open(out) as f:
            for r in json.load(f):
                for n, t, fig, _, _ in rows:
                    if (n, t) == (r["instances"], r["tiers"]):
                        fig["sglang cache_aware (real router)"] = (r["hit_ratio"],
                                                                   r["ttft_p99_s"])
    names = list(dict.fromkeys(name for _, _, f, _, _ in rows for name in f))
    print("| router | " + " | ".join(f"{n} x {t}: hits / p99 TTFT" for n, t, *_ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name in names:
        print(f"| {name} | " + " | ".join(cell(f.get(name)) for _, _, f, _, _ in rows) + " |")
    ok = all(r[4] for r in rows)
    if len(args.sglang_seeds.split(",")) > 1:
        print("\nsglang: mean over seeds " + args.sglang_seeds + " (min-max)")
    print(f"round-robin: the Python instance model reproduces kvbm-replay exactly: {ok}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"instances": n, "tiers": t, "router": name, "hit_ratio": v[0],
                        "ttft_p99_s": v[1], "range": v[2:]} for n, t, fig, _, _ in rows
                       for name, v in fig.items()], f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
