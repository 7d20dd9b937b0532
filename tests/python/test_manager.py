"""KvBlockManager from Python: round trips through every tier with NumPy buffers
(bytes compared), zero copy, errors, events, metrics, restarts, memory."""

import gc
import os
import sys
import threading
import time

import numpy as np
import pytest

import kvbm

from conftest import pages, run_python, small_config


def chain(n, seed=0):
    """The sequence hashes of n blocks of tokens (chained, as hash_tokens gives them)."""
    tokens = np.random.default_rng(seed).integers(0, 50_000, size=n * 16, dtype=np.uint32)
    return kvbm.hash_tokens(tokens, 16)[1]


def test_round_trip_g1(tmp_path):
    with kvbm.KvBlockManager(small_config(host=0, disk=0)) as kv:
        assert kv.device_emulated and kv.block_size == 16 and kv.block_bytes == 2 * 2 * 16 * 256 * 2
        h = chain(4)
        src = pages(4, kv.block_bytes, 1)
        assert kv.store(h, src, chained=True, tier=kvbm.TierId.G1) == 4
        out = np.zeros_like(src)
        assert kv.load(h, out, chained=True) == 4
        assert (out == src).all()
        counts = kv.probe(h)
        assert counts.device == 4 and counts.total == 4


def test_round_trip_g2_then_g3(tmp_path):
    with kvbm.KvBlockManager(small_config(tmp_path, device=8, host=8, disk=64)) as kv:
        h = chain(6, seed=2)
        src = pages(6, kv.block_bytes, 2)
        assert kv.store(h, src, chained=True) == 6  # into G2, written through to G3
        kv.drain()
        assert kv.present(h).tolist() == [2] * 6
        out = np.zeros_like(src)
        assert kv.load(h, out, chained=True) == 6
        assert (out == src).all()
        # Push everything out of G1 and G2 with other blocks: the prefix now comes from G3.
        for s in range(3):
            other = chain(8, seed=100 + s)
            assert kv.store(other, pages(8, kv.block_bytes, 100 + s), chained=True) == 8
            kv.drain()
            assert kv.load(other, np.zeros((8, kv.block_bytes), np.uint8), chained=True) == 8
        assert kv.present(h).tolist() == [3] * 6
        handle = kv.onboard(h)
        assert handle.wait(timeout_s=30) == kvbm.TransferStatus.DONE
        counts = handle.counts()
        assert counts.disk == 6 and handle.sources() == [kvbm.TierId.G3] * 6
        assert counts.from_tier(kvbm.TierId.G3) == 6 and counts.from_tier(kvbm.TierId.G1) == 0
        assert repr(counts).startswith("OnboardCounts(device=0, host=0, disk=6, remote=0, ")
        blocks = handle.take_blocks()
        out = np.zeros_like(src)
        kv.read(blocks, out)
        assert (out == src).all()
        assert [b.sequence_hash for b in blocks] == h.tolist()
        assert [b.position for b in blocks] == list(range(6))
        del blocks, handle
        kv.drain()
        assert kv.audit() == ""


def test_rows_gather_and_scatter():
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        buf = pages(10, kv.block_bytes, 3)
        h = kvbm.hash_keys([b"a", b"b", b"c"])
        rows = np.array([7, 2, 9], dtype=np.int64)
        assert kv.store(h, buf, rows=rows) == 3
        out = np.zeros_like(buf)
        assert kv.load(h, out, rows=np.array([0, 5, 1], dtype=np.int64)) == 3
        assert (out[0] == buf[7]).all() and (out[5] == buf[2]).all() and (out[1] == buf[9]).all()
        assert not out[2].any()


