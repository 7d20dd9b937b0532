"""kvbm's token-keyed index (KvIndexer(key="tokens")) fed by the real vLLM 0.33.0 schedulers.

Three engines, each vLLM's own v1 Scheduler (with its KVCacheManager and BlockPool) built the way
EngineCore builds it: EngineArgs(...).create_engine_config(), the KVCacheConfig from the engine
core's planning functions, resolve_kv_cache_block_sizes, StructuredOutputManager, and the request
block hasher of get_request_block_hasher over get_hash_fn_by_name(prefix_caching_hash_algo) after
init_none_hash. The seed of vLLM's NONE_HASH is random per run (PYTHONHASHSEED, which vLLM reads),
and the engines hash differently (sha256 and sha256_cbor; block sizes 16, 16 and 32), so no two
engines publish the same hashes for the same tokens and kvbm could compute none of them. Each
scheduler publishes its own KV events (BlockStored with token_ids, BlockRemoved,
AllBlocksCleared) through the ZmqEventPublisher its KVEventsConfig makes (ipc://, with a replay
socket); one kvbm.KvEventFeed subscribes to all three and feeds one KvIndexer(key="tokens").

The workload: multi-turn conversations over four shared system prompts, sent to the engines at
random, 3 to 6 requests running per engine; the pools are small (40, 40 and 20 blocks), so
blocks are evicted all the time, and midway one engine resets its prefix cache with requests
running (Scheduler.reset_prefix_cache(reset_running_requests=True): AllBlocksCleared). Only the
model is not vLLM's: each scheduled request that reaches the end of its tokens gets one sampled
token (a fixed pseudo-random sequence per request) in the ModelRunnerOutput given to
update_from_output.

Whenever a request arrives, once the feed has applied every batch the engines have published:
for each engine, kvbm's overlap (KvIndexer.overlaps of the request's token keys at that engine's
block size) equals the blocks that engine's own prefix cache would hit for the request's tokens
(KVCacheManager.get_computed_blocks with max_cache_hit_length = all of its tokens; the scheduler
caps a new request at one token less so that the last one is recomputed, which is the engine's
choice and not the cache's content). KvRouter.route_tokens agrees with the index for the engines
of the router's block size.

One divergence is known and counted: vLLM can cache one hash in two blocks (a request decodes into
a block whose tokens another request's prefill cached meanwhile; once in this run) and publishes a
BlockStored and a BlockRemoved per copy, while kvbm takes the second store as idempotent: the
first removal takes the block out of the index although the engine still holds the other copy,
and the second is counted in removed_unknown_blocks. The test requires exactly those unknown
removals (no request happens to ask for such a block in between).

    PYTHONWARNINGS=ignore::DeprecationWarning \\
        build/engines-venv/bin/python -m pytest -q tests/engines/test_vllm_token_index.py
"""

from __future__ import annotations

import importlib.util
import os
import random
import time

import pytest

from skips import skip_or_fail  # tests/python/skips.py (on the path: conftest.py)

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("kvbm") is None:
    skip_or_fail("engine wheel missing: vllm/kvbm not importable; run in the venv of "
                 "scripts/engines_env.sh (tests/engines/requirements.txt)", allow_module_level=True)

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from tiny_llama import write_model  # noqa: E402

import kvbm  # noqa: E402

# (prefix_caching_hash_algo, block_size, GPU blocks) per engine.
ENGINES = [("sha256", 16, 40), ("sha256_cbor", 16, 40), ("sha256", 32, 20)]
ROUTER_BLOCK_SIZE = 16
REQUESTS = 150
RESET_AT = 70  # the request after which engine 1 resets its prefix cache
MAX_TOKENS = 200  # prompt + output, under max_model_len
TIMEOUT_S = 10.0


