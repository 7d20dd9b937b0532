"""kvbm.integrations.sglang.KvbmStorage driven by the real SGLang (0.5.23, the pin of
tests/engines/requirements.txt) on the CPU.

    bash scripts/engines_env.sh
    PYTHONWARNINGS=ignore::DeprecationWarning \\
        build/engines-venv/bin/python -m pytest -q tests/engines/test_sglang_engine.py

Every SGLang object is SGLang's own, built as SGLang builds it (tests/engines/sglang_util.py):
device pools (MHATokenToKVPool / MLATokenToKVPool) and host pools (MHATokenToKVPoolHost /
MLATokenToKVPoolHost, pin_memory=False) in CPU memory, HiCacheStorageConfig, the backend created
by StorageBackendFactory.create_backend("dynamic", ...) from the JSON of docs/python.md, and
HiCacheController's backup (write_storage) and prefetch threads, generic and "interface_v1".
Nothing is monkeypatched. Outside the engines venv the module skips itself.
"""

from __future__ import annotations

import importlib.util
import os
import threading

import pytest

from skips import skip_or_fail  # tests/python/skips.py (on the path: conftest.py)

if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
    skip_or_fail("engine wheel missing: sglang/torch not importable; run in the venv of "
                 "scripts/engines_env.sh (tests/engines/requirements.txt)", allow_module_level=True)

import torch  # noqa: E402

import kvbm  # noqa: E402
from kvbm.integrations.sglang import KvbmStorage  # noqa: E402
from sglang_util import (  # noqa: E402
    PAGE,
    PublishedScheduler,
    make_device_pool,
    make_host_pool,
    storage_config,
    write_tiny_llama,
)


# docs/python.md's --hicache-storage-backend-extra-config, sized for the tests.
def extra_config(directory, **more):
    return {"backend_name": "kvbm", "module_path": "kvbm.integrations.sglang",
            "class_name": "KvbmStorage", "disk_directory": str(directory),
            "disk_bytes": 1 << 20, "host_bytes": 1 << 18, "device_blocks": 16, **more}


def create_backend(cfg, host):
    """As HiCacheController.attach_storage_backend does: the factory, then the host pool."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
    assert isinstance(backend, KvbmStorage)
    backend.register_mem_pool_host(host)
    return backend


def keys_for(tokens):
    from sglang.srt.managers.cache_controller import get_storage_hash_str

    return get_storage_hash_str(tokens, None, page_size=PAGE)


def fill_pages(host, n, seed):
    """n host pages of random KV (as the device->host transfer would leave them): indices, pages."""
    g = torch.Generator().manual_seed(seed)
    idx = host.alloc(n * PAGE)
    pages = []
    for j in range(n):
        like = host.get_dummy_flat_data_page()
        if like.dtype.is_floating_point:  # bf16 / fp16
            page = torch.randn(like.numel(), generator=g).to(like.dtype)
        else:  # fp8, which SGLang keeps as uint8: any byte
            page = torch.randint(0, 256, (like.numel(),), dtype=like.dtype, generator=g)
        host.set_from_flat_data_page(int(idx[j * PAGE]), page)
        pages.append(page.clone())
    return idx, pages


def same_bytes(a, b):
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# --------------------------------------------------------------------------- defect 1: format

FORMATS = [(kind, dtype, layout)
           for kind in ("MHA", "MLA")
           for dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn)
           for layout in ("layer_first", "page_first")]


def test_layouts_and_dtypes_never_serve_each_others_pages(tmp_path):
    """Servers of each format (MHA/MLA, bf16/fp16/fp8, layer_first/page_first) one after another
    on one disk_directory, all storing the same page keys: each finds its own pages again after
    a restart, and none ever gets a HIT or bytes for another format's page."""
    tokens = list(range(7, 7 + 3 * PAGE))
    keys = keys_for(tokens)
    namespaces = {}
    for i, (kind, dtype, layout) in enumerate(FORMATS):
        host = make_host_pool(make_device_pool(kind, dtype), layout)
        cfg = storage_config(is_mla_model=kind == "MLA",
                             is_page_first_layout=layout == "page_first",
                             extra_config=extra_config(tmp_path))
        b = create_backend(cfg, host)
        assert b.batch_exists(keys) == 0, (kind, dtype, layout)
        targets = [host.get_dummy_flat_data_page() for _ in keys]
        assert b.batch_get(keys, targets) == [None] * len(keys)
        assert all(not t.view(torch.uint8).any() for t in targets)  # not a byte written
        assert b.batch_get_v1(keys, host.alloc(len(keys) * PAGE)) == [False] * len(keys)
        assert b.get(keys[0]) is None
        namespaces[b.namespace] = (layout, str(host.dtype)[len("torch."):])
        idx, pages = fill_pages(host, len(keys), seed=i)
        assert b.batch_set(keys, [host.get_data_page(int(idx[j * PAGE])) for j in range(len(keys))])
        b.close()
        # The same format again (a restarted server): its own pages, byte for byte.
        again = make_host_pool(make_device_pool(kind, dtype), layout)
        b = create_backend(storage_config(is_mla_model=kind == "MLA",
                                          is_page_first_layout=layout == "page_first",
                                          extra_config=extra_config(tmp_path)), again)
        assert b.batch_exists(keys) == len(keys)
        got = b.batch_get(keys, [again.get_dummy_flat_data_page() for _ in keys])
        assert all(g is not None and same_bytes(g, p) for g, p in zip(got, pages))
        b.close()
    assert len(namespaces) == len(FORMATS)
    for ns, (layout, dtype) in namespaces.items():
        assert ns.endswith(f"|layout={layout}|dtype={dtype}")


