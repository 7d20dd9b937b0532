#!/usr/bin/env python3
"""An independent reference model of kvbm's three-tier LRU hierarchy.

Reads a Mooncake trace (JSON Lines: timestamp, input_length, output_length,
hash_ids) and replays it, request after request in file order, through three
LRU tiers: G1 (device), G2 (pinned host) and G3 (disk). It prints the blocks
each tier served and what moved between the tiers; --json emits the same.

Standard library only. The semantics are stated in README.md beside this
file; every rule there is one function or one loop here.
"""

import argparse
import json
import os
import sys
import time
from collections import OrderedDict

ON_EVICTION = "on_eviction"
WRITE_THROUGH = "write_through"
MODES = (ON_EVICTION, WRITE_THROUGH)
TAIL_FIRST = "tail_first"  # kvbm's order: a request's last block is released first
HEAD_FIRST = "head_first"  # the order of the reference LRU figures (examples/data/README.md)
RELEASE_ORDERS = (TAIL_FIRST, HEAD_FIRST)
TIER_NAMES = ("G1", "G2", "G3")

DEFAULT_BLOCK_TOKENS = 512
DEFAULT_CAPACITIES = (1000, 10000, 50000)
DEFAULT_TRACE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
    "examples", "data", "conversation_trace.jsonl")


# --------------------------------------------------------------------------
# Trace


class Request:
    """One request: its block keys (prefix identities) and its token count."""

    __slots__ = ("keys", "input_length", "block_tokens", "last_block_tokens")

    def __init__(self, keys, input_length, block_tokens):
        self.keys = keys
        self.input_length = input_length
        self.block_tokens = block_tokens
        # The last block holds what is left of the prompt (at most a block).
        last = input_length - block_tokens * (len(keys) - 1)
        self.last_block_tokens = min(block_tokens, max(0, last))

    def tokens(self, index):
        """Tokens block `index` holds."""
        if index == len(self.keys) - 1:
            return self.last_block_tokens
        return self.block_tokens


class Trace:
    """Requests in file order, with the lines that were skipped."""

    def __init__(self, block_tokens=DEFAULT_BLOCK_TOKENS):
        self.block_tokens = block_tokens
        self.requests = []
        self.skipped = []  # "source:line: reason"
        self._prefix_ids = {}  # (parent key, hash id) -> key

    def add(self, hash_ids, input_length):
        """Appends a request; block i's key stands for hash_ids[0..i]."""
        keys = []
        parent = -1
        intern = self._prefix_ids
        for hash_id in hash_ids:
            key = intern.get((parent, hash_id))
            if key is None:
                key = len(intern)
                intern[(parent, hash_id)] = key
            keys.append(key)
            parent = key
        self.requests.append(Request(keys, input_length, self.block_tokens))

    @property
    def unique_blocks(self):
        return len(self._prefix_ids)


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_trace(lines, source="<trace>", block_tokens=DEFAULT_BLOCK_TOKENS):
    """Parses JSON Lines; an invalid line is recorded in `skipped`, not fatal."""
    trace = Trace(block_tokens)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            trace.skipped.append(f"{source}:{number}: not JSON ({error})")
            continue
        if not isinstance(record, dict):
            trace.skipped.append(f"{source}:{number}: not a JSON object")
            continue
        hash_ids = record.get("hash_ids")
        input_length = record.get("input_length")
        if not isinstance(hash_ids, list) or not all(map(_is_count, hash_ids)):
            trace.skipped.append(
                f"{source}:{number}: hash_ids must be a list of non-negative integers")
            continue
        if not _is_count(input_length):
            trace.skipped.append(
                f"{source}:{number}: input_length must be a non-negative integer")
            continue
        trace.add(hash_ids, input_length)
    return trace


def load_trace(path, block_tokens=DEFAULT_BLOCK_TOKENS):
    with open(path, encoding="utf-8") as lines:
        return parse_trace(lines, path, block_tokens)


# --------------------------------------------------------------------------
# Tiers