def test_layer_separated_round_trip():
    cfg = small_config(disk=0)
    cfg.device_layout = kvbm.LayoutKind.LAYER_SEPARATED
    with kvbm.KvBlockManager(cfg) as kv:
        blocks = kv.allocate(2)
        with pytest.raises(kvbm.UsageError, match="region_view"):
            kv.view(blocks[0])
        region = kv.region_view(blocks[0], 1, 0)
        assert region.nbytes == 16 * 256 * 2
        src = pages(2, kv.block_bytes, 4)
        kv.write(blocks, src)
        # The row is the block's (layer, outer) regions in order: region (1, 0) is the third.
        r = 16 * 256 * 2
        assert (region == src[0, 2 * r:3 * r]).all()
        out = np.zeros_like(src)
        kv.read(blocks, out)
        assert (out == src).all()


def test_zero_copy_addresses():
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        src = pages(4, kv.block_bytes, 5)
        # The buffer's address reaches C++ unchanged (no conversion copy) ...
        assert kvbm.KvBlockManager._address(src) == src.ctypes.data
        assert kvbm.KvBlockManager._address(src[2:]) == src[2:].ctypes.data
        # ... and a block's view is its memory, where C++ says the block is.
        blocks = kv.allocate(1)
        view = kv.view(blocks[0])
        view[:] = src[0]  # written in place, no copy through Python
        imm = kv.register(blocks, [42], chained=False)
        ro = kv.view(imm[0])
        assert ro.ctypes.data == view.ctypes.data == kv.block_address(imm[0])
        assert not ro.flags.writeable
        out = np.zeros((1, kv.block_bytes), np.uint8)
        kv.read(imm, out)
        assert (out[0] == src[0]).all()
        # DLPack: NumPy's own import of the view sees the same memory.
        assert np.from_dlpack(view).ctypes.data == view.ctypes.data


def test_view_outlives_manager():
    kv = kvbm.KvBlockManager(small_config(disk=0))
    blocks = kv.allocate(1)
    view = kv.view(blocks[0])
    view[:] = 9
    kv.close()
    with pytest.raises(kvbm.UsageError, match="closed"):
        kv.allocate(1)
    assert (view == 9).all()  # the memory lives as long as a view of it
    del blocks
    gc.collect()
    assert (view == 9).all()


def test_handles_register_and_release():
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        blocks = kv.allocate(3)
        assert [b.tier for b in blocks] == ["G1"] * 3
        assert kv.allocate(14) is None  # all or nothing: 13 of 16 are free
        h = chain(3, seed=6)
        imm = kv.register(blocks, h)
        assert not any(b.valid for b in blocks)  # moved into the registered blocks
        with pytest.raises(kvbm.UsageError, match="released or already registered"):
            kv.register(blocks, h)
        assert [b.parent for b in imm] == [None, int(h[0]), int(h[1])]
        assert imm[0].use_count == 1
        c = imm[0].clone()
        assert imm[0].use_count == 2
        c.release()
        assert not c.valid and imm[0].use_count == 1
        with pytest.raises(kvbm.UsageError, match="block_id"):
            c.block_id
        matched = kv.match(h)
        assert [b.block_id for b in matched] == [b.block_id for b in imm]
        t = kv.offload(imm)  # to G2
        assert t.wait() == kvbm.TransferStatus.DONE
        g2 = kv.match(h, tier=kvbm.TierId.G2)
        assert len(g2) == 3 and g2[0].tier == "G2"
        out = np.zeros((3, kv.block_bytes), np.uint8)
        kv.read(g2, out)
        ref = np.zeros_like(out)
        kv.read(imm, ref)
        assert (out == ref).all()


def test_register_the_rest_of_a_sequence_after_its_prefix():
    with kvbm.KvBlockManager(small_config(host=0, disk=0)) as kv:
        h = chain(4, seed=8)
        head = kv.register(kv.allocate(2), h[:2])
        tail = kv.register(kv.allocate(2), h)  # the whole sequence: the blocks are its last two
        assert [b.sequence_hash for b in tail] == [int(h[2]), int(h[3])]
        assert [b.parent for b in tail] == [int(h[1]), int(h[2])]
        assert [b.position for b in tail] == [2, 3]
        with pytest.raises(kvbm.UsageError, match="3 blocks but 2 hashes"):
            kv.register(kv.allocate(3), h[:2])
        with pytest.raises(kvbm.UsageError, match="2 blocks but 4 hashes"):
            kv.register(kv.allocate(2), h, chained=False)  # a flat list: one hash per block
        kvbm.release(head + tail)


