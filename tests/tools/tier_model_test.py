#!/usr/bin/env python3
"""Tests of tools/tier_model/tier_model.py, the reference model of the tiers.

Run: python3 tests/tools/tier_model_test.py  (or python3 -m unittest from
tests/tools). The small traces below are worked by hand in the comments:
G1/G2/G3 contents are listed least recent first, `*` marks a block in use.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(ROOT, "tools", "tier_model")
SHIPPED_TRACE = os.path.join(ROOT, "examples", "data", "conversation_trace.jsonl")
sys.dont_write_bytecode = True
sys.path.insert(0, MODEL_DIR)

import tier_model as tm  # noqa: E402


def make_trace(*requests, block_tokens=512):
    """A trace of requests given as hash-id lists, every block full."""
    trace = tm.Trace(block_tokens)
    for hash_ids in requests:
        trace.add(hash_ids, block_tokens * len(hash_ids))
    return trace


def replay(trace, capacities, mode=tm.ON_EVICTION, release=tm.TAIL_FIRST):
    model = tm.TierModel(capacities, mode, release)
    model.run(trace)
    return model


def hits(model):
    return tuple(model.counts.hit_blocks)


class ShippedTraceTest(unittest.TestCase):
    """The figures of the project's spec, exact."""

    @classmethod
    def setUpClass(cls):
        cls.trace = tm.load_trace(SHIPPED_TRACE)

    def test_trace_shape(self):
        self.assertEqual(len(self.trace.requests), 12031)
        self.assertEqual(sum(len(r.keys) for r in self.trace.requests), 288500)
        self.assertEqual(self.trace.unique_blocks, 182790)
        self.assertEqual(self.trace.skipped, [])

    def test_on_eviction_default_tiers(self):
        model = replay(self.trace, (1000, 10000, 50000))
        self.assertEqual(hits(model), (12847, 50457, 40207))
        self.assertEqual(sum(hits(model)), 103511)
        self.assertEqual(model.counts.ideal_blocks, 105710)

    def test_on_eviction_half_tiers(self):
        model = replay(self.trace, (500, 5000, 20000))
        self.assertEqual(hits(model), (12168, 23791, 52735))
        self.assertEqual(sum(hits(model)), 88694)

    def test_write_through_default_tiers(self):
        # The model's own figures (no external reference): a regression pin.
        model = replay(self.trace, (1000, 10000, 50000), tm.WRITE_THROUGH)
        self.assertEqual(hits(model), (12847, 37580, 51670))
        self.assertEqual(model.counts.copies, {"G1->G2": 186403, "G2->G3": 186244})

    def test_g1_alone_matches_the_reference_lru_figures(self):
        # examples/data/README.md, computed independently of this model, for
        # a request's blocks released head first.
        for capacity, expected in ((1000, 12831), (10000, 60921), (182790, 105710)):
            with self.subTest(capacity=capacity):
                model = replay(self.trace, (capacity, 0, 0), release=tm.HEAD_FIRST)
                self.assertEqual(hits(model), (expected, 0, 0))

    def test_tail_first_release_keeps_more_reachable_blocks(self):
        # Released last block first, a chain's tail is evicted before its head,
        # so no cached block is cut off from its prefix: more hits at every
        # finite size, the same with room for everything.
        for capacity, expected in ((1000, 12847), (10000, 61046), (182790, 105710)):
            with self.subTest(capacity=capacity):
                model = replay(self.trace, (capacity, 0, 0))
                self.assertEqual(hits(model), (expected, 0, 0))


