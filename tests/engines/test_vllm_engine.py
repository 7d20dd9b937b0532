"""kvbm.integrations.vllm.KvbmTier inside the real vLLM 0.33.0, on the CPU.

Every vLLM object is vLLM's own, built the way vLLM builds it (tests/engines/vllm_util.py):
EngineArgs(...).create_engine_config(), the scheduler's KVCacheConfig from the engine core's
functions, build_offloading_config, OffloadingSpecFactory.create_spec(...).get_manager() -> a
TieringOffloadingManager whose SecondaryTierFactory loads KvbmTier by module path from the tier
dict of docs/python.md. The tests then make the calls OffloadingConnectorScheduler makes on that
manager (under manager.lock): on_new_request, prepare_store / complete_store, on_schedule_end,
lookup, prepare_load / complete_load, touch, take_events, on_request_finished, reset_cache /
on_reset_flushed, shutdown. Only the GPU<->CPU copies are not vLLM's: the tests write and read
the CPU primary tier's memory where the GPU transfer would.

    bash scripts/engines_env.sh
    PYTHONWARNINGS=ignore::DeprecationWarning \\
        build/engines-venv/bin/python -m pytest -q tests/engines/test_vllm_engine.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import time

import pytest

from skips import skip_or_fail  # tests/python/skips.py (on the path: conftest.py)

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("kvbm") is None:
    skip_or_fail("engine wheel missing: vllm/kvbm not importable; run in the venv of "
                 "scripts/engines_env.sh (tests/engines/requirements.txt)", allow_module_level=True)

import numpy as np  # noqa: E402
from silent_peers import accepts_never_answers, never_accepts  # noqa: E402
from vllm_util import (  # noqa: E402
    make_kv_cache_config,
    make_vllm_config,
    offloading_config,
    step,
    write_model,
)

import kvbm  # noqa: E402

TIER_TYPE = "KvbmTier"
DEADLINE_S = 30


def tier_config(disk_directory, **options):
    """The tier dict of docs/python.md (small sizes)."""
    return {"type": TIER_TYPE, "module_path": "kvbm.integrations.vllm",
            "disk_directory": str(disk_directory), "disk_bytes": 4 << 20,
            "host_bytes": 2 << 20, "device_blocks": 8, **options}


def build_config(model_dir, tier, *, kv_events=False, layout="LBNHC", sliding_window=None,
                 **engine_args):
    """vLLM's OffloadingConfig for a TieringOffloadingSpec whose one secondary tier is `tier`
    (with sliding_window = W: a hybrid model, its odd layers a sliding window of W tokens)."""
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20,
             "secondary_tiers": [tier]}
    vc = make_vllm_config(model_dir, extra, kv_events=kv_events, **engine_args)
    return vc, offloading_config(vc, layout=layout, sliding_window=sliding_window)


@contextlib.contextmanager
def engine(oc):
    """The scheduler side of one engine: vLLM's manager, KvbmTier loaded by vLLM's factory.
    shutdown() at the end (else the primary tier's /dev/shm file is left)."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager

    from kvbm.integrations.vllm import KvbmTier

    manager = OffloadingSpecFactory.create_spec(oc).get_manager()
    try:
        assert isinstance(manager, TieringOffloadingManager)
        (tier,) = manager.secondary_tiers
        assert type(tier) is KvbmTier and tier.tier_type == TIER_TYPE
        yield manager, tier
    finally:
        manager.shutdown()


def primary(manager):
    """The CPU primary tier's memory: (chunks, bytes per chunk) int8, writable."""
    return np.asarray(manager.primary_tier.get_kv_memoryview())


def keys_of(n, tag, group=0):
    """n chunk keys of KV cache group `group` (vLLM's make_offload_key of a 32-byte hash)."""
    from vllm.v1.kv_offload.base import make_offload_key

    return [make_offload_key((f"{tag}:{i}:".encode() * 32)[:32], group) for i in range(n)]


def chunk_data(n, chunk_bytes, seed):
    return np.random.default_rng(seed).integers(-128, 128, size=(n, chunk_bytes), dtype=np.int8)


_req = iter(range(1 << 30))


def new_request(manager):
    from vllm.v1.kv_offload.base import ReqContext

    ctx = ReqContext(req_id=f"req-{next(_req)}")
    manager.on_new_request(ctx)
    return ctx


def wait_idle(manager):
    """Scheduler steps until no transfer is in flight (as the engine keeps stepping while
    has_pending_work())."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        with manager.lock:
            step(manager)
            busy = manager.has_pending_work()
        if not busy:
            return
        assert time.monotonic() < deadline, "transfers still pending"
        time.sleep(0.01)


def store(manager, keys, data):
    """A request whose chunks the GPU offloads: prepare_store, the GPU->CPU copy (written
    here), complete_store, then steps until the cascade to KvbmTier has finished."""
    with manager.lock:
        ctx = new_request(manager)
        out = manager.prepare_store(keys, ctx)
        assert list(out.keys_to_store) == list(keys)
        rows = primary(manager)
        for row, chunk in zip(data, out.store_spec.chunk_ids):
            rows[int(chunk)] = row
        manager.complete_store(keys, ctx)
        step(manager, [ctx.req_id])
    wait_idle(manager)
    with manager.lock:
        manager.on_request_finished(ctx)
        step(manager)


def evict(manager):
    """reset_cache (sleep / weight update): the primary tier forgets everything."""
    with manager.lock:
        manager.reset_cache()
        manager.on_reset_flushed()


def fetch(manager, keys):
    """A request that looks its chunks up until each is HIT or MISS (RETRY: G4 asked;
    HIT_PENDING: promoted from KvbmTier this step), loads the HITs (prepare_load, the CPU->GPU
    copy read here, complete_load) and finishes. Returns (results, {key: bytes loaded})."""
    from vllm.v1.kv_offload.base import LookupResult

    with manager.lock:
        ctx = new_request(manager)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        with manager.lock:
            results = [manager.lookup(k, ctx) for k in keys]
            step(manager, [ctx.req_id])
        if all(r in (LookupResult.HIT, LookupResult.MISS) for r in results):
            break
        assert time.monotonic() < deadline, results
        time.sleep(0.01)
    hits = [k for k, r in zip(keys, results) if r is LookupResult.HIT]
    loaded = {}
    with manager.lock:
        if hits:
            manager.touch(hits, ctx)
            spec = manager.prepare_load(hits, ctx)
            rows = primary(manager)
            loaded = {k: rows[int(c)].copy() for k, c in zip(hits, spec.chunk_ids)}
            manager.complete_load(hits, ctx)
        manager.on_request_finished(ctx)
        step(manager)
    return results, loaded


def all_hit(results):
    from vllm.v1.kv_offload.base import LookupResult

    return all(r is LookupResult.HIT for r in results)


def all_miss(results):
    from vllm.v1.kv_offload.base import LookupResult

    return all(r is LookupResult.MISS for r in results)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model directories: llama-a and llama-b hold the same tiny llama config.json, so the
    model name (its path, as vLLM reports it) is all that tells them apart; llama-c is a
    larger llama (3 layers, 4 KV heads)."""
    root = tmp_path_factory.mktemp("models")
    return (write_model(root / "llama-a"), write_model(root / "llama-b"),
            write_model(root / "llama-c", num_hidden_layers=3, num_key_value_heads=4))


# --------------------------------------------------------------------------- 1


def test_loads_through_vllm_and_round_trips_bytes(models, tmp_path):
    from vllm.v1.metrics.cache_hit_source import CacheHitSource

    model_a = models[0]
    vc, oc = build_config(model_a, tier_config(tmp_path))
    with engine(oc) as (manager, tier):
        ns = tier.namespace
        assert "unknown-model" not in ns
        assert ns.startswith(f"vllm:{model_a}|") and "dtype=bfloat16" in ns
        assert f"layout={oc.kv_cache_layout}" in ns and oc.kv_cache_layout == "LBNHC"
        assert "tp=1," in ns and tier.disk_directory == str(tmp_path)
        assert tier.block_size_bytes == oc.worker_kv_bytes_per_block
        keys = keys_of(6, "round-trip")
        data = chunk_data(len(keys), oc.worker_kv_bytes_per_block, seed=1)
        store(manager, keys, data)
        hashes = kvbm.hash_keys(keys)
        assert tier.kv.present(hashes, chained=False).all()  # stored in kvbm
        evict(manager)
        assert primary(manager).any()  # the old bytes are still in the primary's memory...
        primary(manager)[:] = 0  # ...zero them, so that a HIT can only come with promoted bytes
        results, loaded = fetch(manager, keys)
        assert all_hit(results)
        for k, row in zip(keys, data):
            assert np.array_equal(loaded[k], row)
        with manager.lock:
            ctx = new_request(manager)
            for k in keys:  # the hit came from KvbmTier (a Medium.STORAGE tier)
                assert manager.lookup(k, ctx).name == "HIT"
            manager.on_request_finished(ctx)
        assert type(tier).cache_hit_source is CacheHitSource.DISK


def test_loads_in_the_offloading_connectors_scheduler(models, tmp_path):
    """The way `vllm serve --kv-transfer-config` reaches it: OffloadingConnector's scheduler
    side builds the spec and its manager, which loads KvbmTier."""
    from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
        OffloadingConnector,
    )

    from kvbm.integrations.vllm import KvbmTier

    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20,
             "secondary_tiers": [tier_config(tmp_path)]}
    vc = make_vllm_config(models[0], extra)
    connector = OffloadingConnector(vc, KVConnectorRole.SCHEDULER, make_kv_cache_config(vc))
    try:
        (tier,) = connector.connector_scheduler.manager.secondary_tiers
        assert type(tier) is KvbmTier and tier.namespace.startswith(f"vllm:{models[0]}|")
    finally:
        connector.shutdown()