def test_release_evicts_a_chain_from_its_tail():
    # G1 of 4 blocks: the chain a b c d fills it. Released last block first,
    # the next allocations evict d, then c: the head stays matchable.
    with kvbm.KvBlockManager(small_config(device=4, host=0, disk=0), events=True) as kv:
        h = chain(4, seed=9)
        blocks = kv.register(kv.allocate(4), h)
        kvbm.release(blocks)
        assert not any(b.valid for b in blocks)
        kv.take_events()
        fresh = []
        for expected in (3, 2):
            fresh += kv.allocate(1)
            removed = [e for e in kv.take_events() if isinstance(e, kvbm.BlockRemoved)]
            assert [list(e.block_hashes) for e in removed] == [[int(h[expected])]]
        assert len(kv.match(h)) == 2  # a and b, still a prefix


def test_errors_carry_the_cpp_message(tmp_path):
    cfg = small_config(disk=0)
    cfg.device = kvbm.TierConfig(blocks=0)
    with pytest.raises(kvbm.UsageError, match=r"KvBlockManagerConfig\.device") as e:
        kvbm.KvBlockManager(cfg)
    assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="no option named 'devic'"):
        kvbm.KvBlockManagerConfig(devic=kvbm.TierConfig(blocks=1))
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        with pytest.raises(kvbm.UsageError, match="whole number of blocks"):
            kv.store(kvbm.hash_keys([b"x"]), np.zeros(100, np.uint8))
        with pytest.raises(kvbm.UsageError, match="outside the buffer"):
            kv.store(kvbm.hash_keys([b"x"]), pages(1, kv.block_bytes, 0), rows=np.array([3]))
        with pytest.raises(kvbm.UsageError, match="take_events"):
            kv.take_events()


def test_runtime_error_kind_no_space(tmp_path):
    """A G3 file beyond the file size limit: KvbmRuntimeError, kind 'no_space' (child process,
    where RLIMIT_FSIZE is set)."""
    code = f"""
import resource, signal, sys
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
import kvbm
from conftest import small_config
try:
    kvbm.KvBlockManager(small_config(sys.argv[1], disk=4096))
except kvbm.KvbmRuntimeError as e:
    print(type(e).__mro__[1].__name__, e.kind, e.code, str(e)[:200])
"""
    out = run_python(code, tmp_path)
    assert out.startswith("RuntimeError no_space"), out


def test_events_and_metrics(tmp_path):
    with kvbm.KvBlockManager(small_config(tmp_path), events=True) as kv:
        h = chain(3, seed=7)
        kv.store(h, pages(3, kv.block_bytes, 7), chained=True)
        kv.drain()
        events = kv.take_events()
        stored = {(e.medium, tuple(e.block_hashes)) for e in events
                  if isinstance(e, kvbm.BlockStored)}
        assert ("CPU", tuple(h.tolist())) in stored
        assert ("STORAGE", tuple(h.tolist())) in stored
        chained = [e for e in events if isinstance(e, kvbm.BlockStored) and e.medium == "CPU"][0]
        assert chained.parent_block_hash is None and chained.block_size == 16
        assert kv.take_events() == []
        text = kv.metrics_text()
        assert "# TYPE kvbm_allocations_total counter" in text
        assert 'kvbm_registrations_total{pool="G2"} 3' in text
        s = kv.stats()
        assert s["tiers"]["G2"]["registrations"] == 3 and s["tiers"]["G3"]["registrations"] == 3
        assert s["boundaries"]["G2->G3"]["transferred"] == 3
        # Every field of the C++ structs, by its C++ name (src/python/stats.cpp).
        g2 = s["tiers"]["G2"]
        assert g2["reset"] + g2["inactive"] + g2["in_use"] == g2["total"]
        assert {"evictable", "mutable_out", "immutable_out", "stagings",
                "match_blocks_returned", "scan_hashes_requested"} <= set(g2)
        assert g2["evictable"] <= g2["inactive"]
        assert s["transfers"]["G2_to_G3"]["blocks"] == 3
        assert s["transfers"]["G2_to_G3"]["bytes"] == 3 * kv.block_bytes


