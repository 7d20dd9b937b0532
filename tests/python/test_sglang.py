"""kvbm.integrations.sglang.KvbmStorage driven as SGLang's HiCacheController drives a
storage backend: created as a 'dynamic' backend (backend_class(storage_config, kwargs)),
register_mem_pool_host, then batch_exists / batch_get (prefetch) and batch_set
(backup) in batches of pages, the single-page get / set / exists, the v1 calls through
the host pool, clear, close. A second process (a restarted server) finds the pages;
a corrupted page is a miss, never returned.

SGLang is not installed here (it needs torch): pages are NumPy arrays, and
test_signatures_match_sglang compares the method signatures with SGLang's own
hicache_storage.py when KVBM_SGLANG_SOURCE names an unpacked sglang wheel.
"""

import importlib
import os
from types import SimpleNamespace

import numpy as np
import pytest

import kvbm
from kvbm.integrations import sglang as kv_sglang
from kvbm.integrations.sglang import KvbmStorage

from conftest import run_python
from interface_check import abstract_interface, mismatches
from skips import skip_or_fail

PAGE_BYTES = 2 * 32 * 1024  # 2 layers x 32 KiB, flat


class HostPool:
    """The parts of SGLang's HostKVCache a backend uses: flat pages by token index."""

    def __init__(self, pages, page_size=16, layout="layer_first", dtype=np.dtype(np.uint8)):
        self.page_size = page_size
        self.layout, self.dtype = layout, dtype  # SGLang's host pools: a layout, a torch dtype
        self.buf = np.zeros((pages, PAGE_BYTES), dtype=np.uint8)

    def get_dummy_flat_data_page(self):
        return np.zeros(PAGE_BYTES, dtype=np.uint8)

    def get_data_page(self, index, flat=True):
        return self.buf[int(index) // self.page_size]

    def set_from_flat_data_page(self, index, data_page):
        self.buf[int(index) // self.page_size] = data_page


def storage_config(extra):
    return SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                           attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                           is_page_first_layout=True, model_name="test/model", extra_config=extra)


def make_backend(tmp_path, **options):
    """As StorageBackendFactory._create_dynamic_backend does it."""
    extra = {"backend_name": "kvbm", "module_path": "kvbm.integrations.sglang",
             "class_name": "KvbmStorage", "disk_directory": str(tmp_path),
             "disk_bytes": 256 * PAGE_BYTES, "host_bytes": 32 * PAGE_BYTES, "device_blocks": 16,
             **options}
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    backend = cls(storage_config(extra), {})
    pool = HostPool(64)
    backend.register_mem_pool_host(pool)
    return backend, pool


def page_hashes(n, tag="p"):
    return [f"{tag}{i:04d}".ljust(64, "0") for i in range(n)]  # SGLang's keys are sha256 hex


def random_pages(n, seed):
    return [p for p in np.random.default_rng(seed).integers(0, 256, size=(n, PAGE_BYTES),
                                                            dtype=np.uint8)]


def test_backup_then_prefetch_in_controller_order(tmp_path):
    b, _ = make_backend(tmp_path)
    keys = page_hashes(10)
    assert b.batch_exists(keys) == 0
    data = random_pages(10, 1)
    assert b.batch_set(keys, data)  # _generic_page_set
    assert b.batch_exists(keys) == 10
    assert b.batch_exists(keys + page_hashes(3, "q")) == 10
    targets = [np.zeros(PAGE_BYTES, np.uint8) for _ in keys]  # _generic_page_get: dummy pages
    got = b.batch_get(keys, targets)
    assert all(g is t for g, t in zip(got, targets))
    assert all((g == d).all() for g, d in zip(got, data))
    # A batch whose fifth page was never stored: four pages, then None.
    mixed = keys[:4] + page_hashes(1, "missing") + keys[5:]
    got = b.batch_get(mixed, [np.zeros(PAGE_BYTES, np.uint8) for _ in mixed])
    assert [g is not None for g in got] == [True] * 4 + [False] * 6
    # Single-page calls.
    assert b.exists(keys[0]) and not b.exists("nope".ljust(64, "0"))
    assert b.set("single".ljust(64, "0"), data[0])
    out = b.get("single".ljust(64, "0"), np.zeros(PAGE_BYTES, np.uint8))
    assert out is not None and (out == data[0]).all()
    assert b.get("nope".ljust(64, "0"), np.zeros(PAGE_BYTES, np.uint8)) is None
    assert b.kvbm_stats()["tiers"]["G2"]["registrations"] >= 11
    b.close()


def test_v1_calls_through_the_host_pool(tmp_path):
    b, pool = make_backend(tmp_path)
    keys = page_hashes(4, "v1")
    data = random_pages(4, 2)
    for i, d in enumerate(data):
        pool.buf[i] = d
    host_indices = np.arange(4 * pool.page_size)
    assert b.batch_set_v1(keys, host_indices) == [True] * 4
    pool.buf[:] = 0
    dst = np.arange(10 * pool.page_size, 14 * pool.page_size)
    assert b.batch_get_v1(keys, dst) == [True] * 4
    assert all((pool.buf[10 + i] == d).all() for i, d in enumerate(data))
    b.close()


def test_clear_forgets_everything(tmp_path):
    b, _ = make_backend(tmp_path)
    keys = page_hashes(3, "c")
    assert b.batch_set(keys, random_pages(3, 3))
    b.clear()
    assert b.batch_exists(keys) == 0
    b.close()


def test_unknown_option_and_missing_directory(tmp_path):
    with pytest.raises(kvbm.UsageError, match="disk_directory"):
        KvbmStorage(storage_config({}), {})
    with pytest.raises(kvbm.UsageError, match="unknown option"):
        KvbmStorage(storage_config({"disk_directory": str(tmp_path), "disk_byte": 1}), {})


CHILD = """
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
from test_sglang import make_backend, page_hashes, random_pages, PAGE_BYTES
b, _ = make_backend(sys.argv[1])
keys = page_hashes(12, "restart")
if sys.argv[3] == "store":
    print(int(b.batch_set(keys, random_pages(12, 5))))
else:
    n = b.batch_exists(keys)
    got = b.batch_get(keys, [np.zeros(PAGE_BYTES, np.uint8) for _ in keys])
    ref = random_pages(12, 5)
    k = sum(g is not None for g in got)
    print(n, k, int(all((g == r).all() for g, r in zip(got[:k], ref))))
b.close()
"""


def test_restarted_server_finds_pages(tmp_path):
    here = os.path.dirname(__file__)
    assert run_python(CHILD, tmp_path, here, "store").split()[-1] == "1"
    assert run_python(CHILD, tmp_path, here, "load").split()[-3:] == ["12", "12", "1"]


def test_corrupt_page_is_never_returned(tmp_path):
    here = os.path.dirname(__file__)
    run_python(CHILD, tmp_path, here, "store")
    ref = random_pages(12, 5)
    path = tmp_path / "kvbm.slots"
    data = bytearray(path.read_bytes())
    at = data.find(ref[2][:256].tobytes())
    assert at >= 0
    data[at + 5000] ^= 0x80
    path.write_bytes(bytes(data))
    n, k, ok = run_python(CHILD, tmp_path, here, "load").split()[-3:]
    assert k == "2" and ok == "1", (n, k, ok)  # pages 0-1 only; page 2 failed its check


def test_g4_shared_by_two_servers(tmp_path, redis_url):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, _ = make_backend(tmp_path / "a", remote_urls=[redis_url])
    b, _ = make_backend(tmp_path / "b", remote_urls=[redis_url])
    keys = page_hashes(6, "g4")
    data = random_pages(6, 6)
    assert a.batch_set(keys, data)
    a.kv.drain()
    assert b.batch_exists(keys) == 6  # none local: G4 answers
    got = b.batch_get(keys, [np.zeros(PAGE_BYTES, np.uint8) for _ in keys])
    assert all(g is not None and (g == d).all() for g, d in zip(got, data))
    a.close()
    b.close()


def test_ranks_get_their_own_g3_files(tmp_path):
    """A persistent G3 file belongs to one process: two TP ranks on one directory each get a
    subdirectory, and both work at once."""
    extra = {"disk_directory": str(tmp_path), "disk_bytes": 64 * PAGE_BYTES,
             "host_bytes": 16 * PAGE_BYTES, "device_blocks": 8, "page_bytes": PAGE_BYTES,
             "namespace": "test-model-raw-pages"}
    ranks = []
    for r in range(2):
        cfg = storage_config(dict(extra))
        cfg.tp_rank, cfg.tp_size = r, 2
        ranks.append(KvbmStorage(cfg, {}))
    assert ([os.path.basename(b.disk_directory) for b in ranks]
            == ["tp0-pp0-cp0-dp0", "tp1-pp0-cp0-dp0"])
    for r, b in enumerate(ranks):
        assert b.batch_set(page_hashes(2, f"rank{r}"), random_pages(2, r))
    assert ranks[0].batch_exists(page_hashes(2, "rank1")) == 0  # TP shards hold different pages
    for b in ranks:
        b.close()


def test_signatures_match_sglang():
    src = os.environ.get("KVBM_SGLANG_SOURCE")
    path = src and os.path.join(src, "sglang", "srt", "mem_cache", "hicache_storage.py")
    if not path or not os.path.exists(path):
        skip_or_fail("engine sources missing: KVBM_SGLANG_SOURCE not set (a directory holding an "
                     "unpacked sglang wheel; the engines stage sets it)")
    iface = abstract_interface(path, "HiCacheStorage")
    for name, (_, abstract, _) in iface.items():
        if abstract:
            assert name in KvbmStorage.__dict__, f"KvbmStorage lacks abstract method {name}"
    methods = ["get", "batch_get", "set", "batch_set", "exists", "batch_exists", "batch_get_v1",
               "batch_set_v1", "clear", "get_stats", "register_mem_pool_host"]
    assert not mismatches(KvbmStorage, iface, methods)


def test_strided_and_read_only_pages(tmp_path):
    """Pages that kvbm cannot use in place (a column of a wider buffer, a transposed view, a
    read-only array) are staged by the backend: batch_get fills the caller's own arrays,
    batch_set stores their logical bytes."""
    b, _ = make_backend(tmp_path)
    keys = page_hashes(3)
    data = random_pages(3, 7)
    wide = np.zeros((PAGE_BYTES, 2), np.uint8)
    wide[:, 0] = data[0]
    ro = data[2].copy()
    ro.flags.writeable = False
    assert not wide[:, 0].flags.c_contiguous
    assert b.batch_set(keys, [wide[:, 0], data[1], ro])
    big = np.zeros((PAGE_BYTES, 3), np.uint8)
    fortran = np.asfortranarray(np.zeros((256, PAGE_BYTES // 256), np.uint8))
    targets = [big[:, 1], fortran, np.zeros(PAGE_BYTES, np.uint8)]
    got = b.batch_get(keys, targets)
    assert all(g is t for g, t in zip(got, targets))
    assert (big[:, 1] == data[0]).all() and not big[:, 0].any() and not big[:, 2].any()
    assert (fortran.reshape(-1) == data[1]).all()
    assert (targets[2] == data[2]).all()
    b.close()


def test_format_in_namespace_or_refusal(tmp_path):
    """The page layout and KV dtype are part of the namespace (a G3 file of another format is
    emptied, never served); with neither a host pool nor `namespace` the backend refuses."""
    b = KvbmStorage(storage_config({"disk_directory": str(tmp_path), "page_bytes": PAGE_BYTES,
                                    "disk_bytes": 64 * PAGE_BYTES,
                                    "host_bytes": 16 * PAGE_BYTES}), {})
    b.storage_config.is_page_first_layout = False
    with pytest.raises(kvbm.UsageError, match="set `namespace`"):
        b.batch_set(page_hashes(1), random_pages(1, 8))
    b.close()
    a, _ = make_backend(tmp_path)
    assert a.namespace == "test-model|tp0/1|layout=layer_first|dtype=uint8"
    keys = page_hashes(2, "fmt")
    assert a.batch_set(keys, random_pages(2, 9))
    a.close()
    backend = KvbmStorage(storage_config({"disk_directory": str(tmp_path),
                                          "disk_bytes": 256 * PAGE_BYTES,
                                          "host_bytes": 32 * PAGE_BYTES, "device_blocks": 16}), {})
    backend.register_mem_pool_host(HostPool(64, layout="page_first"))
    assert backend.namespace == "test-model|tp0/1|layout=page_first|dtype=uint8"
    assert backend.batch_exists(keys) == 0
    backend.close()


def test_get_without_target_returns_a_page(tmp_path):
    """Without torch (this venv) the page is a NumPy array of the host pool's dtype."""
    b, _ = make_backend(tmp_path)
    key = page_hashes(1, "nt")[0]
    data = random_pages(1, 10)[0]
    assert b.set(key, data)
    got = b.get(key)
    assert isinstance(got, np.ndarray) and (got == data).all()
    assert b.batch_get([key, "nope".ljust(64, "0")])[1] is None
    b.close()
