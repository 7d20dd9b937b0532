"""kvbm.KvIndexer, kvbm.KvRouter and kvbm.KvEventFeed (src/python/router.cpp).

Real events throughout: a kvbm.KvBlockManager publishes what its pools do,
either handed over in process (take_events() -> KvIndexer.apply) or over a
real ZeroMQ socket (events="tcp://...") that a KvEventFeed subscribes to;
the router then sends each request to the instance holding its prefix.
"""

import gc
import socket
import threading
import time

import numpy as np
import pytest

import kvbm
from conftest import pages, small_config


def chain(n, seed):
    """The sequence hashes of n blocks of tokens (chained, as hash_tokens gives them)."""
    tokens = np.random.default_rng(seed).integers(0, 50_000, size=n * 16, dtype=np.uint32)
    return kvbm.hash_tokens(tokens, 16)[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_index_fed_in_process_routes_to_the_holder(tmp_path):
    index = kvbm.KvIndexer()
    a = index.add_instance("a")
    b = index.add_instance("b")
    assert index.instances() == [a, b] and index.find_instance("b") == b
    assert index.find_instance("nobody") is None
    with kvbm.KvBlockManager(small_config(tmp_path), events=True) as kv:
        h = chain(3, seed=1)
        kv.store(h, pages(3, kv.block_bytes, 1), chained=True)
        kv.drain()
        events = kv.take_events()
    assert index.apply(a, 0, events) == ("applied", 1, 1)
    assert index.apply(a, 1, [])[0] == "applied"
    assert index.apply(a, 1, [])[0] == "duplicate"
    assert index.apply(a, 0, [])[0] == "restart"  # 0 after a later batch: a new run
    assert index.apply(a, 5, [])[0] == "gap"
    assert index.state(a)["stale"] == "gap"
    index.resync(a)
    assert index.state(a)["stale"] == "fresh"
    # resync dropped a's entries (the index under-reports rather than guess): apply again.
    assert index.apply(a, 6, events)[0] == "applied"
    assert index.holds(a, int(h[2]), kvbm.TierId.G2)
    assert not index.holds(b, int(h[2]), kvbm.TierId.G2)
    assert index.state(a)["blocks"]["G2"] == 3 and index.state(a)["blocks"]["G3"] == 3

    overlaps = index.overlaps(h)
    assert [o.instance for o in overlaps] == [a, b]
    assert overlaps[0].prefix_blocks == 3 and overlaps[0].per_tier["G2"] == 3
    assert overlaps[1].prefix_blocks == 0 and not overlaps[1].stale

    router = kvbm.KvRouter(index, block_size=16, tier_cost={"G2": 0.1}, load_weight=1.0)
    d = router.route(h, 48)
    assert isinstance(d, kvbm.RouteDecision)
    assert d.instance == a and d.overlap.prefix_blocks == 3 and d.tokens_to_compute == 0
    assert d.cost == pytest.approx(0.1 * 48)
    assert router.costs(list(map(int, h)), 48) == pytest.approx([0.1 * 48, 48.0])
    s = router.stats()
    assert s["decisions"] == 1 and s["per_instance"] == [1, 0] and s["load"] == [0, 0]
    # A request nobody holds goes where the load is least, and counts as load.
    e = router.route(np.array([7, 8], dtype=np.uint64), 40)
    assert e.tokens_to_compute == 40 and e.load == 40
    assert router.stats()["load"][e.instance] == 40
    router.finish(e)
    assert router.stats()["load"] == [0, 0]
    assert index.stats()["blocks_stored"] >= 6


def test_feed_over_zeromq_routes_each_request_to_its_prefix(tmp_path):
    ports = [free_port(), free_port()]
    index = kvbm.KvIndexer()
    feed = kvbm.KvEventFeed(index, replay_timeout=0.2)
    router = kvbm.KvRouter(index)
    for i in range(2):
        (tmp_path / f"kv{i}").mkdir()
    managers = [kvbm.KvBlockManager(small_config(tmp_path / f"kv{i}"),
                                    events=f"tcp://*:{p}")  # "*": bound (vLLM's rule)
                for i, p in enumerate(ports)]
    try:
        ids = [feed.add_instance(f"engine-{i}", f"tcp://127.0.0.1:{p}")
               for i, p in enumerate(ports)]
        # These publishers keep no replay socket: what a PUB sends before the
        # subscription reaches it is lost (ZeroMQ's slow joiner). Store a new
        # chain until one arrives; the later ones then arrive live.
        held = []
        for i, kv in enumerate(managers):
            deadline = time.monotonic() + 10
            seed = 100 * (i + 1)
            while True:
                h = chain(4, seed=seed)
                kv.store(h, pages(4, kv.block_bytes, seed), chained=True)
                kv.drain()
                if feed.wait_applied(ids[i], 0, timeout=0.05) and index.holds(
                        ids[i], int(h[3]), kvbm.TierId.G2):
                    break
                assert time.monotonic() < deadline, "no event arrived over ZeroMQ"
                seed += 1
            held.append(h)
        for i, h in enumerate(held):
            d = router.route(h, 64)
            assert d.instance == ids[i], (i, d)
            assert d.overlap.prefix_blocks == 4 and d.overlap.per_tier["G2"] == 4
            router.finish(d)
        st = feed.stats()
        assert st["batches_received"] >= 2 and st["decode_errors"] == 0
        feed.remove_instance(ids[0])
        assert index.instances() == [ids[1]]
        assert router.route(held[0], 64).instance == ids[1]
    finally:
        for kv in managers:
            kv.close()


def test_wait_applied_times_out_and_releases_the_gil():
    index = kvbm.KvIndexer()
    feed = kvbm.KvEventFeed(index, retry_interval=0.05)
    a = feed.add_instance("silent", f"tcp://127.0.0.1:{free_port()}")
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    try:
        start = time.monotonic()
        assert feed.wait_applied(a, 0, timeout=0.5) is False
        assert time.monotonic() - start >= 0.45
    finally:
        stop.set()
        t.join()
    assert len(ticks) >= 10  # the other thread ran while the feed waited


def test_router_and_feed_keep_their_index_alive():
    router = kvbm.KvRouter(kvbm.KvIndexer(), policy="round_robin")
    feed = kvbm.KvEventFeed(kvbm.KvIndexer())
    gc.collect()
    with pytest.raises(kvbm.UsageError, match="no live instance"):
        router.route([1], 16)
    assert feed.stats()["batches_received"] == 0


def test_misuse_is_a_usage_error():
    index = kvbm.KvIndexer()
    index.add_instance("a")
    with pytest.raises(kvbm.UsageError, match="already live"):
        index.add_instance("a")
    with pytest.raises(kvbm.UsageError, match="G5"):
        kvbm.KvRouter(index, tier_cost={"G5": 1.0})
    with pytest.raises(kvbm.UsageError):
        kvbm.KvRouter(index, policy="best")
    with pytest.raises(kvbm.UsageError, match="load_unit"):
        kvbm.KvRouter(index, load_unit="bytes")
    router = kvbm.KvRouter(index)
    with pytest.raises(kvbm.UsageError):
        router.route([1, -2], 32)
    with pytest.raises(kvbm.UsageError):
        kvbm.KvIndexer(silence_timeout=-1.0)
    feed = kvbm.KvEventFeed(kvbm.KvIndexer())
    with pytest.raises(kvbm.UsageError):
        feed.add_instance("x", "not an endpoint")


def test_route_tokens_needs_an_index_keyed_by_tokens():
    tokens = list(range(40))
    by_tokens = kvbm.KvIndexer(key="tokens")
    by_tokens.add_instance("a")
    d = kvbm.KvRouter(by_tokens, block_size=16).route_tokens(tokens)
    assert d.instance == 0 and d.tokens_to_compute == 40  # nobody holds anything yet
    assert by_tokens.stats()["unkeyed_events"] == 0
    by_hashes = kvbm.KvIndexer()
    by_hashes.add_instance("a")
    with pytest.raises(kvbm.UsageError, match="key"):
        kvbm.KvRouter(by_hashes).route_tokens(tokens)
    with pytest.raises(kvbm.UsageError, match='"tokenz": use hashes or tokens'):
        kvbm.KvIndexer(key="tokenz")


def test_hybrid_index_takes_the_groups_and_kvbms_group_keys():
    # A full + sliding-window model: the index keys each group apart, and the
    # keys it derives from a request's hashes are the ones the manager registers.
    from kvbm import groups as kg
    from kvbm.groups import KvCacheGroupSpec as Spec

    groups = [Spec.full(0, 16, 4096, [0, 2]), Spec.sliding_window(1, 64, 16, 4096, [1, 3])]
    m = kg.HybridBlockManagerG1(groups, 64)
    h = kvbm.hash_tokens(list(range(1, 129)), 16)[1]
    keys = kvbm.KvIndexer.kvbm_group_keys(h, groups)
    assert keys == [m.group_hashes(0, h), m.group_hashes(1, h)]
    assert [len(k) for k in kvbm.KvIndexer.group_token_keys(list(range(100)), groups)] == [6, 6]
    index = kvbm.KvIndexer(groups=groups)
    assert index.hybrid and not kvbm.KvIndexer().hybrid
    a = index.add_instance("a")
    # An event that names no group: a hybrid index counts it and leaves it out.
    index.apply(a, 0, [kvbm.BlockStored(keys[0], block_size=16)])
    assert index.stats()["group_mismatch_events"] == 1
    assert [o.prefix_blocks for o in index.overlaps(h)] == [0]
    assert [o.prefix_blocks for o in index.group_overlaps(keys, max_tokens=64)] == [0]
    with pytest.raises(kvbm.UsageError, match="1 key lists for 2 groups"):
        index.group_overlaps(keys[:1])
    with pytest.raises(kvbm.UsageError, match="hash_block_size"):
        kvbm.KvRouter(index, block_size=32)