def test_restarted_engine_promotes_from_g3(models, tmp_path):
    model_a = models[0]
    keys = keys_of(5, "restart")
    _, oc = build_config(model_a, tier_config(tmp_path))
    data = chunk_data(len(keys), oc.worker_kv_bytes_per_block, seed=2)
    with engine(oc) as (manager, _):
        store(manager, keys, data)
    _, oc = build_config(model_a, tier_config(tmp_path))  # a new engine (new engine id)
    with engine(oc) as (manager, tier):
        assert tier.kv.disk_recovery()["recovered"] >= len(keys)
        results, loaded = fetch(manager, keys)
        assert all_hit(results)
        assert all(np.array_equal(loaded[k], row) for k, row in zip(keys, data))


# --------------------------------------------------------------------------- 2

# Engine B differs from engine A (the tiny llama "llama-a", bfloat16, LBNHC, TP 1) in one way.
VARIANTS = {
    "model": dict(model=1),  # the same config.json in another directory
    "size": dict(model=2),
    "dtype": dict(dtype="float16"),
    "layout": dict(layout="LBHNC"),
    "tp": dict(tensor_parallel_size=2),  # the scheduler side of rank 0 of a TP-2 engine
}


def _variant(models, name):
    args = dict(VARIANTS[name])
    return models[args.pop("model", 0)], args


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_identity_on_one_g3_directory(models, tmp_path, variant):
    keys = keys_of(4, "identity")
    _, oc_a = build_config(models[0], tier_config(tmp_path))
    data = chunk_data(len(keys), oc_a.worker_kv_bytes_per_block, seed=3)
    with engine(oc_a) as (manager, tier_a):
        store(manager, keys, data)
        ns_a = tier_a.namespace
    # Control: engine A again, same directory: the chunks are there.
    _, oc_a2 = build_config(models[0], tier_config(tmp_path))
    with engine(oc_a2) as (manager, _):
        results, loaded = fetch(manager, keys)
        assert all_hit(results) and all(np.array_equal(loaded[k], r) for k, r in zip(keys, data))
    # Engine B on the same directory, after A: never a HIT, never A's bytes.
    model_b, args = _variant(models, variant)
    _, oc_b = build_config(model_b, tier_config(tmp_path), **args)
    with engine(oc_b) as (manager, tier_b):
        assert tier_b.namespace != ns_a
        assert tier_b.kv.disk_recovery()["recovered"] == 0
        assert not tier_b.kv.present(kvbm.hash_keys(keys), chained=False).any()
        results, loaded = fetch(manager, keys)
        assert all_miss(results) and not loaded
        rows = primary(manager)
        if rows.shape[1] == data.shape[1]:
            assert not any((rows == r).all(axis=1).any() for r in data)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_identity_on_one_redis(models, tmp_path, redis_url, variant):
    keys = keys_of(4, "identity-g4")
    tier = lambda d: tier_config(tmp_path / d, remote_urls=[redis_url])  # noqa: E731
    for d in ("a", "a2", "b"):
        os.makedirs(tmp_path / d)
    _, oc_a = build_config(models[0], tier("a"))
    data = chunk_data(len(keys), oc_a.worker_kv_bytes_per_block, seed=4)
    with engine(oc_a) as (manager, _):
        store(manager, keys, data)
    # Control: engine A's identity on another G3 directory finds them in Redis.
    _, oc_a2 = build_config(models[0], tier("a2"))
    with engine(oc_a2) as (manager, _):
        results, loaded = fetch(manager, keys)
        assert all_hit(results) and all(np.array_equal(loaded[k], r) for k, r in zip(keys, data))
    model_b, args = _variant(models, variant)
    _, oc_b = build_config(model_b, tier("b"), **args)
    with engine(oc_b) as (manager, tier_b):
        assert tier_b.kv.probe(kvbm.hash_keys(keys), chained=False).total == 0
        results, loaded = fetch(manager, keys)  # RETRY while Redis is asked, then MISS
        assert all_miss(results) and not loaded