PERSIST_STORE = """
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
import kvbm
from conftest import small_config, pages
kv = kvbm.KvBlockManager(small_config(sys.argv[1], persistent=True))
h = kvbm.hash_keys([b"page-%d" % i for i in range(8)])
assert kv.store(h, pages(8, kv.block_bytes, 11)) == 8
kv.close()   # drains: G3 holds all eight
print("stored")
"""

PERSIST_LOAD = """
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
import kvbm
from conftest import small_config, pages
kv = kvbm.KvBlockManager(small_config(sys.argv[1], persistent=True))
rec = kv.disk_recovery()
h = kvbm.hash_keys([b"page-%d" % i for i in range(8)])
out = np.zeros((8, kv.block_bytes), np.uint8)
n = kv.load(h, out)
ref = pages(8, kv.block_bytes, 11)
print(rec["recovered"], n, int((out[:n] == ref[:n]).all()), kv.probe(h, chained=False).disk)
kv.close()
"""


def test_restart_loads_warm_from_g3(tmp_path):
    here = os.path.dirname(__file__)
    assert run_python(PERSIST_STORE, tmp_path, here).strip() == "stored"
    recovered, n, equal, _ = run_python(PERSIST_LOAD, tmp_path, here).split()
    assert (recovered, n, equal) == ("8", "8", "1")


def test_corrupt_block_is_a_miss_never_loaded(tmp_path):
    here = os.path.dirname(__file__)
    run_python(PERSIST_STORE, tmp_path, here)
    # Flip one byte inside block 3's payload in the G3 file.
    sys.path.insert(0, here)
    from conftest import pages as make_pages
    block_bytes = 2 * 2 * 16 * 256 * 2
    ref = make_pages(8, block_bytes, 11)
    path = tmp_path / "kvbm.slots"
    data = bytearray(path.read_bytes())
    at = data.find(ref[3, :64].tobytes())
    assert at >= 0, "block 3's bytes not found in the G3 file"
    data[at + 1000] ^= 0xFF
    path.write_bytes(bytes(data))
    recovered, n, equal, _ = run_python(PERSIST_LOAD, tmp_path, here).split()
    assert n == "3" and equal == "1", (recovered, n, equal)  # blocks 0-2 served, 3 never