class Engine:
    """One vLLM engine's scheduler side, and the batches its publisher has sent."""

    def __init__(self, model_dir, endpoint, algo, block_size, num_blocks):
        from vllm.config import KVEventsConfig
        from vllm.engine.arg_utils import EngineArgs
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
        from vllm.v1.core.kv_cache_planning import (
            get_global_kv_cache_groups,
            get_kv_cache_configs,
        )
        from vllm.v1.core.kv_cache_utils import (
            generate_scheduler_kv_cache_config,
            get_request_block_hasher,
            init_none_hash,
            resolve_kv_cache_block_sizes,
        )
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        from vllm.v1.structured_output import StructuredOutputManager

        self.endpoint, self.replay_endpoint = endpoint, endpoint + "-replay"
        args = EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, load_format="dummy",
            max_model_len=256, block_size=block_size, enforce_eager=True,
            prefix_caching_hash_algo=algo, max_num_seqs=6, max_num_batched_tokens=256,
            kv_events_config=KVEventsConfig(
                enable_kv_cache_events=True, publisher="zmq", endpoint=self.endpoint,
                replay_endpoint=self.replay_endpoint))
        vc = args.create_engine_config()
        # The scheduler's KVCacheConfig from the specs the workers would report (EngineCore's
        # _initialize_kv_caches with `num_blocks` blocks of memory).
        mc, pc = vc.model_config, vc.parallel_config
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=mc.get_num_kv_heads(pc),
                                 head_size=mc.get_head_size(), dtype=mc.dtype)
        layers = mc.get_num_layers(pc)
        specs = [{f"model.layers.{i}.self_attn.attn": spec for i in range(layers)}]
        resolve_kv_cache_layout(vc, [["LBNHC"]], list(specs[0].values()))
        groups = get_global_kv_cache_groups(vc, specs)
        memory = num_blocks * spec.page_size_bytes * layers
        kv_cache_config = generate_scheduler_kv_cache_config(
            get_kv_cache_configs(vc, specs, [memory], groups))
        vc.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
        scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vc)
        assert scheduler_block_size == hash_block_size == block_size
        self.scheduler = vc.scheduler_config.get_scheduler_cls()(
            vllm_config=vc, kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vc), log_stats=False,
            block_size=scheduler_block_size, hash_block_size=hash_block_size)
        caching_hash_fn = get_hash_fn_by_name(algo)
        init_none_hash(caching_hash_fn)  # as EngineCore does (NONE_HASH is vLLM's global)
        self.block_hasher = get_request_block_hasher(hash_block_size, caching_hash_fn,
                                                     vc.num_hash_lookahead_tokens)
        self.block_size = block_size
        self.published = 0  # batches sent by the scheduler's publisher
        self.removed = self.stored = self.cleared = 0
        # vLLM can cache one hash in two blocks (a request decodes into a block whose tokens
        # another request's prefill cached meanwhile): a BlockStored per copy, a BlockRemoved
        # per copy. kvbm takes a store of a held hash as idempotent (docs/router.md), so it
        # drops the block at the first removal and finds the second unknown.
        self.copies = {}  # hash -> blocks holding it, by the events
        self.removed_once = set()  # hashes removed while another copy is still held
        self.duplicates = self.second_removals = 0
        self.outputs = {}  # request id -> the tokens its fake model samples

    def request(self, request_id, tokens, max_tokens=1):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        return Request(request_id, list(tokens),
                       SamplingParams(max_tokens=max_tokens, ignore_eos=True), None,
                       block_hasher=self.block_hasher)

    def add(self, request_id, tokens, outputs):
        self.outputs[request_id] = outputs
        self.scheduler.add_request(self.request(request_id, tokens, len(outputs)))

    def hit_blocks(self, tokens):
        """The blocks of `tokens` this engine's prefix cache holds, by its own lookup."""
        probe = self.request("probe", tokens)
        _, hit_tokens, _ = self.scheduler.kv_cache_manager.get_computed_blocks(
            probe, max_cache_hit_length=len(tokens))
        assert hit_tokens % self.block_size == 0
        return hit_tokens // self.block_size

    def step(self):
        """One engine step: schedule, the model's sampled tokens, update_from_output (which
        publishes the step's KV events as one batch). Returns the finished request ids."""
        from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
        from vllm.v1.outputs import ModelRunnerOutput

        s = self.scheduler
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            req = s.requests[rid]
            done = req.num_computed_tokens >= req.num_tokens  # its prefill/decode is complete
            sampled.append([self.outputs[rid][len(req.output_token_ids)]] if done else [])
        pending = list(s.kv_cache_manager.block_pool.kv_event_queue)
        before = set(s.requests)
        s.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled))
        assert not s.kv_cache_manager.block_pool.kv_event_queue
        finished = before - set(s.requests)
        if pending:
            self.published += 1
        for event in pending:
            if isinstance(event, BlockStored):
                self.stored += 1
                for h in event.block_hashes:
                    self.removed_once.discard(h)  # kvbm holds it again
                    self.duplicates += self.copies.get(h, 0) > 0
                    self.copies[h] = self.copies.get(h, 0) + 1
            elif isinstance(event, BlockRemoved):
                for h in event.block_hashes:
                    self.removed += 1
                    self.copies[h] -= 1
                    # The second removal of a hash stored twice: the first took it out of kvbm.
                    self.second_removals += h in self.removed_once
                    if self.copies[h] > 0:
                        self.removed_once.add(h)
                    else:
                        self.removed_once.discard(h)
            elif isinstance(event, AllBlocksCleared):
                self.cleared += 1
                self.copies.clear()
                self.removed_once.clear()
        return finished

    def publish_empty(self):
        from vllm.distributed.kv_events import KVEventBatch

        self.scheduler.kv_event_publisher.publish(KVEventBatch(ts=time.time(), events=[]))
        self.published += 1

    def shutdown(self):
        self.scheduler.shutdown()


