"""vLLM 0.33's real KVCacheManager beside kvbm's HybridBlockManagerG1 on the shipped trace.

Both managers get the same hybrid model (one vLLM KVCacheConfig; kvbm's groups come from it
through kvbm.groups.groups_from_vllm) and the same request stream, in lockstep: the first
`requests` requests of /work/shared/data's conversation trace in file order, at most `running`
at once; a new request is admitted when one finishes. Admission asks both caches for the
request's prefix (vLLM: get_computed_blocks, whose limit is the prompt minus one token; kvbm:
find_prefix with the same limit); each step then schedules every running request (a prefill
chunk of `chunk` tokens, the prompt's last chunk shorter, or one decode token), allocates on
both sides (vLLM: allocate_slots; kvbm: allocate then commit), records per group the blocks
each request holds, appends the sampled token (a fixed sequence per request) and finishes the
requests that reached their output length (vLLM: free; kvbm: finish).

Tokens: trace hash id h stands for TOKENS_PER_ID token ids, 1 + (h * TOKENS_PER_ID + j) mod
2^30 for j < TOKENS_PER_ID (distinct ids give distinct tokens, and the trace's ids are
prefix-chained, so equal token prefixes are equal id prefixes); the last id of a prompt gives
the share of its 512-token trace block that input_length fills (at least one token).

Run as a script to print the figures of docs/hybrid.md ("Compared with vLLM"):

    build/engines-venv/bin/python tests/engines/hybrid_compare.py [--requests N]
"""

import argparse
import json
import math
import os
import sys
import time

TRACE = os.environ.get(
    "KVBM_TRACE",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data",
                 "conversation_trace.jsonl"))
TOKENS_PER_ID = 16
TRACE_BLOCK = 512


def trace_path():
    """The shipped trace: $KVBM_TRACE, else /work/shared/data beside the checkout."""
    for p in (TRACE, "/work/shared/data/conversation_trace.jsonl"):
        if os.path.exists(p):
            return p
    return None


def load_trace(n):
    """The first n records of the trace, as (hash_ids, input_length, output_length)."""
    out = []
    with open(trace_path()) as f:
        for line in f:
            o = json.loads(line)
            out.append((o["hash_ids"], o["input_length"], o["output_length"]))
            if len(out) == n:
                break
    return out


def prompt_tokens(hash_ids, input_length):
    """The prompt's token ids (see the module comment)."""
    tokens = []
    for i, h in enumerate(hash_ids):
        n = TOKENS_PER_ID
        if i == len(hash_ids) - 1:
            tail = input_length - TRACE_BLOCK * (len(hash_ids) - 1)
            n = max(1, min(TOKENS_PER_ID, round(TOKENS_PER_ID * tail / TRACE_BLOCK)))
        tokens.extend(1 + (h * TOKENS_PER_ID + j) % (1 << 30) for j in range(n))
    return tokens


def output_token(index, k):
    """The k-th sampled token of request `index`: a fixed sequence, never a prompt's token."""
    return (1 << 30) + 1 + (index * 7919 + k * 104729) % 50000


# --- the models -----------------------------------------------------------------------------------


def _attention(kind, block_size, **extra):
    import torch
    from vllm.v1 import kv_cache_interface as kv

    cls = {"full": kv.FullAttentionSpec, "swa": kv.SlidingWindowSpec,
           "chunk": kv.ChunkedLocalAttentionSpec}[kind]
    return cls(block_size=block_size, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, **extra)


def _mamba(block_size):
    import torch
    from vllm.v1 import kv_cache_interface as kv

    return kv.MambaSpec(block_size=block_size, shapes=((4, 128), (2, 32, 64)),
                        dtypes=(torch.bfloat16, torch.bfloat16), mamba_cache_mode="align")