def test_fp8_formats_told_apart_by_the_published_kv_cache_dtype(tmp_path, tiny_llama):
    """SGLang stores fp8 KV as uint8 (the host pool's dtype for e4m3 and e5m2 alike): the
    --kv-cache-dtype a scheduler published names which fp8 the bytes are."""
    keys = keys_for(list(range(60, 60 + 2 * PAGE)))
    for i, (kv_cache_dtype, dtype) in enumerate([("fp8_e4m3", torch.float8_e4m3fn),
                                                 ("fp8_e5m2", torch.float8_e5m2),
                                                 ("fp8_e4m3", torch.float8_e4m3fn)]):
        with PublishedScheduler(tiny_llama, kv_cache_dtype=kv_cache_dtype):
            host = make_host_pool(make_device_pool("MHA", dtype), "page_first")
            assert host.dtype == torch.uint8
            b = create_backend(storage_config(extra_config=extra_config(tmp_path)), host)
            assert b.namespace.endswith(f"|dtype=uint8:{kv_cache_dtype}")
            assert b.batch_exists(keys) == 0, kv_cache_dtype  # the previous one was the other fp8
            idx, _ = fill_pages(host, len(keys), seed=40 + i)
            assert b.batch_set_v1(keys, idx) == [True] * len(keys)
            b.close()


def test_host_pool_registered_after_the_first_page_must_agree(tmp_path):
    host = make_host_pool(make_device_pool("MHA"), "layer_first")
    page = host.get_dummy_flat_data_page()
    cfg = storage_config(extra_config=extra_config(tmp_path, namespace="tiny"))
    b = KvbmStorage(cfg, {})
    assert b.set(keys_for(list(range(PAGE)))[0], page)
    assert b.namespace == "tiny|layout=page_first"
    with pytest.raises(kvbm.UsageError, match="before the first page"):
        b.register_mem_pool_host(host)
    assert b.mem_pool_host is None
    b.close()


def test_without_host_pool_the_format_is_unknown_and_namespace_is_required(tmp_path):
    cfg = storage_config(is_page_first_layout=False,
                         extra_config=extra_config(tmp_path, page_bytes=1024))
    b = KvbmStorage(cfg, {})
    page = torch.zeros(512, dtype=torch.bfloat16)
    with pytest.raises(kvbm.UsageError, match="set `namespace`"):
        b.batch_set(keys_for(list(range(PAGE))), [page])
    b.close()
    cfg = storage_config(
        extra_config=extra_config(tmp_path, page_bytes=1024, namespace="tiny@bf16"))
    b = KvbmStorage(cfg, {})
    assert b.batch_set(keys_for(list(range(PAGE))), [page])
    # is_page_first_layout=True says the layout; the dtype still comes from no one but namespace
    assert b.namespace == "tiny@bf16|layout=page_first"
    b.close()


# --------------------------------------------------------------------------- defect 2: tensors


