#!/usr/bin/env python3
"""kvbm's router beside SGLang's cache_aware and Dynamo's default, on one cluster model.

Replays the shipped trace (examples/data/conversation_trace.jsonl, metadata
only) through 2, 4 and 8 instances, G1 only (1,000 blocks each) and G1 + G2
(1,000 + 10,000), and prints the block hit ratio and p99 time to first token
per router. Every router places the requests on the same model of
kvbm-replay's cluster (cluster_model.py):

- kvbm: kvbm's own KvRouter through the Python bindings (kvbm.KvRouter at
  its default options, its kvbm.KvIndexer fed the instances' G1 and G2
  events), and the same KvRouter with policy round_robin. Both are checked
  against `kvbm-replay --router kv` / `--router round_robin` (the real router
  on the real KvBlockManagers): every instance's requests, hit blocks per
  tier and computed tokens, the prefix blocks the router predicted, and the
  TTFT mean, p50, p90 and p99 must be equal, or the run fails;
- dynamo: Dynamo 1.6.1's real indexer, `dynamo._core.RadixTree` from the
  ai-dynamo-runtime wheel, fed the instances' G1 events, with Dynamo's default
  cost re-expressed here (see DynamoDefault);
- sglang: SGLang's cache_aware policy (sglang-router 0.3.2, defaults),
  re-expressed here (see SglangCacheAware): its policy lives in the Rust
  router server only; with --sglang-python, also that real router, over
  HTTP in front of tiny workers (sglang_real.py).

    build/venv/bin/python tools/router_compare/router_compare.py \\
        --replay build/release/tools/replay/kvbm-replay \\
        [--sglang-python build/rcmp-peers/venv/bin/python]

The Python needs kvbm (pip install .) and, for the dynamo row,
ai-dynamo-runtime 1.6.1; without dynamo._core importable that row is left out.
"""

import argparse
import heapq
import json
import os
import random
import subprocess
import sys

from cluster_model import (BLOCK_TOKENS, GPU, ROOT, TIERS, KvbmRouter, default_trace,
                           differences, load_trace, model_figures, replay_figures, run_replay,
                           simulate, tokens_in_block)

INSTANCES = (2, 4, 8)


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
            if ev[1] != GPU:
                continue  # the tree takes no tier: Dynamo's router sees G1 only
            self.event_id += 1
            if ev[0] == "stored":
                blocks = [{"block_hash": h, "tokens_hash": h} for h in ev[3]]
                data = {"stored": {"parent_hash": ev[2], "blocks": blocks}}
            else:
                data = {"removed": {"block_hashes": ev[2]}}
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


def cell(v):
    if v is None:
        return "-"
    if len(v) == 2:
        return f"{100 * v[0]:.2f}% / {v[1]:.2f} s"
    return (f"{100 * v[0]:.2f}% ({100 * v[2]:.2f}-{100 * v[3]:.2f}) / "
            f"{v[1]:.2f} s ({v[4]:.2f}-{v[5]:.2f})")


def kvbm_rows(args, trace, trace_path, n, g2, rate, fig, notes):
    """kvbm's KvRouter (kv and round_robin) on the model, each checked against
    kvbm-replay run with the same router; returns the differences found."""
    found = []
    for policy, name in (("round_robin", "round-robin (kvbm's KvRouter)"),
                         ("kv", "kvbm kv, defaults")):
        replayed = replay_figures(run_replay(args.replay, trace_path, n, g2, policy))
        result = simulate(trace, n, g2, rate, KvbmRouter(policy))
        diff = differences(replayed, model_figures(result))
        found += [f"{n} x {'G1+G2' if g2 else 'G1'} {policy}: {d}" for d in diff]
        fig[name] = (result.hit_ratio, result.p99)
        notes[name] = f"{result.router.extra()}; equals kvbm-replay: {not diff}"
    for w in filter(None, args.kvbm_load_weights.split(",")):
        result = simulate(trace, n, g2, rate, KvbmRouter("kv", load_weight=float(w)))
        fig[f"kvbm kv, load weight {w}"] = (result.hit_ratio, result.p99)
    return found