# name -> (group specs builder, prefill chunk in tokens, kvbm's snapshot policy). vLLM's
# "align" mode writes and keeps the Mamba state only at a step's end, which is kvbm's
# SnapshotPolicy.step_end() (docs/hybrid.md).
MODELS = {
    "full+swa128": (lambda: [_attention("full", 16), _attention("swa", 16, sliding_window=128)],
                    64, "every_block"),
    "full+chunk64": (lambda: [_attention("full", 16),
                              _attention("chunk", 16, attention_chunk_size=64)], 64,
                     "every_block"),
    "full+mamba": (lambda: [_attention("full", 16), _mamba(16)], 64, "step_end"),
    "full32+swa128/16": (lambda: [_attention("full", 32),
                                  _attention("swa", 16, sliding_window=128)], 64, "every_block"),
}


def kv_cache_config(specs, num_blocks):
    """The vLLM KVCacheConfig of `specs`: one layer per group, one tensor per layer."""
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    groups = [KVCacheGroupSpec([f"model.layers.{i}.attn"], s) for i, s in enumerate(specs)]
    tensors = [KVCacheTensor(size=s.page_size_bytes * num_blocks, layers=[f"model.layers.{i}.attn"],
                             layer_stride=s.page_size_bytes * num_blocks,
                             block_stride=s.page_size_bytes)
               for i, s in enumerate(specs)]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)