def test_get_without_target_returns_torch_tensors(tmp_path):
    host = make_host_pool(make_device_pool("MHA"), "layer_first")
    b = create_backend(storage_config(extra_config=extra_config(tmp_path)), host)
    key = keys_for(list(range(PAGE)))[0]
    idx, (page,) = fill_pages(host, 1, seed=3)
    assert b.set(key, host.get_data_page(int(idx[0])))
    got = b.get(key)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16 and torch.equal(got, page)
    (got,) = b.batch_get([key])
    assert isinstance(got, torch.Tensor) and torch.equal(got, page)
    assert b.batch_get([key, "0" * 64])[1] is None
    b.close()
    # No host pool: page_bytes of uint8, still a tensor.
    cfg = storage_config(extra_config=extra_config(tmp_path / "raw", page_bytes=page.nbytes,
                                                   namespace="tiny-raw"))
    os.makedirs(tmp_path / "raw")
    b = KvbmStorage(cfg, {})
    assert b.set(key, page)
    got = b.get(key)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.uint8 and same_bytes(got, page)
    b.close()


# --------------------------------------------------------------------------- defect 3: driven


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("interface_v1", [0, 1])
@pytest.mark.parametrize("kind,layout", [("MHA", "layer_first"), ("MHA", "page_first"),
                                         ("MLA", "page_first")])
def test_cache_controller_backup_restart_prefetch(tiny_llama, tmp_path, kind, layout, interface_v1):
    """HiCacheController backs host pages up into KvbmStorage (write_storage), the backend is
    detached (closed) and attached again on the same directory (a restarted server), and the
    controller's prefetch finds every page and puts its bytes back into the host pool."""
    from sglang.srt.managers.cache_controller import HiCacheController
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

    with PublishedScheduler(tiny_llama, layout) as group:
        dev = make_device_pool(kind)
        allocator = PagedTokenToKVPoolAllocator(64, PAGE, torch.bfloat16, "cpu", dev,
                                                need_sort=False)
        host = make_host_pool(dev, layout)
        ctl = HiCacheController(allocator, host, PAGE, group, threading.Event(),
                                io_backend="direct")

        def attach():
            ctl.attach_storage_backend(
                "dynamic", model_name="tiny-llama",
                storage_backend_extra_config=extra_config(tmp_path, interface_v1=interface_v1))
            b = ctl.storage_backend
            assert isinstance(b, KvbmStorage) and b.mem_pool_host is host
            assert b.storage_config.is_mla_model == (kind == "MLA")
            return b

        n = 3
        tokens = list(range(40, 40 + n * PAGE))
        keys = keys_for(tokens)
        b = attach()
        try:
            assert b.namespace.endswith(f"|layout={layout}|dtype=bfloat16")
            idx, pages = fill_pages(host, n, seed=11)
            ctl.write_storage(idx, tokens, hash_value=keys)
            op = ctl.ack_backup_queue.get(timeout=30)
            assert op.completed_tokens == n * PAGE
            host.free(idx)
        finally:
            ctl.detach_storage_backend()

        b = attach()  # a new KvbmStorage: only the G3 file holds the pages
        try:
            assert b.kvbm_stats()["tiers"]["G2"]["registrations"] == 0
            ctl.prefetch("req-1", tokens)
            hit = ctl.prefetch_hit_queue.get(timeout=30)
            assert hit.storage_hit_count == n * PAGE and hit.hash_value == keys
            hit.host_indices = host.alloc(hit.storage_hit_count)
            ctl.prefetch_buffer.put(hit)
            acks = []
            while not acks or not acks[-1].completed_req:
                acks.append(ctl.ack_prefetch_queue.get(timeout=30))
            assert acks[0].completed_tokens == n * PAGE
            for j in range(n):
                assert same_bytes(host.get_data_page(int(hit.host_indices[j * PAGE])), pages[j])
        finally:
            ctl.detach_storage_backend()