class Tier:
    """An LRU tier: blocks not in use in LRU order, blocks in use apart.

    `free` runs from least to most recently used. Blocks in `in_use` belong
    to the current request and cannot be evicted.
    """

    def __init__(self, name, capacity):
        self.name = name
        self.capacity = capacity
        self.free = OrderedDict()
        self.in_use = set()
        self.evictions = 0

    def __contains__(self, key):
        return key in self.free or key in self.in_use

    def occupied(self):
        return len(self.free) + len(self.in_use)

    def take(self, key):
        """Marks a held block in use (it leaves the LRU order)."""
        del self.free[key]
        self.in_use.add(key)

    def release(self, key):
        """Returns a block in use to the most recent end."""
        self.in_use.discard(key)
        self.free[key] = None

    def evict_for(self, count):
        """Evicts LRU free blocks so that `count` more fit; returns them oldest first."""
        need = min(self.occupied() + count - self.capacity, len(self.free))
        victims = [self.free.popitem(last=False)[0] for _ in range(max(0, need))]
        self.evictions += len(victims)
        return victims


# --------------------------------------------------------------------------
# The model


class Counts:
    """Everything one replay counts."""

    def __init__(self):
        self.requests = 0
        self.blocks = 0
        self.prompt_tokens = 0
        self.hit_blocks = [0, 0, 0]
        self.hit_tokens = [0, 0, 0]
        self.computed_blocks = 0
        self.uncached_blocks = 0
        self.copies = {"G1->G2": 0, "G2->G3": 0}
        self.dropped_copies = {"G1->G2": 0, "G2->G3": 0}
        self.ideal_blocks = 0
        self.ideal_tokens = 0


class TierModel:
    """G1, G2 and G3 as LRU tiers, with on-eviction or write-through copies."""

    def __init__(self, capacities=DEFAULT_CAPACITIES, mode=ON_EVICTION, release=TAIL_FIRST):
        if mode not in MODES:
            raise ValueError(f"offload mode must be one of {MODES}, not {mode!r}")
        if release not in RELEASE_ORDERS:
            raise ValueError(f"release order must be one of {RELEASE_ORDERS}, not {release!r}")
        self.release = release
        if any(c < 0 for c in capacities):
            raise ValueError("tier capacities must be non-negative")
        self.tiers = [Tier(n, c) for n, c in zip(TIER_NAMES, capacities)]
        self.mode = mode
        self.counts = Counts()
        self._seen = set()  # every block any request has had: the ideal cache

    def copy_down(self, level, keys):
        """Copies `keys` (one batch, in order) from tier `level` to the tier below.

        Returns the keys actually copied. Keys the lower tier holds are
        skipped and refreshed first; then the lower tier evicts, in one
        batch, room for the rest (in on-eviction mode that batch is copied
        further down the same way); then the copies are registered in order,
        as long as there is room.
        """
        below = level + 1
        if below >= len(self.tiers) or not keys or not self.tiers[below].capacity:
            return []  # no tier below: the blocks are dropped, not copied
        tier = self.tiers[below]
        path = f"{TIER_NAMES[level]}->{TIER_NAMES[below]}"
        new = []
        for key in keys:
            if key in tier.free:
                tier.free.move_to_end(key)
            elif key not in tier.in_use:  # held in use: refreshed at release
                new.append(key)
        victims = tier.evict_for(len(new))
        if self.mode == ON_EVICTION:
            self.copy_down(below, victims)
        room = tier.capacity - tier.occupied()
        copied = new[:max(0, room)]
        for key in copied:
            tier.free[key] = None
        self.counts.copies[path] += len(copied)
        self.counts.dropped_copies[path] += len(new) - len(copied)
        return copied

    def replay(self, request):
        """Replays one request; every tier is idle again when it returns."""
        g1, g2, g3 = self.tiers
        counts = self.counts
        keys = request.keys
        counts.requests += 1
        counts.blocks += len(keys)
        counts.prompt_tokens += request.input_length

        # The ideal cache: every tier unlimited.
        for index, key in enumerate(keys):
            if key not in self._seen:
                break
            counts.ideal_blocks += 1
            counts.ideal_tokens += request.tokens(index)
        self._seen.update(keys)

        # A request takes at most G1's capacity of blocks; the rest is
        # computed and never cached.
        cached = keys[:g1.capacity]
        counts.uncached_blocks += len(keys) - len(cached)

        # 1. The prefix: each block from the fastest tier that holds it.
        #    Every block found is taken (in use) in its tier.
        prefix = 0
        onboarded = []
        sources = []
        for index, key in enumerate(cached):
            if key in g1:
                level = 0
                g1.take(key)
            elif key in g2:
                level = 1
            elif key in g3:
                level = 2
            else:
                break
            if level:
                tier = self.tiers[level]
                tier.take(key)
                sources.append((tier, key))
                onboarded.append(key)
            counts.hit_blocks[level] += 1
            counts.hit_tokens[level] += request.tokens(index)
            prefix += 1
        computed = cached[prefix:]
        counts.computed_blocks += len(keys) - prefix

        # 2. One G1 allocation for the onboarded and the computed blocks:
        #    G1 evicts room for them in one batch; in on-eviction mode the
        #    batch is copied to G2. A computed block that G1 still holds
        #    (the prefix broke before it) is recomputed into that same entry.
        fresh = onboarded + [key for key in computed if key not in g1.free]
        for key in computed:
            if key in g1.free:
                g1.take(key)
        victims = g1.evict_for(len(fresh))
        if self.mode == ON_EVICTION:
            self.copy_down(0, victims)
        g1.in_use.update(fresh)
        # The onboarded blocks' copies below are released once they have been
        # copied into G1, last block first (each ends at its tier's most
        # recent end), before the request's own blocks are written through.
        for tier, key in self._release_order(sources):
            tier.release(key)

        # 3. Write-through: the computed blocks go to G2 as one batch, and
        #    the copies G2 registered go to G3, before anything is released.
        if self.mode == WRITE_THROUGH:
            self.copy_down(1, self.copy_down(0, computed))

        # 4. Release, last block first: the first block is the most recent,
        #    so eviction takes a chain's tail first (head_first: the reverse).
        for key in self._release_order(cached):
            g1.release(key)

    def _release_order(self, blocks):
        return reversed(blocks) if self.release == TAIL_FIRST else iter(blocks)

    def run(self, trace):
        for request in trace.requests:
            self.replay(request)
        return self.counts


