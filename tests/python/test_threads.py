"""Calls from several threads, and close() while they run (docs/python.md, "Threads").

Every call holds the manager for its whole duration; close() refuses new calls,
waits for those in flight and only then shuts the manager down. A call racing
close() either completes or raises kvbm.UsageError saying the manager was
closed, never crashes the interpreter; handles, views and onboarding handles
taken before close() stay safe to use and to drop.
"""

import os
import random
import threading

import numpy as np
import pytest

import kvbm
from conftest import pages, small_config

SCALE = float(os.environ.get("KVBM_STRESS_SCALE", "1"))
ROUNDS = max(3, int(30 * SCALE))


def build(tmp_path=None, inner_dim=256):
    return kvbm.KvBlockManager(
        small_config(tmp_path, device=16, host=32, disk=64 if tmp_path else 0,
                     inner_dim=inner_dim),
        events=True)


def one_call(kv, rng, kept):
    bb = kv.block_bytes
    keys = kvbm.hash_keys([b"t-%d" % rng.randrange(24) for _ in range(rng.randrange(1, 5))])
    op = rng.randrange(10)  # views (which keep the memory alive) are tested apart
    if op == 0:
        kv.store(keys, pages(len(keys), bb, rng.randrange(99)))
    elif op == 1:
        kv.load(keys, np.zeros((len(keys), bb), np.uint8))
    elif op == 2:
        kv.probe(keys, chained=False)
    elif op == 3:
        kv.present(keys, chained=False)
    elif op == 4:
        kv.stats()
    elif op == 5:
        kept.append(kv.onboard(keys, chained=False))
    elif op == 6:
        blocks = kv.allocate(1)
        if blocks:
            kv.write(blocks, pages(1, bb, 1))
            kept.extend(kv.register(blocks, keys[:1], chained=False))
    elif op == 7:
        kept.extend(kv.match(keys, kvbm.TierId.G2, chained=False))
    elif op == 8:
        kv.metrics_text()
    else:
        kv.take_events()


@pytest.mark.parametrize("with_disk", [False, True])
def test_close_while_threads_call(tmp_path, with_disk):
    for r in range(ROUNDS):
        d = tmp_path / f"r{r}"
        d.mkdir()
        kv = build(d if with_disk else None)
        kept, failures = [], []
        started = threading.Barrier(5)

        def worker(seed):
            rng = random.Random(seed)
            started.wait()
            try:
                while True:
                    one_call(kv, rng, kept)
            except kvbm.UsageError as e:
                if "closed" not in str(e):
                    failures.append(repr(e))
            except BaseException as e:  # noqa: BLE001 - any other error fails the test
                failures.append(repr(e))

        threads = [threading.Thread(target=worker, args=(r * 10 + i,)) for i in range(4)]
        for t in threads:
            t.start()
        started.wait()
        threading.Event().wait(random.Random(r).uniform(0.0, 0.02))
        kv.close()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a call did not end after close()"
        assert failures == []
        with pytest.raises(kvbm.UsageError, match="closed"):
            kv.probe([1])
        kv.close()  # idempotent
        # What the calls handed out before close() is still safe to use, then to drop.
        for h in kept:
            if isinstance(h, kvbm.OnboardHandle):
                h.wait()
                h.counts()
                h.error()
                h.take_blocks()
                h.cancel()
        del kept


def test_handles_outlive_close():
    kv = build()
    keys = kvbm.hash_keys([b"o-%d" % i for i in range(4)])
    src = pages(4, kv.block_bytes, 2)
    kv.store(keys, src)
    pending = kv.onboard(keys, chained=False)
    done = kv.onboard(keys, chained=False)
    done.wait()
    g1 = done.take_blocks()
    blocks = kv.allocate(2)
    imm = kv.register(kv.allocate(1), keys[:1], chained=False)
    offload = kv.offload(imm)
    view = kv.view(imm[0])
    kv.close()
    assert pending.wait(timeout_s=10) is not None
    assert pending.counts().total <= 4
    pending.cancel()
    assert len(pending.take_blocks()) <= 4
    assert [b.valid for b in g1] == [True] * 4
    assert offload.wait() in (kvbm.TransferStatus.DONE, kvbm.TransferStatus.CANCELLED)
    assert int(view.sum()) >= 0  # still readable
    for h in g1 + blocks + imm:
        h.release()
    del pending, done, g1, blocks, imm, offload, view


def test_calls_from_many_threads_agree():
    """Without close(): eight threads store and load distinct keys; every load returns the
    bytes stored under its key, and the pools balance."""
    with build() as kv:
        bb = kv.block_bytes
        failures = []

        def worker(i):
            try:
                for j in range(max(5, int(40 * SCALE))):
                    keys = kvbm.hash_keys([b"w%d-%d-%d" % (i, j, k) for k in range(2)])
                    src = pages(2, bb, i * 1000 + j)
                    if kv.store(keys, src) == 2:
                        out = np.zeros((2, bb), np.uint8)
                        n = kv.load(keys, out)
                        assert np.array_equal(out[:n], src[:n])
            except BaseException as e:  # noqa: BLE001
                failures.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        kv.drain()
        assert kv.audit() == ""


def test_every_call_after_close_raises_usage_error():
    kv = build()
    blocks = kv.allocate(1)
    kv.close()
    calls = [lambda: kv.allocate(1), lambda: kv.probe([1]), lambda: kv.present([1]),
             lambda: kv.onboard([1]), lambda: kv.store([1], np.zeros((1, 512), np.uint8)),
             lambda: kv.load([1], np.zeros((1, 512), np.uint8)), lambda: kv.stats(),
             lambda: kv.take_events(), lambda: kv.metrics_text(), lambda: kv.audit(),
             lambda: kv.drain(), lambda: kv.view(blocks[0]), lambda: kv.block_size,
             lambda: kv.write(blocks, np.zeros((1, 512), np.uint8)), lambda: kv.touch([1])]
    for call in calls:
        with pytest.raises(kvbm.UsageError, match="closed"):
            call()
    blocks[0].release()