# --------------------------------------------------------------------------- 3


def _dp_engine_config(model_dir, tier, index):
    """Engine `index` of a `--data-parallel-size 2` deployment of a dense model, as vLLM's
    run_engine_core makes it (vllm/v1/engine/core.py): the engine id gets "_dp<i>",
    data_parallel_index = i, and a non-MoE engine is made independent
    (reconfigure_for_independent_dp_rank: data_parallel_size back to 1)."""
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20,
             "secondary_tiers": [tier]}
    vc = make_vllm_config(model_dir, extra, data_parallel_size=2)
    assert vc.parallel_config.data_parallel_size == 2 and not vc.model_config.is_moe
    vc.kv_transfer_config.engine_id = f"{vc.kv_transfer_config.engine_id}_dp{index}"
    vc.parallel_config.data_parallel_index = index
    vc.parallel_config.reconfigure_for_independent_dp_rank()
    return offloading_config(vc)


def _moe_dp_engine_config(model_dir, tier, index):
    """Engine `index` of a DP-2 MoE deployment, where data_parallel_size stays 2 (a dense
    model cannot be configured so: "Non-MoE models do not support external data parallel
    mode"): vLLM's own OffloadingParallelConfig, fields replaced."""
    _, oc = build_config(model_dir, tier)
    return dataclasses.replace(
        oc, engine_id=f"{oc.engine_id}_dp{index}",
        parallel=dataclasses.replace(oc.parallel, data_parallel_size=2,
                                     data_parallel_index=index))