# --------------------------------------------------------------------------
# Report


def _ratio(part, whole):
    return part / whole if whole else 0.0


def result_dict(model, trace):
    """The replay's figures as plain data (what --json prints under "result")."""
    c = model.counts
    hits = {}
    for i, name in enumerate(TIER_NAMES):
        hits[name] = {"blocks": c.hit_blocks[i], "tokens": c.hit_tokens[i]}
    hits["total"] = {"blocks": sum(c.hit_blocks), "tokens": sum(c.hit_tokens)}
    hits["ideal"] = {"blocks": c.ideal_blocks, "tokens": c.ideal_tokens}
    for entry in hits.values():
        entry["block_ratio"] = _ratio(entry["blocks"], c.blocks)
        entry["token_ratio"] = _ratio(entry["tokens"], c.prompt_tokens)
    total_hits = sum(c.hit_blocks)
    return {
        "hits": hits,
        "evictions": {t.name: t.evictions for t in model.tiers},
        "copies": dict(c.copies),
        "dropped_copies": dict(c.dropped_copies),
        "onboarded": {"G2->G1": c.hit_blocks[1], "G3->G1": c.hit_blocks[2]},
        "computed_blocks": c.computed_blocks,
        "uncached_blocks": c.uncached_blocks,
        "prefill_tokens_not_recomputed": {
            "block_level": total_hits * trace.block_tokens,
            "token_level": sum(c.hit_tokens),
        },
    }


def report_dict(model, trace, path, seconds):
    c = model.counts
    return {
        "trace": {
            "path": path,
            "requests": c.requests,
            "blocks": c.blocks,
            "prompt_tokens": c.prompt_tokens,
            "unique_blocks": trace.unique_blocks,
            "skipped_lines": len(trace.skipped),
            "block_tokens": trace.block_tokens,
        },
        "config": {
            "capacities": {t.name: t.capacity for t in model.tiers},
            "offload_mode": model.mode,
            "release": model.release,
        },
        "result": result_dict(model, trace),
        "seconds": round(seconds, 3),
    }