def test_token_index_overlaps_equal_each_vllm_engines_prefix_cache_hits(tmp_path, monkeypatch):
    from vllm.v1.core import kv_cache_utils

    # vLLM's seeded NONE_HASH: a fresh seed per run, read by init_none_hash. The global it sets
    # is put back after the test.
    monkeypatch.setenv("PYTHONHASHSEED", os.urandom(8).hex())
    for name in ("NONE_HASH", "_NONE_HASH_SEED"):
        monkeypatch.setattr(kv_cache_utils, name, getattr(kv_cache_utils, name, None),
                            raising=False)
    model_dir = write_model(tmp_path / "model")
    engines = [Engine(model_dir, f"ipc://{tmp_path}/engine-{i}", algo, bs, blocks)
               for i, (algo, bs, blocks) in enumerate(ENGINES)]
    index = kvbm.KvIndexer(key="tokens")
    feed = kvbm.KvEventFeed(index, replay_timeout=1.0)
    router = kvbm.KvRouter(index, block_size=ROUTER_BLOCK_SIZE)
    try:
        ids = [feed.add_instance(f"vllm-{i}", e.endpoint, replay_endpoint=e.replay_endpoint)
               for i, e in enumerate(engines)]
        # A SUB socket misses what was published before it joined: empty batches until one
        # arrives (those it missed come by replay).
        for i, e in enumerate(engines):
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                e.publish_empty()
                if feed.wait_applied(ids[i], e.published - 1, timeout=0.05):
                    break
                assert time.monotonic() < deadline, f"no batch of engine {i} arrived"

        def synced():
            for i, e in enumerate(engines):
                assert feed.wait_applied(ids[i], e.published - 1, timeout=TIMEOUT_S), i

        rng = random.Random(25)
        systems = [[rng.randrange(3, 256) for _ in range(n)] for n in (40, 56, 72, 90)]
        conversations = []  # the token ids of each conversation so far
        compared = hits = 0
        hits_per_engine = [0] * len(engines)
        running = [0] * len(engines)
        for r in range(REQUESTS):
            # A new turn of a conversation, or a new conversation over a system prompt.
            if conversations and rng.random() < 0.5:
                c = rng.randrange(len(conversations))
                prompt = conversations[c]
            else:
                c, prompt = len(conversations), list(rng.choice(systems))
                conversations.append(prompt)
            prompt = prompt + [rng.randrange(3, 256) for _ in range(rng.randrange(4, 40))]
            outputs = [rng.randrange(3, 256) for _ in range(rng.randrange(1, 24))]
            if len(prompt) + len(outputs) > MAX_TOKENS:
                c, prompt = len(conversations), list(rng.choice(systems))
                conversations.append(prompt)
                prompt = prompt + [rng.randrange(3, 256) for _ in range(8)]
            conversations[c] = prompt + outputs

            synced()
            for bs in {e.block_size for e in engines}:
                overlaps = {o.instance: o.prefix_blocks
                            for o in index.overlaps(kvbm.hash_tokens(prompt, bs)[1])}
                for i, e in enumerate(engines):
                    if e.block_size != bs:
                        continue
                    want = e.hit_blocks(prompt)
                    got = overlaps.get(ids[i], 0)
                    assert got == want, (
                        f"request {r}, engine {i}: kvbm's index has {got} blocks, "
                        f"vLLM's prefix cache {want}")
                    compared += 1
                    hits += want
                    hits_per_engine[i] += want
            d = router.route_tokens(prompt)
            held = d.overlap.prefix_blocks
            e = engines[ids.index(d.instance)]
            assert held == (e.hit_blocks(prompt) if e.block_size == ROUTER_BLOCK_SIZE else 0)
            router.finish(d)

            target = rng.randrange(len(engines))
            engines[target].add(f"r{r}", prompt, outputs)
            running[target] += 1
            if r == RESET_AT:  # published by the step below, before the next comparison
                assert running[1] > 0
                assert engines[1].scheduler.reset_prefix_cache(reset_running_requests=True)
            for i, e in enumerate(engines):
                for _ in range(1000):
                    running[i] -= len(e.step())
                    if running[i] < 3 + (r % 4):  # 3 to 6 requests in flight
                        break
                else:
                    pytest.fail(f"engine {i} does not finish its requests")

        for i, e in enumerate(engines):
            while e.scheduler.has_requests():
                e.step()
        synced()
        stats = index.stats()
    finally:
        for e in engines:
            e.shutdown()

    assert compared == REQUESTS * len(engines)
    assert all(h > 0 for h in hits_per_engine), hits_per_engine
    assert all(e.removed > 0 for e in engines), [e.removed for e in engines]  # evictions
    assert engines[1].cleared == 1 and engines[0].cleared == engines[2].cleared == 0
    assert stats["unkeyed_events"] == 0 and stats["clears"] == 1
    assert stats["removed_unknown_blocks"] == sum(e.second_removals for e in engines), (
        [(e.duplicates, e.second_removals) for e in engines])
    assert stats["blocks_removed"] > 0
    assert feed.stats()["decode_errors"] == 0