def test_gil_released_while_copying():
    """While one thread is inside kv.load (100 MiB of copies), another runs Python: the call
    released the GIL (a call that kept it would let no bytecode run until it returned)."""
    with kvbm.KvBlockManager(small_config(device=512, host=0, disk=0, inner_dim=4096)) as kv:
        h = kvbm.hash_keys([b"g%d" % i for i in range(400)])
        src = pages(400, kv.block_bytes, 12)  # 400 x 256 KiB
        out = np.empty_like(src)
        assert kv.store(h, src, tier=kvbm.TierId.G1) == 400
        window = {}

        def worker():
            time.sleep(0.01)  # let the main thread start counting
            window["start"] = time.perf_counter()
            kv.load(h, out)
            window["end"] = time.perf_counter()

        t = threading.Thread(target=worker)
        ticks = []
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
        inside = [x for x in ticks if window["start"] < x < window["end"]]
        assert (out == src).all()
        assert len(inside) > 100, (f"the main thread ran {len(inside)} times in the "
                                   f"{(window['end'] - window['start']) * 1e3:.1f} ms of kv.load")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_many_iterations(tmp_path):
    with kvbm.KvBlockManager(small_config(tmp_path, device=64, host=64, disk=256),
                             events=True) as kv:
        buf = pages(8, kv.block_bytes, 13)
        out = np.empty_like(buf)

        def one(i):
            h = kvbm.hash_keys([b"leak-%d-%d" % (i, j) for j in range(8)])
            kv.store(h, buf)
            kv.load(h, out)
            blocks = kv.allocate(2)
            v = kv.view(blocks[0])
            v[0] = 1
            imm = kv.register(blocks, kvbm.hash_keys([b"r-%d" % i, b"s-%d" % i]), chained=False)
            kv.view(imm[1])
            kv.probe(h, chained=False)
            kv.present(h, chained=False)
            kv.take_events()
            kv.metrics_text()

        for i in range(300):  # warm up: pools fill, evictions start, caches settle
            one(i)
        kv.drain()
        gc.collect()
        before = rss_bytes()
        for i in range(300, 2300):
            one(i)
        kv.drain()
        gc.collect()
        growth = rss_bytes() - before
        if not os.environ.get("KVBM_SANITIZER"):  # a sanitizer's own bookkeeping grows RSS
            assert growth < 8 << 20, f"RSS grew by {growth / 2**20:.1f} MiB over 2000 iterations"
        assert kv.audit() == ""


def test_g4_two_managers_share_blocks(tmp_path, redis_url):
    def config(sub):
        d = tmp_path / sub
        d.mkdir()
        cfg = small_config(d)
        cfg.remote.urls = [redis_url]
        cfg.remote.model = "tests-model"
        return cfg

    a = kvbm.KvBlockManager(config("a"))
    b = kvbm.KvBlockManager(config("b"))
    try:
        assert a.has_remote
        h = chain(5, seed=14)
        src = pages(5, a.block_bytes, 14)
        assert a.store(h, src, chained=True) == 5
        a.drain()  # written through to G4
        assert b.probe(h).remote == 5
        out = np.zeros_like(src)
        assert b.load(h, out, chained=True) == 5
        assert (out == src).all()
        assert b.stats()["onboarding"]["onboarded"].get("G4", 0) == 5
    finally:
        a.close()
        b.close()


def test_g4_refused_is_reported_in_stats(tmp_path, redis_url, monkeypatch):
    """A user the server does not know is refused: G4 serves misses and stats() says
    "refused" (not "down") with the server's reply, the user and the blocks by reason."""
    monkeypatch.setenv("KVBM_TEST_G4_PASSWORD", "not-the-password")
    cfg = small_config(tmp_path)
    cfg.remote.urls = [redis_url]
    cfg.remote.model = "tests-model"
    cfg.remote.username = "kvbm"
    cfg.remote.password_env = "KVBM_TEST_G4_PASSWORD"
    with kvbm.KvBlockManager(cfg) as kv:
        h = chain(4, seed=15)
        assert kv.store(h, pages(4, kv.block_bytes, 15), chained=True) == 4
        kv.drain()  # written through to G4: refused
        g4 = kv.stats()["remote"]
        assert g4["state"] == "refused"
        assert g4["servers"] == 1 and g4["servers_refused"] == 1 and g4["servers_down"] == 0
        assert "WRONGPASS" in g4["refusal"]
        assert g4["refused_user"] == "kvbm"
        assert g4["refused_by_reason"]["wrongpass"] == g4["blocks_by_status"]["access_denied"] > 0
        assert "not-the-password" not in str(g4)
        assert g4["puts"] == 0
        assert kv.audit() == ""


@pytest.mark.parametrize("url, why", [("redis://", "urls\\[0\\]: "),
                                      ("http://x:1", "urls\\[0\\]: "),
                                      ("redis://host:70000", "urls\\[0\\]: ")])