class OnEvictionTest(unittest.TestCase):

    def test_g1_alone(self):
        model = replay(make_trace([1, 2], [1, 2, 3], [1, 4]), (4, 0, 0))
        self.assertEqual(hits(model), (3, 0, 0))
        self.assertEqual(model.counts.computed_blocks, 4)
        self.assertEqual(model.counts.ideal_blocks, 3)

    def test_fastest_tier_per_block(self):
        # G1 2, G2 4. R1 [1,2]: G1 [a b]. R2 [9]: evicts a -> G2 [a]; G1 [b x].
        # R3 [1,2]: a only in G2, b in G1: a from G2, b from G1 (the prefix
        # goes on in G1 after a G2 block); G1 evicts x for a's copy.
        model = replay(make_trace([1, 2], [9], [1, 2]), (2, 4, 0))
        self.assertEqual(hits(model), (1, 1, 0))
        self.assertEqual(model.tiers[0].evictions, 2)
        self.assertEqual(model.counts.copies["G1->G2"], 2)

    def test_skipped_copy_refreshes_the_lower_copy(self):
        # G1 2, G2 2, no G3.
        # R1 [1] G1 [a]. R2 [2] G1 [a b]. R3 [3]: a -> G2 [a]; G1 [b c].
        # R4 [1]: a from G2; b -> G2 [a* b]; release: G2 [b a], G1 [c a].
        # R5 [4]: c -> G2, which evicts b: G2 [a c]; G1 [a d].
        # R6 [5]: a leaves G1, G2 holds it: no copy, a refreshed: G2 [c a].
        # R7 [6]: d -> G2, which evicts c (without the refresh: a): G2 [a d].
        # R8 [1]: a from G2.
        trace = make_trace([1], [2], [3], [1], [4], [5], [6], [1])
        model = replay(trace, (2, 2, 0))
        self.assertEqual(hits(model), (0, 2, 0))
        self.assertEqual(model.counts.copies["G1->G2"], 5)  # a b c d a(R8's eviction)
        self.assertEqual(model.tiers[1].evictions, 3)

    def test_one_eviction_batch_registers_copies_after_refreshing(self):
        # G1 2, G2 3, no G3.
        # R1 [1] G1 [a]. R2 [2] G1 [a b]. R3 [3]: a -> G2 [a]; G1 [b c].
        # R4 [1]: a from G2; b -> G2; G2 [b a], G1 [c a].
        # R5 [5,6]: G1 evicts the batch [c a]: a is held (refreshed first),
        #   then c is registered: G2 [b a c] (block by block it would be [b c a]).
        # R6 [7]: e (R5's first block) -> G2, evicting b: G2 [a c e].
        # R7 [8]: R5's second block -> G2, evicting a: G2 [c e f].
        # R8 [3]: c from G2.
        trace = make_trace([1], [2], [3], [1], [5, 6], [7], [8], [3])
        model = replay(trace, (2, 3, 0))
        self.assertEqual(hits(model), (0, 2, 0))
        a = trace.requests[0].keys[0]
        self.assertNotIn(a, model.tiers[1])

    def test_g2_evictions_cascade_to_g3(self):
        # G1 1, G2 1, G3 2.
        # R1 [1] G1 [a]. R2 [2]: a -> G2. R3 [3]: b -> G2, a -> G3.
        # R4 [1]: a from G3; c -> G2, b -> G3: G3 [a* b], released [b a].
        trace = make_trace([1], [2], [3], [1])
        model = replay(trace, (1, 1, 2))
        self.assertEqual(hits(model), (0, 0, 1))
        self.assertEqual(model.counts.copies, {"G1->G2": 3, "G2->G3": 2})
        self.assertEqual([t.evictions for t in model.tiers], [3, 2, 0])
        a, b = trace.requests[0].keys[0], trace.requests[1].keys[0]
        self.assertEqual(list(model.tiers[2].free), [b, a])

    def test_request_longer_than_g1(self):
        # G1 2: only the first two blocks of a three-block request are cached.
        model = replay(make_trace([1, 2, 3], [1, 2, 3]), (2, 0, 0))
        self.assertEqual(hits(model), (2, 0, 0))
        self.assertEqual(model.counts.uncached_blocks, 2)
        self.assertEqual(model.counts.computed_blocks, 4)
        self.assertEqual(model.counts.ideal_blocks, 3)

    def test_recomputed_block_still_in_g1_keeps_one_entry(self):
        # G1 3, no G2. R1 [1,2]: G1 [a ab]. R2 [3]: G1 [a ab c].
        # R3 [4]: evicts a: G1 [ab c d]. R4 [1,2]: a is nowhere, so the prefix
        # is empty and both are computed; ab is computed into the entry G1
        # still has (taken from the LRU order), and only a needs a slot: c goes.
        # Head-first release, so that G1 evicts a parent before its child.
        trace = make_trace([1, 2], [3], [4], [1, 2])
        model = replay(trace, (3, 0, 0), release=tm.HEAD_FIRST)
        g1 = model.tiers[0]
        self.assertEqual(hits(model), (0, 0, 0))
        self.assertEqual(g1.evictions, 2)
        d = trace.requests[2].keys[0]
        self.assertEqual(list(g1.free), [d] + trace.requests[3].keys)