def test_tp_ranks_of_an_mha_model_keep_their_own_pages(tmp_path):
    """tp_size=2 as SGLang runs it: one backend per rank (here two in one process, as two
    scheduler processes would have them), each with its own G3 subdirectory, each finding its
    own shard of the pages after a restart and never the other rank's."""
    tokens = list(range(90, 90 + 2 * PAGE))
    keys = keys_for(tokens)

    def backend(rank):
        host = make_host_pool(make_device_pool("MHA"), "page_first")
        cfg = storage_config(tp_rank=rank, tp_size=2, extra_config=extra_config(tmp_path))
        return create_backend(cfg, host), host

    ranks = [backend(r) for r in range(2)]
    assert [os.path.basename(b.disk_directory) for b, _ in ranks] == ["tp0-pp0-cp0-dp0",
                                                                      "tp1-pp0-cp0-dp0"]
    assert [b.namespace.split("|")[1] for b, _ in ranks] == ["tp0/2", "tp1/2"]
    shards = []
    for r, (b, host) in enumerate(ranks):
        idx, pages = fill_pages(host, len(keys), seed=20 + r)
        shards.append(pages)
        assert b.batch_set_v1(keys, idx) == [True] * len(keys)
        b.close()
    for r in range(2):
        b, host = backend(r)
        assert b.batch_exists(keys) == len(keys)
        got = b.batch_get(keys)
        assert all(same_bytes(g, p) for g, p in zip(got, shards[r]))
        assert not any(same_bytes(g, p) for g, p in zip(got, shards[1 - r]))
        b.close()


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_mla_rank_1_answers_and_reads_what_rank_0_wrote(tmp_path, layout):
    """SGLang backs MLA pages up from rank 0 only (HiCacheStorageConfig.is_storage_writer) and
    all-reduces every rank's batch_exists with MIN: without G4, rank 1 finds rank 0's pages in
    rank 0's G3 file (a kvbm.DiskPoolReader) and reads its bytes, through the zero-copy path
    (page_first) and the generic one (layer_first)."""
    tokens = list(range(120, 120 + 3 * PAGE))
    keys = keys_for(tokens)
    ranks = []
    for r in range(2):
        host = make_host_pool(make_device_pool("MLA"), layout)
        cfg = storage_config(tp_rank=r, tp_size=2, is_mla_model=True,
                             extra_config=extra_config(tmp_path))
        assert cfg.is_storage_writer == (r == 0)
        ranks.append((create_backend(cfg, host), host))
    try:
        (b0, h0), (b1, h1) = ranks
        assert b1.batch_exists(keys) == 0  # nothing written yet
        idx, pages = fill_pages(h0, len(keys), seed=30)
        assert b0.batch_set_v1(keys[:2], idx[:2 * PAGE]) == [True] * 2
        b0.kv.drain()
        b1.mla_refresh_s = 0.0  # the test's clock: re-read the index on every miss
        assert min(b0.batch_exists(keys), b1.batch_exists(keys)) == 2
        assert b0.batch_set_v1(keys[2:], idx[2 * PAGE:]) == [True]
        b0.kv.drain()
        assert min(b0.batch_exists(keys), b1.batch_exists(keys)) == len(keys)
        dst = h1.alloc(len(keys) * PAGE)
        assert b1.batch_get_v1(keys, dst) == [True] * len(keys)
        assert all(same_bytes(h1.get_data_page(int(dst[j * PAGE])), p)
                   for j, p in enumerate(pages))
        got = b1.batch_get(keys)
        assert all(same_bytes(g, p) for g, p in zip(got, pages))
        # Rank 0 forgets every page (its G3 file is removed and made anew) and stores another:
        # the miss on the new page makes rank 1 re-read the index, of the new file, which holds
        # none of the old pages.
        b0.clear()
        other = keys_for(list(range(900, 900 + PAGE)))
        idx2, pages2 = fill_pages(h0, 1, seed=31)
        assert b0.batch_set_v1(other, idx2) == [True]
        b0.kv.drain()
        assert b1.batch_exists(other) == 1
        assert b1.batch_exists(keys) == 0
        assert b1.batch_get(keys) == [None] * len(keys)
        assert same_bytes(b1.batch_get(other)[0], pages2[0])
    finally:
        for b, _ in ranks:
            b.close()


def test_mla_writer_rank_and_g4_ranks_read_no_other_file(tmp_path, redis_url):
    """Only a rank SGLang does not let write reads another rank's G3, and only without G4."""
    for r, remote, reads in ((0, [], False), (1, [], True), (1, [redis_url], False)):
        host = make_host_pool(make_device_pool("MLA"), "page_first")
        cfg = storage_config(tp_rank=r, tp_size=2, is_mla_model=True,
                             extra_config=extra_config(tmp_path, remote_urls=remote))
        b = create_backend(cfg, host)
        try:
            assert (b._reader is not None) == reads
            if reads:
                assert b._writer_directory == os.path.join(str(tmp_path), "tp0-pp0-cp0-dp0")
        finally:
            b.close()