def peer_rows(args, trace, n, g2, rate, fig, notes, dynamo_core):
    sgs = [simulate(trace, n, g2, rate, SglangCacheAware(
        seed=int(s), chars_per_token=args.sglang_chars_per_token))
        for s in args.sglang_seeds.split(",")]
    hs, ps = [r.hit_ratio for r in sgs], [r.p99 for r in sgs]
    fig["sglang cache_aware"] = (sum(hs) / len(hs), sum(ps) / len(ps),
                                 min(hs), max(hs), min(ps), max(ps))
    notes["sglang cache_aware"] = sgs[0].router.extra()
    if dynamo_core is not None:
        dy = simulate(trace, n, g2, rate, DynamoDefault(dynamo_core))
        fig["dynamo default"] = (dy.hit_ratio, dy.p99)
        notes["dynamo default"] = dy.router.extra()


def real_sglang_rows(args, trace_path, rows):
    out = os.path.join(os.path.dirname(args.json or "/tmp/x"), "sglang-real.json")
    subprocess.run([args.sglang_python, os.path.join(os.path.dirname(__file__), "sglang_real.py"),
                    "--replay", args.replay, "--trace", trace_path,
                    "--instances", args.instances, "--json", out], check=True)
    with open(out) as f:
        for r in json.load(f):
            for n, t, fig, _ in rows:
                if (n, t) == (r["instances"], r["tiers"]):
                    fig["sglang cache_aware (real router)"] = (r["hit_ratio"], r["ttft_p99_s"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", default=os.path.join(ROOT, "build", "release", "tools", "replay",
                                                    "kvbm-replay"))
    p.add_argument("--trace", default=None)
    p.add_argument("--instances", default=",".join(map(str, INSTANCES)))
    p.add_argument("--kvbm-load-weights", default="",
                   help="extra kvbm kv rows at these load weights, e.g. 0.01,0.1")
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
        print("dynamo._core not importable: no dynamo row (install ai-dynamo-runtime 1.6.1)",
              file=sys.stderr)
    rows, found = [], []
    for n in map(int, args.instances.split(",")):
        for tiers, g2 in TIERS.items():
            fig, notes = {}, {}
            rate = run_replay(args.replay, trace_path, n, g2,
                              "round_robin")["cluster"]["prefill_tokens_per_s"]
            found += kvbm_rows(args, trace, trace_path, n, g2, rate, fig, notes)
            peer_rows(args, trace, n, g2, rate, fig, notes, dynamo_core)
            rows.append((n, tiers, fig, notes))
            print(f"# {n} x {tiers}: " + "; ".join(f"{k}: {v}" for k, v in notes.items()),
                  file=sys.stderr, flush=True)
    if args.sglang_python:
        real_sglang_rows(args, trace_path, rows)
    names = list(dict.fromkeys(name for _, _, f, _ in rows for name in f))
    print("| router | " + " | ".join(f"{n} x {t}: hits / p99 TTFT" for n, t, *_ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name in names:
        print(f"| {name} | " + " | ".join(cell(f.get(name)) for _, _, f, _ in rows) + " |")
    if len(args.sglang_seeds.split(",")) > 1:
        print("\nsglang: mean over seeds " + args.sglang_seeds + " (min-max)")
    for d in found:
        print("differs from kvbm-replay: " + d)
    print("kvbm's KvRouter on the model equals kvbm-replay (kv and round_robin: requests, hit "
          f"blocks per tier and computed tokens per instance, TTFT) everywhere: {not found}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"instances": n, "tiers": t, "router": name, "hit_ratio": v[0],
                        "ttft_p99_s": v[1], "range": v[2:]} for n, t, fig, _ in rows
                       for name, v in fig.items()], f, indent=1)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
