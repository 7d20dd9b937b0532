"""A hybrid model's KV events as vLLM 0.33 publishes them, read by kvbm's router.

vLLM's own classes and publisher throughout: BlockStored / BlockRemoved of
vllm.distributed.kv_events with their group fields (group_idx,
kv_cache_spec_kind, kv_cache_spec_sliding_window) in a KVEventBatch, sent by the
ZmqEventPublisher that EventPublisherFactory makes from a KVEventsConfig (ipc://,
with a replay socket), so the bytes on the wire are msgspec's. One
kvbm.KvEventFeed subscribes to two such publishers and feeds a
kvbm.KvIndexer(groups=[full, sliding window]).

vLLM names a block of every group by the same hash and tells the groups apart
by group_idx: both engines store the same 8 hashes in the full-attention group
(0); engine a's window group (1) keeps blocks 0..3, engine b's the tail 4..7
(a window of 64 tokens reads 4 blocks of 16 before the cut). kvbm must count
8 blocks for b and 4 for a (the longest cut whose window tail a holds), where a
dense index would give both 8; a removal in group 1 must not touch group 0.

    PYTHONWARNINGS=ignore::DeprecationWarning \\
        build/engines-venv/bin/python -m pytest -q tests/engines/test_vllm_hybrid_events.py
"""

from __future__ import annotations

import importlib.util
import time

from skips import skip_or_fail  # tests/python/skips.py (on the path: conftest.py)

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("kvbm") is None:
    skip_or_fail("engine wheel missing: vllm/kvbm not importable; run in the venv of "
                 "scripts/engines_env.sh (tests/engines/requirements.txt)", allow_module_level=True)

import kvbm  # noqa: E402

BLOCK = 16
HASHES = [0x7000 + i for i in range(8)]  # the engine's hashes of the prompt's 8 blocks
TIMEOUT_S = 10.0


def stored(hashes, group, parent=None):
    from vllm.distributed.kv_events import BlockStored

    kind, window = ("full_attention", None) if group == 0 else ("sliding_window", 64)
    return BlockStored(block_hashes=list(hashes), parent_block_hash=parent, token_ids=[],
                       block_size=BLOCK, lora_id=None, medium="GPU", lora_name=None,
                       group_idx=group, kv_cache_spec_kind=kind,
                       kv_cache_spec_sliding_window=window)


def publisher(tmp_path, name):
    from vllm.config import KVEventsConfig
    from vllm.distributed.kv_events import EventPublisherFactory

    endpoint = f"ipc://{tmp_path}/{name}.sock"
    config = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=endpoint,
                            replay_endpoint=endpoint + "-replay", topic="kv")
    return EventPublisherFactory.create(config, data_parallel_rank=0), endpoint


def test_vllms_hybrid_events_feed_the_group_index(tmp_path):
    from vllm.distributed.kv_events import BlockRemoved, KVEventBatch

    from kvbm.groups import KvCacheGroupSpec as Spec

    groups = [Spec.full(0, BLOCK, 4096, [0, 2]), Spec.sliding_window(1, 64, BLOCK, 4096, [1, 3])]
    index = kvbm.KvIndexer(groups=groups)
    feed = kvbm.KvEventFeed(index, replay_timeout=1.0)
    pubs = {}
    try:
        for name, window in (("a", HASHES[:4]), ("b", HASHES[4:])):
            pub, endpoint = publisher(tmp_path, name)
            pubs[name] = pub
            parent = HASHES[3] if window[0] == HASHES[4] else None
            # Published before the feed subscribes: the feed's replay from 0 brings it.
            pub.publish(KVEventBatch(ts=time.time(), events=[stored(HASHES, 0),
                                                             stored(window, 1, parent)],
                                     data_parallel_rank=0))
        ids = {name: feed.add_instance(name, f"ipc://{tmp_path}/{name}.sock", topic="kv",
                                       replay_endpoint=f"ipc://{tmp_path}/{name}.sock-replay")
               for name in pubs}
        for name in pubs:
            assert feed.wait_applied(ids[name], 0, timeout=TIMEOUT_S), name
        assert index.stats()["group_mismatch_events"] == 0
        per_group = [HASHES, HASHES]  # vLLM's hash of a block is the same in every group
        got = {o.instance: o.prefix_blocks for o in index.group_overlaps(per_group)}
        assert got == {ids["a"]: 4, ids["b"]: 8}
        # b's window group drops its last block: b keeps its full group's, and serves no cut
        # longer than 7 blocks (whose window tail 3..6 it does not hold either).
        pubs["b"].publish(KVEventBatch(ts=time.time(), events=[
            BlockRemoved(block_hashes=[HASHES[7]], medium="GPU", group_idx=1)],
            data_parallel_rank=0))
        assert feed.wait_applied(ids["b"], 1, timeout=TIMEOUT_S)
        got = {o.instance: o.prefix_blocks for o in index.group_overlaps(per_group)}
        assert got == {ids["a"]: 4, ids["b"]: 0}
        assert index.stats()["removed_unknown_blocks"] == 0
        # The window's block back: b serves all 8 again, so its full group kept block 7.
        pubs["b"].publish(KVEventBatch(ts=time.time(), events=[stored(HASHES[7:], 1, HASHES[6])],
                                       data_parallel_rank=0))
        assert feed.wait_applied(ids["b"], 2, timeout=TIMEOUT_S)
        got = {o.instance: o.prefix_blocks for o in index.group_overlaps(per_group)}
        assert got == {ids["a"]: 4, ids["b"]: 8}
    finally:
        for pub in pubs.values():
            pub.shutdown()