class WriteThroughTest(unittest.TestCase):

    def test_copies_every_computed_block_down_both_tiers(self):
        # G1 1, G2 2, G3 4.
        # R1 [1]: a computed, copied: G2 [a], G3 [a].
        # R2 [2]: a evicted from G1 (no copy); b: G2 [a b], G3 [a b].
        # R3 [1]: a from G2 (refreshed: G2 [b a]). R4 [3]: c evicts b from
        # G2: G2 [a c], G3 [a b c]. R5 [2]: b from G3.
        model = replay(make_trace([1], [2], [1], [3], [2]), (1, 2, 4), tm.WRITE_THROUGH)
        self.assertEqual(hits(model), (0, 1, 1))
        self.assertEqual(model.counts.copies, {"G1->G2": 3, "G2->G3": 3})
        self.assertEqual([t.evictions for t in model.tiers], [4, 1, 0])

    def test_block_g2_holds_is_refreshed_not_copied(self):
        # G1 2, G2 2, no G3.
        # R1 [7,8]: g, gh computed and copied: G1 [g gh], G2 [g gh].
        # R2 [9]: G1 evicts g: G1 [gh i]; i copied, G2 evicts g: G2 [gh i].
        # R3 [7,8]: g is nowhere, so both are computed (gh into its G1 entry).
        #   The batch [g gh] to G2: gh is held, refreshed first (G2 [i gh]);
        #   then G2 evicts i and registers g: G2 [gh g].
        # Head-first release, so that the tiers evict a parent before its child.
        trace = make_trace([7, 8], [9], [7, 8])
        model = replay(trace, (2, 2, 0), tm.WRITE_THROUGH, tm.HEAD_FIRST)
        self.assertEqual(hits(model), (0, 0, 0))
        self.assertEqual(model.counts.copies["G1->G2"], 4)  # g gh i g
        g, gh = trace.requests[0].keys
        self.assertEqual(list(model.tiers[1].free), [gh, g])

    def test_g1_hits_are_not_copied_again(self):
        # G1 3, G2 2. R1 [1,2]: G2 [a ab]. R2 [3]: G2 evicts a: G2 [ab c].
        # R3 [1,2]: both G1 hits; nothing is computed, nothing copied.
        model = replay(make_trace([1, 2], [3], [1, 2]), (3, 2, 0), tm.WRITE_THROUGH)
        self.assertEqual(hits(model), (2, 0, 0))
        self.assertEqual(model.counts.copies["G1->G2"], 3)


class TokensAndTraceTest(unittest.TestCase):

    def test_partial_last_block_counts_its_tokens(self):
        trace = tm.parse_trace([
            '{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]}',
            '{"timestamp": 1, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]}',
        ])
        model = replay(trace, (8, 0, 0))
        result = tm.result_dict(model, trace)
        self.assertEqual(result["hits"]["G1"]["blocks"], 3)
        self.assertEqual(result["hits"]["G1"]["tokens"], 1100)
        self.assertEqual(result["prefill_tokens_not_recomputed"],
                         {"block_level": 1536, "token_level": 1100})
        self.assertEqual(result["hits"]["ideal"]["tokens"], 1100)

    def test_invalid_lines_are_skipped_and_named(self):
        trace = tm.parse_trace([
            'not json',
            '{"input_length": 10}',
            '{"input_length": -1, "hash_ids": [1]}',
            '{"input_length": 10, "hash_ids": [1, -2]}',
            '{"input_length": 10, "hash_ids": [1]}',
        ], source="t.jsonl")
        self.assertEqual(len(trace.requests), 1)
        self.assertEqual([s.split(":")[1] for s in trace.skipped], ["1", "2", "3", "4"])

    def test_prefix_identity_is_the_whole_prefix(self):
        trace = make_trace([1, 2], [3, 2], [1, 2])
        first, second, third = (r.keys for r in trace.requests)
        self.assertNotEqual(first[1], second[1])
        self.assertEqual(first, third)


class CommandLineTest(unittest.TestCase):

    def test_json_output(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for ids in ([1], [2], [1]):
                f.write(json.dumps({"timestamp": 0, "input_length": 512,
                                    "output_length": 1, "hash_ids": ids}) + "\n")
        try:
            out = io.StringIO()
            with redirect_stdout(out):
                status = tm.main(["--trace", f.name, "--device-blocks", "1",
                                  "--host-blocks", "1", "--disk-blocks", "0", "--json"])
            self.assertEqual(status, 0)
            report = json.loads(out.getvalue())
            self.assertEqual(report["result"]["hits"]["G2"]["blocks"], 1)
            self.assertEqual(report["config"]["offload_mode"], "on_eviction")
        finally:
            os.unlink(f.name)

    def test_script_runs_on_the_shipped_trace(self):
        done = subprocess.run(
            [sys.executable, "-B", os.path.join(MODEL_DIR, "tier_model.py"),
             "--offload-mode", "write_through"],
            capture_output=True, text=True, check=True)
        self.assertIn("G1           12,847", done.stdout)


if __name__ == "__main__":
    unittest.main()