def test_bad_g4_options_name_the_option(url, why):
    cfg = small_config(disk=0)
    cfg.remote.urls = [url]
    cfg.remote.model = "m"
    with pytest.raises(kvbm.UsageError, match="KvBlockManagerConfig.remote." + why):
        kvbm.KvBlockManager(cfg)
    cfg.remote.urls = ["redis://127.0.0.1:1"]
    for prefix in ("", "a:b"):
        cfg.remote.key_prefix = prefix
        with pytest.raises(kvbm.UsageError, match="KvBlockManagerConfig.remote.key_prefix: "):
            kvbm.KvBlockManager(cfg)


def test_load_copies_what_g1_and_g2_hold_straight_out():
    """load() copies the blocks G1 and G2 hold straight into the caller's buffer: nothing lands
    in G1 on the way (it would only add a copy); the G2 blocks stay where they are."""
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        h = kvbm.hash_keys([b"direct-%d" % i for i in range(6)])
        src = pages(6, kv.block_bytes, 21)
        assert kv.store(h[:2], src[:2], tier=kvbm.TierId.G1) == 2
        assert kv.store(h[2:], src[2:]) == 4  # G2
        out = np.zeros_like(src)
        assert kv.load(h, out) == 6
        assert (out == src).all()
        assert list(kv.present(h, chained=False)) == [1, 1, 2, 2, 2, 2]
        assert kv.stats()["tiers"]["G1"]["allocations"] == 2  # only the two stored there
        assert kv.audit() == ""