def vllm_manager(config):
    """vLLM's KVCacheManager as its scheduler builds it (prefix caching on)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    sizes = [g.kv_cache_spec.block_size for g in config.kv_cache_groups]
    hash_block = math.gcd(*sizes)
    scheduler_block = math.lcm(*sizes)
    return KVCacheManager(config, max_model_len=1 << 16, scheduler_block_size=scheduler_block,
                          hash_block_size=hash_block, enable_caching=True), hash_block


def block_hasher(hash_block):
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    fn = get_hash_fn_by_name("sha256_cbor")
    init_none_hash(fn)
    return get_request_block_hasher(hash_block, fn)


# --- the lockstep run -----------------------------------------------------------------------------


class Mismatch(AssertionError):
    """The two managers disagreed (lockstep mode)."""


class Side:
    """One request, on the sides that run."""

    def __init__(self, index, prompt, out_len):
        self.index = index
        self.prompt = prompt
        self.tokens = list(prompt)
        self.out_len = out_len
        self.vreq = None
        self.kreq = None
        self.vhit = None
        self.computed = 0  # tokens computed (both sides agree in lockstep)
        self.relookup = False  # vLLM deferred the first step: look the prefix up again


def vllm_held(vm, req_id):
    """Blocks (not vLLM's null block) request `req_id` holds in each vLLM group."""
    return [sum(1 for b in s.req_to_blocks.get(req_id, ()) if not b.is_null)
            for s in vm.coordinator.single_type_managers]


class Compare:
    """One model's run; see the module comment.

    sides ("vllm", "kvbm"): lockstep, raising Mismatch at the first difference in a computed
    prefix, a computed count or an allocation's outcome, or when kvbm holds more blocks of a
    group than vLLM. One side alone: the same scheduler on that manager only (its own hits
    decide its prefills). vLLM gets `num_blocks` (one is its null block); kvbm one pool per
    group of `kvbm_blocks[g]` (default num_blocks - 1 each) and the model's snapshot policy
    (`policy`, a SnapshotPolicy factory's name, overrides it).
    """

    def __init__(self, name, num_blocks, kvbm_blocks=None, sides=("vllm", "kvbm"), running=8,
                 max_output=24, policy=None):
        import kvbm
        import kvbm.groups

        specs, self.chunk, model_policy = MODELS[name]
        self.policy = policy or model_policy
        self.name = name
        self.sides = sides
        self.config = kv_cache_config(specs(), num_blocks)
        self.vm, self.hash_block = vllm_manager(self.config)
        self.hasher = block_hasher(self.hash_block)
        self.groups = kvbm.groups.groups_from_vllm(self.config)
        self.kvbm_blocks = list(kvbm_blocks or [num_blocks - 1] * len(self.groups))
        self.km = kvbm.groups.HybridBlockManagerG1(
            self.groups, self.kvbm_blocks,
            snapshot_policy=getattr(kvbm.groups.SnapshotPolicy, self.policy)())
        assert self.km.hash_block_size == self.hash_block
        self.hash_tokens = kvbm.hash_tokens
        self.running_max = running
        self.max_output = max_output
        self.steps = 0
        self.prompt_tokens = 0
        self.hit = {"vllm": 0, "kvbm": 0}
        self.held = {"vllm": [0] * len(self.groups), "kvbm": [0] * len(self.groups)}
        self.seconds = 0.0
        self.deferred = 0  # vLLM alone: first steps deferred (cached_blocks_this_step)

    def _hashes(self, s):
        return self.hash_tokens(s.tokens, self.hash_block)[1]

    def _admit(self, index, record):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        hash_ids, input_length, output_length = record
        prompt = prompt_tokens(hash_ids, input_length)
        s = Side(index, prompt, max(1, min(output_length, self.max_output)))
        hits = {}
        if "vllm" in self.sides:
            s.vreq = Request(str(index), prompt, SamplingParams(max_tokens=s.out_len), None,
                             block_hasher=self.hasher)
            blocks, hits["vllm"], _ = self.vm.get_computed_blocks(s.vreq)
            s.vhit = blocks
        if "kvbm" in self.sides:
            hit = self.km.find_prefix(self._hashes(s), len(prompt) - 1)
            hits["kvbm"] = hit.tokens
            s.kreq = self.km.start_request(hit)
        if len(set(hits.values())) != 1:
            raise Mismatch(f"{self.name}: request {index}: computed prefix {hits}")
        for side, n in hits.items():
            self.hit[side] += n
        s.computed = next(iter(hits.values()))
        self.prompt_tokens += len(prompt)
        return s

    def _allocate(self, s, n):
        """Allocates both sides; False when vLLM alone deferred the request (see _step_one)."""
        ok = {}
        if "vllm" in self.sides:
            if s.vhit is not None:  # vLLM's scheduler: allocate with the hit, then set computed
                got = self.vm.allocate_slots(s.vreq, n, s.computed, s.vhit)
                s.vhit = None
                if got is None and self.sides == ("vllm",):
                    # A Mamba hit on a state cached in this step (cached_blocks_this_step):
                    # vLLM's scheduler skips the request and looks it up again next step.
                    s.relookup = True
                    self.deferred += 1
                    return False
            else:
                got = self.vm.allocate_slots(s.vreq, n)
            ok["vllm"] = got is not None
        if "kvbm" in self.sides:
            ok["kvbm"] = self.km.allocate(s.kreq, s.computed + n)
        if not all(ok.values()):
            raise Mismatch(f"{self.name}: request {s.index}: allocation {ok} (the pools are "
                           "sized so that no allocation fails: give them more blocks)")
        return True

    def _relookup(self, s):
        """vLLM alone: the prefix lookup of a deferred request, again, as its scheduler does."""
        s.vhit, hit, _ = self.vm.get_computed_blocks(s.vreq)
        self.hit["vllm"] += hit - s.computed
        s.computed = hit
        s.relookup = False

    def _held(self, s):
        vh = vllm_held(self.vm, s.vreq.request_id) if "vllm" in self.sides else None
        for g in range(len(self.groups)):
            kh = s.kreq.held_blocks(g) if "kvbm" in self.sides else None
            if vh is not None:
                self.held["vllm"][g] += vh[g]
            if kh is not None:
                self.held["kvbm"][g] += kh
            if vh is not None and kh is not None and kh != vh[g]:
                raise Mismatch(f"{self.name}: request {s.index}: group {g} holds {kh} kvbm "
                               f"blocks, {vh[g]} vLLM blocks")

    def _step_one(self, s):
        """Schedules, allocates and computes one step of `s`; True when it has finished."""
        if s.relookup:
            self._relookup(s)
        n = min(self.chunk, len(s.prompt) - s.computed) if s.computed < len(s.prompt) else 1
        if not self._allocate(s, n):
            return False
        s.computed += n
        if "vllm" in self.sides:
            s.vreq.num_computed_tokens = s.computed
        if "kvbm" in self.sides:
            self.km.commit(s.kreq, self._hashes(s), s.computed)
        self._held(s)
        if s.computed >= len(s.prompt):  # the step samples a token
            tok = output_token(s.index, len(s.tokens) - len(s.prompt))
            s.tokens.append(tok)
            if "vllm" in self.sides:
                s.vreq.append_output_token_ids(tok)
        return len(s.tokens) - len(s.prompt) >= s.out_len

    def _finish(self, s):
        if "vllm" in self.sides:
            self.vm.free(s.vreq)
        if "kvbm" in self.sides:
            self.km.finish(s.kreq, self._hashes(s))

    def run(self, records):
        """Runs every record through; returns self. Raises Mismatch (lockstep)."""
        pending = list(enumerate(records))
        pending.reverse()
        running = []
        t0 = time.monotonic()
        while pending or running:
            self.vm.new_step_starts()  # as vLLM's scheduler does at the start of schedule()
            while pending and len(running) < self.running_max:
                running.append(self._admit(*pending.pop()))
            self.steps += 1
            still = []
            for s in running:
                if self._step_one(s):
                    self._finish(s)
                else:
                    still.append(s)
            running = still
        self.seconds = time.monotonic() - t0
        audit = self.km.audit()
        if audit:
            raise AssertionError(f"{self.name}: kvbm audit: {audit}")
        return self

    def hit_ratio(self, side):
        """Prompt tokens found cached over prompt tokens, for `side`."""
        return self.hit[side] / self.prompt_tokens

    def report(self):
        out = {"model": self.name, "sides": "+".join(self.sides), "snapshots": self.policy,
               "chunk": self.chunk, "steps": self.steps,
               "prompt_tokens": self.prompt_tokens, "kvbm_blocks": self.kvbm_blocks,
               "vllm_blocks": self.config.num_blocks, "seconds": round(self.seconds, 1)}
        if "vllm" in self.sides and self.sides != ("vllm", "kvbm"):
            out["vllm_deferred"] = self.deferred
        for side in self.sides:
            out[f"hit_ratio_{side}"] = round(self.hit_ratio(side), 4)
            out[f"held_block_steps_{side}"] = self.held[side]
        return out


def split_blocks(total, weights):
    """`total` blocks split in proportion to `weights` (each at least 1), summing to `total`."""
    w = sum(weights)
    out = [max(1, total * x // w) for x in weights]
    out[0] += total - sum(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=200_000,
                    help="vLLM num_blocks; below 200,000 each side runs alone (hit ratios)")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    records = load_trace(args.requests)
    for name in args.models.split(","):
        if args.blocks >= 200_000:  # everything fits: the lockstep
            print(json.dumps(Compare(name, args.blocks).run(records).report()), flush=True)
            continue
        v = Compare(name, args.blocks, sides=("vllm",)).run(records)
        print(json.dumps(v.report()), flush=True)
        # kvbm's pools together hold vLLM's usable blocks, split as vLLM's one LRU pool holds
        # them at steady state: in proportion to the blocks each group registers, one per
        # tokens_per_block tokens for every kind but recurrent state under step_end(), one per
        # prefill step there (and, as an upper bound, each group vLLM's whole pool).
        per = [v.chunk if v.policy == "step_end" and g.kind_label() == "state"
               else g.tokens_per_block for g in v.groups]
        lcm = math.lcm(*per)
        shares = split_blocks(args.blocks - 1, [lcm // p for p in per])
        for counts in (shares, None):
            k = Compare(name, args.blocks, kvbm_blocks=counts, sides=("kvbm",)).run(records)
            print(json.dumps(k.report()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