@pytest.mark.parametrize("make", [_dp_engine_config, _moe_dp_engine_config],
                         ids=["dense", "moe"])
def test_data_parallel_engines(models, tmp_path, redis_url, make):
    tier = tier_config(tmp_path, remote_urls=[redis_url])
    ocs = [make(models[0], tier, i) for i in range(2)]
    assert [oc.parallel.data_parallel_index for oc in ocs] == [0, 1]
    keys = keys_of(4, "dp")
    data = chunk_data(len(keys), ocs[0].worker_kv_bytes_per_block, seed=5)
    with engine(ocs[0]) as (m0, t0), engine(ocs[1]) as (m1, t1):  # both at once: no lock error
        assert (t0.disk_directory, t1.disk_directory) == (str(tmp_path / "dp0"),
                                                          str(tmp_path / "dp1"))
        assert os.path.exists(tmp_path / "dp0" / "kvbm.slots")
        assert os.path.exists(tmp_path / "dp1" / "kvbm.slots")
        assert t0.namespace == t1.namespace  # DP engines hold the same chunks
        store(m0, keys, data)
        t0.kv.drain()  # written through to Redis (what shutdown waits for)
        results, loaded = fetch(m1, keys)
        assert all_hit(results) and all(np.array_equal(loaded[k], r) for k, r in zip(keys, data))


# --------------------------------------------------------------------------- 4