def test_mla_ranks_share_pages_through_g4(tmp_path, redis_url):
    """The supported form of MLA with tp_size=2: with G4, rank 1 (its own empty G3) answers
    batch_exists with what rank 0 wrote, so SGLang's MIN over the ranks is a hit, and reads
    rank 0's bytes."""
    tokens = list(range(150, 150 + 2 * PAGE))
    keys = keys_for(tokens)
    ranks = []
    for r in range(2):
        host = make_host_pool(make_device_pool("MLA"), "page_first")
        cfg = storage_config(tp_rank=r, tp_size=2, is_mla_model=True,
                             extra_config=extra_config(tmp_path, remote_urls=[redis_url]))
        ranks.append((create_backend(cfg, host), host))
    try:
        (b0, h0), (b1, h1) = ranks
        assert b0.namespace == b1.namespace  # MLA pages are the same on every TP rank
        idx, pages = fill_pages(h0, len(keys), seed=50)
        assert b0.batch_set_v1(keys, idx) == [True] * len(keys)
        b0.kv.drain()
        assert min(b0.batch_exists(keys), b1.batch_exists(keys)) == len(keys)
        dst = h1.alloc(len(keys) * PAGE)
        assert b1.batch_get_v1(keys, dst) == [True] * len(keys)
        assert all(same_bytes(h1.get_data_page(int(dst[j * PAGE])), p) for j, p in enumerate(pages))
    finally:
        for b, _ in ranks:
            b.close()


# --------------------------------------------------------------------------- zero copy (v1)

class FlatPageCounter:
    """Counts the host pool's flat-page copies (the generic path's staging), on the real pool."""

    NAMES = ("get_dummy_flat_data_page", "set_from_flat_data_page")

    def __init__(self, host):
        self.host, self.calls = host, 0
        for name in self.NAMES:
            real = getattr(host, name)
            setattr(host, name, self._counting(real))
        real_get = host.get_data_page

        def get_data_page(index, flat=True):
            self.calls += bool(flat)  # a flat page of a non-contiguous slice is a copy
            return real_get(index, flat=flat)

        host.get_data_page = get_data_page

    def _counting(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)
        return call


@pytest.mark.parametrize("kind,layout,direct", [("MHA", "page_first", True),
                                                ("MLA", "page_first", True),
                                                ("MHA", "layer_first", False)])
def test_v1_moves_page_first_pages_in_place(tmp_path, kind, layout, direct):
    """batch_set_v1 / batch_get_v1 on a page_first pool move each page straight between the
    pool's own memory and a kvbm block (MHA: its K and V halves as two segments): no flat
    page is made, and the segments kvbm receives are the pool's addresses. layer_first stays
    on the generic path (a layer's slice of a page lies apart in every layer)."""
    dev = make_device_pool(kind)
    host = make_host_pool(dev, layout)
    b = create_backend(storage_config(extra_config=extra_config(tmp_path, interface_v1=1),
                                      is_mla_model=kind == "MLA",
                                      is_page_first_layout=layout == "page_first"), host)
    try:
        n = 3
        idx, pages = fill_pages(host, n, seed=5)
        keys = keys_for(list(range(7, 7 + n * PAGE)))
        segments = b._page_in_place(host, int(idx[0]))
        assert (segments is not None) == direct
        if direct:
            assert len(segments) == (2 if kind == "MHA" else 1)
            for seg in segments:  # the pool's memory itself, as kvbm imports it
                assert kvbm.KvBlockManager._address(seg) == seg.data_ptr()
                assert (seg.untyped_storage().data_ptr()
                        == host.kv_buffer.untyped_storage().data_ptr())
        counter = FlatPageCounter(host)
        assert b.batch_set_v1(keys, idx) == [True] * n
        for j in range(n):  # wipe the pages in place, then read them back from kvbm
            host.get_data_page(int(idx[j * PAGE]), flat=False).zero_()
        assert b.batch_get_v1(keys, idx) == [True] * n
        copies = counter.calls
        for j in range(n):
            assert same_bytes(host.get_data_page(int(idx[j * PAGE]), flat=False).flatten(),
                              pages[j])
        assert copies == 0 if direct else copies >= 2 * n
    finally:
        b.close()