def test_version_is_the_projects_one_everywhere():
    """One version: project(VERSION) of CMakeLists.txt, as the extension, the package metadata
    and the C++ header (KVBM_VERSION) carry it."""
    import importlib.metadata
    import re
    from pathlib import Path

    cmake = (Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    want = re.search(r"project\(kvbm\s+VERSION\s+([0-9.]+)", cmake).group(1)
    assert kvbm.__version__ == want
    assert importlib.metadata.version("kvbm") == want


def test_onboarding_says_what_kind_of_problem_cut_it_short():
    """A prefix cut because G1 had no room for it reports 'no_space' by kind, not only in words."""
    with kvbm.KvBlockManager(small_config(device=4, host=16, disk=0)) as kv:
        h = kvbm.hash_keys([b"cut-%d" % i for i in range(4)])
        assert kv.store(h, pages(4, kv.block_bytes, 3), chained=False) == 4
        kv.drain()
        held = kv.allocate(4)  # every G1 block held: nothing found in G2 can land
        handle = kv.onboard(h, chained=False)
        handle.wait()
        assert handle.counts().no_space > 0
        assert handle.error_kind() == "no_space"
        assert "G1" in handle.error()
        del held
        ok = kv.onboard(h, chained=False)
        ok.wait()
        assert ok.error_kind() is None and ok.error() == ""
        ok.take_blocks()


def test_remote_config_takes_the_store_options():
    # RemoteTierConfig is the store's options plus the facade's (C++: a RemoteStoreOptions).
    r = kvbm.RemoteTierConfig(urls=["redis://127.0.0.1:6379/0"], username="kvbm",
                              password_env="KVBM_REDIS_PASSWORD", replica_reads=True,
                              connect_timeout_ms=300, ttl_s=60)
    assert (r.username, r.password_env, r.password_file) == ("kvbm", "KVBM_REDIS_PASSWORD", "")
    assert r.replica_reads and r.connect_timeout_ms == 300 and r.ttl_s == 60


def test_pipeline_config_is_the_cpp_one():
    """PipelineConfig's fields reach the manager: an invalid one is refused by name, and
    host_to_disk_pipeline takes a whole PipelineConfig or None."""
    p = kvbm.PipelineConfig(hold_queued_blocks=True, space_wait_ms=50, max_concurrent_transfers=2,
                            batch_config=kvbm.BatchConfig(max_batch_size=16, min_batch_size=4,
                                                          flush_interval_ms=3))
    assert p.hold_queued_blocks and p.space_wait_ms == 50 and p.max_concurrent_transfers == 2
    assert (p.batch_config.max_batch_size, p.batch_config.flush_interval_ms) == (16, 3)
    assert (p.policy_timeout_ms, p.sweep_interval_ms) == (100, 10)  # the C++ defaults
    cfg = small_config(disk=0)
    cfg.pipeline = p
    cfg.pipeline.batch_config.min_batch_size = 8  # nested structs are edited in place
    assert cfg.pipeline.batch_config.min_batch_size == 8 and cfg.host_to_disk_pipeline is None
    cfg.host_to_disk_pipeline = kvbm.PipelineConfig(max_concurrent_transfers=4)
    assert cfg.host_to_disk_pipeline.max_concurrent_transfers == 4
    with kvbm.KvBlockManager(cfg):
        pass
    cfg.pipeline.batch_config.min_batch_size = 17  # above max_batch_size
    with pytest.raises(kvbm.UsageError, match="min_batch_size"):
        kvbm.KvBlockManager(cfg)
    with pytest.raises(TypeError, match="no option named 'hold_queued'"):
        kvbm.PipelineConfig(hold_queued=True)


def silent_g4_with_a_g2_part(tmp_path, port, seed):
    """A manager whose G4 is the loopback server at `port` that never answers (5 s command
    timeout), with the first 4 of 8 chained blocks stored in G2; returns (manager, the 8
    hashes, the 4 blocks' bytes)."""
    cfg = small_config(tmp_path, disk=0)
    cfg.remote.urls = [f"redis://127.0.0.1:{port}"]
    cfg.remote.model = "tests-model"
    cfg.remote.command_timeout_ms = 5000
    cfg.host_to_remote = kvbm.OffloadMode.NONE
    kv = kvbm.KvBlockManager(cfg)
    h = chain(8, seed=seed)
    src = pages(4, kv.block_bytes, seed)
    assert kv.store(h[:4], src, chained=True) == 4
    return kv, h, src


def test_take_arrived_hands_back_the_local_part_while_g4_is_silent(tmp_path):
    """G4 on a server that accepts and never answers: an onboarding's G2 part arrives while its
    remote stage waits on G4; take_arrived() hands that part back at once (not after the 5 s
    command timeout), with its bytes, and every pool balances at the end."""
    from silent_peers import accepts_never_answers

    with accepts_never_answers() as port:
        kv, h, src = silent_g4_with_a_g2_part(tmp_path, port, 21)
        with kv:
            handle = kv.onboard(h)
            deadline = time.monotonic() + 5
            while handle.arrived() < 4 and time.monotonic() < deadline:
                time.sleep(0.001)
            start = time.monotonic()
            blocks = handle.take_arrived()
            took = time.monotonic() - start
            assert len(blocks) == 4 and took < 2.5, (len(blocks), took)
            assert handle.status() == kvbm.TransferStatus.DONE
            assert handle.counts().host == 4 and handle.arrived() == 4
            out = np.zeros_like(src)
            kv.read(blocks, out)
            assert np.array_equal(out, src)
            kvbm.release(blocks)
            kv.drain()
            assert kv.audit() == ""


def test_load_with_a_deadline_returns_by_it_while_g4_is_silent(tmp_path):
    """load(deadline=) copies out what G2 holds and gives the silent G4 until the deadline, not
    its 5 s command timeout: the plan's question to G4 and the onboarding both end by it."""
    from silent_peers import accepts_never_answers

    with accepts_never_answers() as port:
        kv, h, src = silent_g4_with_a_g2_part(tmp_path, port, 22)
        with kv:
            out = np.zeros((8, kv.block_bytes), np.uint8)
            start = time.monotonic()
            n = kv.load(h, out, chained=True, deadline=0.2)
            took = time.monotonic() - start
            assert n == 4 and took < 2.5, (n, took)
            assert np.array_equal(out[:4], src)
            with pytest.raises(kvbm.UsageError, match="negative"):
                kv.load(h, out, chained=True, deadline=-1)
            kv.drain()
            assert kv.audit() == ""