def test_locality_and_events_with_vllm_kv_events_on(models, tmp_path):
    from vllm.v1.kv_offload.base import Locality, Medium, OffloadingEvent

    _, oc = build_config(models[0], tier_config(tmp_path, enable_kv_events=True,
                                                locality="REMOTE"), kv_events=True)
    assert oc.enable_kv_cache_events
    with engine(oc) as (manager, tier):
        assert tier.locality is Locality.REMOTE
        keys = keys_of(3, "events")
        store(manager, keys, chunk_data(3, oc.worker_kv_bytes_per_block, seed=6))
        with manager.lock:
            events = list(manager.take_events())
        ours = [e for e in events if e.medium is Medium.STORAGE]
        assert all(type(e) is OffloadingEvent for e in events)
        assert [list(e.keys) for e in ours] == [keys]
        assert not ours[0].removed and ours[0].locality is Locality.REMOTE


def test_events_off_globally_warns_and_emits_nothing(models, tmp_path, caplog):
    from vllm.v1.kv_offload.base import Locality, Medium

    _, oc = build_config(models[0], tier_config(tmp_path, enable_kv_events=True,
                                                locality="LOCAL"))
    assert not oc.enable_kv_cache_events
    with caplog.at_level(logging.WARNING, logger="kvbm.integrations.vllm"):
        with engine(oc) as (manager, tier):
            assert tier.locality is Locality.LOCAL
            store(manager, keys_of(3, "no-events"),
                  chunk_data(3, oc.worker_kv_bytes_per_block, seed=7))
            with manager.lock:
                events = list(manager.take_events())
            assert not [e for e in events if e.medium is Medium.STORAGE]
            assert list(tier.take_events()) == []
    assert any("events are disabled globally" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- 5


def test_partial_promotion_only_the_corrupt_chunk_misses(models, tmp_path):
    from vllm.v1.kv_offload.base import LookupResult

    keys = keys_of(12, "corrupt")
    _, oc = build_config(models[0], tier_config(tmp_path))
    data = chunk_data(len(keys), oc.worker_kv_bytes_per_block, seed=8)
    with engine(oc) as (manager, _):
        store(manager, keys, data)
    # One bit of chunk 7's payload, in the G3 file (the engine is down).
    path = tmp_path / "kvbm.slots"
    raw = bytearray(path.read_bytes())
    at = raw.find(data[7].tobytes()[:256])
    assert at >= 0
    raw[at + oc.worker_kv_bytes_per_block // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    _, oc = build_config(models[0], tier_config(tmp_path))
    with engine(oc) as (manager, _):
        results, loaded = fetch(manager, keys)
        assert results == [LookupResult.HIT] * 7 + [LookupResult.MISS] + [LookupResult.HIT] * 4
        assert sorted(loaded) == sorted(keys[:7] + keys[8:])
        for i, k in enumerate(keys):
            if k in loaded:
                assert np.array_equal(loaded[k], data[i])
        results, _ = fetch(manager, keys[7:8])  # still a miss: never served
        assert results == [LookupResult.MISS]


# --------------------------------------------------------------------------- 6: G4 down


@contextlib.contextmanager
def refuses():
    """Port 1 of 127.0.0.1, where nothing listens: connect() is refused at once."""
    yield 1


@pytest.mark.parametrize("peer", [refuses, accepts_never_answers, never_accepts])
def test_g4_down_never_delays_engine_start(models, tmp_path, peer):
    """With G4 configured and Redis down (refused; a listener on 127.0.0.1 that accepts and never
    answers; one whose handshake never completes: tests/python/silent_peers.py), vLLM's manager
    (and KvbmTier in it) is built in under a second, and the engine works on its local tiers: a
    stored chunk is a HIT, bytes equal; a chunk nobody stored is a MISS once G4 has been asked
    (RETRY meanwhile)."""
    keys = keys_of(2, "g4-down")
    with peer() as port:
        g4_down_engine_works(models, tmp_path, f"redis://127.0.0.1:{port}", keys)


def g4_down_engine_works(models, tmp_path, url, keys):
    _, oc = build_config(models[0], tier_config(tmp_path, remote_urls=[url]))
    start = time.monotonic()
    with engine(oc) as (manager, _):
        assert time.monotonic() - start < 1.0
        data = chunk_data(len(keys), oc.worker_kv_bytes_per_block, seed=6)
        store(manager, keys, data)
        evict(manager)
        results, loaded = fetch(manager, keys)
        assert all_hit(results) and all(np.array_equal(loaded[k], r) for k, r in zip(keys, data))
        results, _ = fetch(manager, keys_of(1, "never-stored"))
        assert all_miss(results)


# --------------------------------------------------------------------------- 7: shutdown


def test_shutdown_lets_vllm_unmap_the_primary_tier(models, tmp_path):
    """vLLM's manager shuts the secondary tiers down, then unmaps the CPU primary tier's shared
    memory, which it can only do when nothing holds a view of it any more (else it keeps the
    mapping, with a warning): KvbmTier lets go of its view of the primary at shutdown."""
    _, oc = build_config(models[0], tier_config(tmp_path))
    with engine(oc) as (manager, _):
        keys = keys_of(2, "unmap")
        store(manager, keys, chunk_data(len(keys), oc.worker_kv_bytes_per_block, seed=9))
        evict(manager)
        assert all_hit(fetch(manager, keys)[0])
        region = manager.primary_tier._mmap_region
    assert region.mmap_obj is None  # unmapped (vLLM keeps it when an export is left)


# --------------------------------------------------------------------------- 8: a hybrid model


def test_hybrid_model_keeps_each_groups_chunks_apart(models, tmp_path):
    """A full + sliding-window (64 tokens) model: vLLM's own KVCacheConfig (two groups, from
    the specs the workers would report) and OffloadingConfig. Both groups name their chunks by
    the same block hashes; group 0 stores chunks 0..5, group 1 only the window's 2..5, each
    with bytes of its own. After the primary tier forgets them, each group's keys load its own
    bytes, group 1's keys of chunks 0..1 miss although group 0 holds those hashes, and the
    tier's per-group counts (group_stats() and vLLM's offloading metrics) say so."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    from vllm.v1.kv_offload.base import LookupResult

    from kvbm.integrations.vllm import GROUP_CHUNKS_METRIC

    _, dense = build_config(models[0], tier_config(tmp_path / "dense"))
    os.makedirs(tmp_path / "hybrid")
    vc, oc = build_config(models[0], tier_config(tmp_path / "hybrid"), sliding_window=64)
    assert [type(g.kv_cache_spec) for g in make_kv_cache_config(vc, sliding_window=64)
            .kv_cache_groups] == [FullAttentionSpec, SlidingWindowSpec]
    assert [(g.group_id, g.sliding_window_size_in_chunks) for g in oc.groups] == [(0, None),
                                                                                  (1, 4)]
    with engine(dense) as (_, dense_tier):
        dense_ns = dense_tier.namespace
    with engine(oc) as (manager, tier):
        assert tier.namespace != dense_ns and ":w4" in tier.namespace
        full, window = keys_of(6, "hybrid", group=0), keys_of(6, "hybrid", group=1)[2:]
        assert not set(full) & set(window)
        chunk_bytes = primary(manager).shape[1]  # a group's block, padded to vLLM's page size
        assert chunk_bytes >= oc.worker_kv_bytes_per_block
        data = {0: chunk_data(6, chunk_bytes, seed=10), 1: chunk_data(4, chunk_bytes, seed=11)}
        store(manager, full, data[0])
        store(manager, window, data[1])
        evict(manager)
        primary(manager)[:] = 0
        results, loaded = fetch(manager, full + window)
        assert all_hit(results)
        for k, row in zip(full, data[0]):
            assert np.array_equal(loaded[k], row)
        for k, row in zip(window, data[1]):
            assert np.array_equal(loaded[k], row)
        outside = keys_of(2, "hybrid", group=1)  # group 0 holds these hashes; group 1 not
        assert not tier.kv.present(kvbm.hash_keys(outside), chained=False).any()
        results, loaded = fetch(manager, outside)
        assert results == [LookupResult.MISS] * 2 and not loaded
        counts = tier.group_stats()
        assert {g: (c["stored"], c["loaded"]) for g, c in counts.items()} == {0: (6, 6),
                                                                              1: (4, 4)}
        assert counts[1]["miss"] >= 2 and counts[0]["miss"] == 0
        assert counts[0]["hit"] >= 6 and counts[1]["hit"] >= 4
        with manager.lock:
            stats = manager.get_stats()
        _, values = stats.metric_sections()
        reported = values[GROUP_CHUNKS_METRIC]
        assert reported[("0", "stored")] == 6 and reported[("1", "stored")] == 4
        assert reported[("0", "loaded")] == 6 and reported[("1", "loaded")] == 4
        assert reported[("1", "miss")] == counts[1]["miss"]