def format_report(report):
    t, cfg, r = report["trace"], report["config"], report["result"]
    caps = cfg["capacities"]
    lines = [
        f"tier_model: {t['path']}",
        f"  requests {t['requests']:,}   blocks {t['blocks']:,}   "
        f"prompt tokens {t['prompt_tokens']:,}   unique blocks {t['unique_blocks']:,}",
        f"  G1 {caps['G1']:,}   G2 {caps['G2']:,}   G3 {caps['G3']:,} blocks   "
        f"offload {cfg['offload_mode']}   block {t['block_tokens']} tokens",
        "",
        f"  {'tier':<7}{'hit blocks':>12}{'block ratio':>13}"
        f"{'hit tokens':>14}{'token ratio':>13}{'evictions':>12}",
    ]
    for name in ("G1", "G2", "G3", "total", "ideal"):
        h = r["hits"][name]
        evictions = f"{r['evictions'][name]:,}" if name in r["evictions"] else ""
        lines.append(
            f"  {name:<7}{h['blocks']:>12,}{h['block_ratio']:>12.2%}"
            f"{h['tokens']:>15,}{h['token_ratio']:>12.2%}{evictions:>13}")
    saved = r["prefill_tokens_not_recomputed"]
    lines += [
        "",
        f"  copies G1->G2 {r['copies']['G1->G2']:,}   G2->G3 {r['copies']['G2->G3']:,}"
        f"   (dropped for want of room: {r['dropped_copies']['G1->G2']:,}, "
        f"{r['dropped_copies']['G2->G3']:,})",
        f"  onboarded G2->G1 {r['onboarded']['G2->G1']:,}   "
        f"G3->G1 {r['onboarded']['G3->G1']:,}",
        f"  computed {r['computed_blocks']:,} blocks   "
        f"uncached {r['uncached_blocks']:,} (longer than G1)",
        f"  prefill tokens not recomputed: {saved['token_level']:,} "
        f"({saved['block_level']:,} counting whole blocks)",
        f"  {report['seconds']:.2f} s",
    ]
    if t["skipped_lines"]:
        lines.append(f"  skipped {t['skipped_lines']:,} invalid lines (see stderr)")
    return "\n".join(lines)


def _capacity(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("a capacity is a non-negative block count")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Reference model of kvbm's G1/G2/G3 LRU tiers over a Mooncake trace.")
    parser.add_argument("--trace", default=os.path.normpath(DEFAULT_TRACE))
    parser.add_argument("--device-blocks", type=_capacity, default=DEFAULT_CAPACITIES[0])
    parser.add_argument("--host-blocks", type=_capacity, default=DEFAULT_CAPACITIES[1])
    parser.add_argument("--disk-blocks", type=_capacity, default=DEFAULT_CAPACITIES[2])
    parser.add_argument("--offload-mode", choices=MODES, default=ON_EVICTION)
    parser.add_argument("--release", choices=RELEASE_ORDERS, default=TAIL_FIRST,
                        help="the order a request's blocks are released in (head_first: the "
                             "order of the reference LRU figures)")
    parser.add_argument("--block-tokens", type=int, default=DEFAULT_BLOCK_TOKENS,
                        help="tokens per hash id (default 512)")
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = parser.parse_args(argv)
    if args.block_tokens <= 0:
        parser.error("--block-tokens must be positive")

    start = time.perf_counter()
    try:
        trace = load_trace(args.trace, args.block_tokens)
    except OSError as error:
        print(f"tier_model: cannot read {args.trace}: {error.strerror}", file=sys.stderr)
        return 2
    for reason in trace.skipped:
        print(reason, file=sys.stderr)
    model = TierModel((args.device_blocks, args.host_blocks, args.disk_blocks),
                      args.offload_mode, args.release)
    model.run(trace)
    report = report_dict(model, trace, args.trace, time.perf_counter() - start)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
