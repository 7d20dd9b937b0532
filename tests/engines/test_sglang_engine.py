"""kvbm.integrations.sglang.KvbmStorage driven by the real SGLang (0.5.23, the pin of
tests/engines/requirements.txt) on the CPU.

    bash scripts/engines_env.sh
    PYTHONWARNINGS=ignore::DeprecationWarning \\
        build/engines-venv/bin/python -m pytest -q tests/engines/test_sglang_engine.py

Every SGLang object is SGLang's own, built as SGLang builds it (tests/engines/sglang_util.py):
device pools (MHATokenToKVPool / MLATokenToKVPool) and host pools (MHATokenToKVPoolHost /
MLATokenToKVPoolHost, pin_memory=False) in CPU memory, HiCacheStorageConfig, the backend created
by StorageBackendFactory.create_backend("dynamic", ...) from the JSON of docs/python.md, and
HiCacheController's backup (write_storage) and prefetch threads, generic and "interface_v1";
for hybrid models, HybridCacheController over SGLang's SWAKVPool and MambaPool host pools.
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
    make_mamba_pools,
    make_swa_pools,
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


# --------------------------------------------------------------------------- hybrid host pools
#
# SGLang 0.5.23's HybridCacheController (UnifiedRadixCache with HiCache, for hybrid SWA and
# Mamba/linear-attention models) registers every host pool of its HostPoolGroup with the backend
# (register_mem_host_pool_v2), backs the KV pages up through batch_set and every other pool's
# pages through batch_set_v2, asks batch_exists_v2 for the prefix every pool can serve, and
# reads the other pools with batch_get_v2 (docs/hybrid.md, "SGLang").


def fill_pool(host, n, seed):
    """n pages (page_size slots each) of random bytes in any host pool: indices, flat pages."""
    g = torch.Generator().manual_seed(seed)
    step = host.page_size
    idx = host.alloc(n * step)
    pages = []
    for j in range(n):
        like = host.get_dummy_flat_data_page()
        page = torch.randint(0, 256, (like.numel() * like.element_size(),), dtype=torch.uint8,
                             generator=g).view(like.dtype)
        host.set_from_flat_data_page(int(idx[j * step]), page)
        pages.append(page.clone())
    return idx, pages


def hybrid_controller(group, kv_dev, layers, sched_group, tmp_path):
    """HybridCacheController as build_hybrid_swa_stack / build_hybrid_mamba_stack make it, with
    KvbmStorage attached at construction."""
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController

    allocator = PagedTokenToKVPoolAllocator(64, PAGE, torch.bfloat16, "cpu", kv_dev,
                                            need_sort=False)
    ctl = HybridCacheController(allocator, group, PAGE, sched_group, threading.Event(),
                                io_backend="direct", storage_backend="dynamic",
                                model_name="tiny-hybrid", transfer_layer_id_max=layers,
                                storage_backend_extra_config=extra_config(tmp_path))
    assert isinstance(ctl.storage_backend, KvbmStorage)
    return ctl


def reattach(ctl, tmp_path):
    """A restarted server: the backend detached (closed) and a new one attached."""
    ctl.detach_storage_backend()
    ctl.attach_storage_backend("dynamic", model_name="tiny-hybrid",
                               host_pools=ctl.mem_pool_host.entries,
                               storage_backend_extra_config=extra_config(tmp_path))
    return ctl.storage_backend


def backup(ctl, idx, tokens, keys, extra_pools):
    ctl.write_storage(idx, tokens, hash_value=keys, extra_pools=extra_pools)
    return ctl.ack_backup_queue.get(timeout=30)


def prefetch(ctl, tokens, extra_pools):
    """The controller's prefetch as UnifiedRadixCache runs it: the hit query, the KV staging
    (allocate_storage_hit) and each other pool's staging (_alloc_prefetch_aux_staging), the
    transfer; returns the hit operation and the other pools' hits (their ack, rank-reduced)."""
    from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

    ctl.prefetch(CacheRequestHandle(rid="req-1", attempt_id=0), tokens, extra_pools=extra_pools)
    hit = ctl.prefetch_hit_queue.get(timeout=30)
    if hit.storage_hit_count == 0:
        return hit, None
    hit.host_indices, _ = ctl.allocate_storage_hit(hit, hit.storage_hit_count, allow_partial=False,
                                                   min_tokens=0, evict_host=lambda n: 0)
    for t in hit.pool_transfers:
        pool = ctl.mem_pool_host.entry_map[t.name].host_pool
        t.host_indices = pool.alloc(min(len(t.keys), len(hit.hash_value)) * pool.page_size)
    ctl.prefetch_buffer.put(hit)
    acks = []
    while not acks or not acks[-1].completed_req:
        acks.append(ctl.ack_prefetch_queue.get(timeout=30))
    (pool_hits,) = [a.pool_hits for a in acks if a.pool_hits is not None]
    return hit, pool_hits


def transfer(name, keys, host_indices=None):
    """A trailing-pages PoolTransfer as SWAComponent / MambaComponent.build_hicache_transfers
    make it (BACKUP_STORAGE: the node's last pages; PREFETCH: placeholders)."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolTransfer

    return PoolTransfer(name=name, host_indices=host_indices, keys=list(keys),
                        hit_policy=PoolHitPolicy.TRAILING_PAGES)


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_hybrid_swa_pools_backup_restart_prefetch(tiny_llama, tmp_path, layout):
    """Full + SWA: the KV pages and the SWA window's pages of the same page hashes are stored
    apart (each pool its own namespace and G3 file), found again after a restart, and the
    controller's prefetch puts both back byte for byte; a prefix whose window is not stored
    is not served."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    n, window = 3, 2
    tokens = list(range(200, 200 + n * PAGE))
    keys = keys_for(tokens)
    with PublishedScheduler(tiny_llama, layout) as sched_group:
        kv_dev, group, layers = make_swa_pools(layout)
        kv_host, swa_host = (group.entry_map[p].host_pool for p in (PoolName.KV, PoolName.SWA))
        ctl = hybrid_controller(group, kv_dev, layers, sched_group, tmp_path)
        try:
            b = ctl.storage_backend
            idx, kv_pages = fill_pool(kv_host, n, seed=60)
            sidx, swa_pages = fill_pool(swa_host, window, seed=61)
            op = backup(ctl, idx, tokens, keys, [transfer(PoolName.SWA, keys[-window:], sidx)])
            assert op.completed_tokens == n * PAGE
            assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.SWA: window}
            swa_ns = b._pools["swa"][1]
            assert swa_ns != b.namespace and f"|pool=swa|layout={layout}|" in swa_ns
            assert os.path.exists(os.path.join(b.disk_directory, "pool-swa", "kvbm.slots"))
            # The KV pages alone under other keys: no SWA window, so no prefix is restorable.
            other = keys_for(list(range(300, 300 + n * PAGE)))
            oidx, _ = fill_pool(kv_host, n, seed=62)
            assert backup(ctl, oidx, list(range(300, 300 + n * PAGE)), other, None).completed_tokens
            r = b.batch_exists_v2(other, [transfer(PoolName.SWA, ["__placeholder__"] * window)])
            assert (r.kv_hit_pages, r.restorable_prefix_pages) == (0, [])
            assert r.extra_pool_hit_pages == {PoolName.KV: n}
            kv_host.free(idx)
            kv_host.free(oidx)
            swa_host.free(sidx)

            b = reattach(ctl, tmp_path)  # only the G3 files hold the pages now
            assert b.kvbm_stats("swa")["tiers"]["G2"]["registrations"] == 0
            r = b.batch_exists_v2(keys, [transfer(PoolName.SWA, ["__placeholder__"] * window)])
            assert (r.kv_hit_pages, r.restorable_prefix_pages) == (n, [n])  # [1, 2] lack a window
            placeholders = [transfer(PoolName.SWA, ["__placeholder__"] * window)]
            hit, pool_hits = prefetch(ctl, tokens, placeholders)
            assert hit.storage_hit_count == n * PAGE
            assert pool_hits[PoolName.SWA.value] == window
            for j in range(n):
                assert same_bytes(kv_host.get_data_page(int(hit.host_indices[j * PAGE])),
                                  kv_pages[j])
            (swa,) = hit.pool_transfers
            assert swa.keys == keys[-window:]
            for j in range(window):
                got = swa_host.get_data_page(int(swa.host_indices[j * PAGE]))
                assert same_bytes(got, swa_pages[j]) and not same_bytes(got, kv_pages[j + 1])
        finally:
            ctl.detach_storage_backend()


def test_hybrid_mamba_state_backup_restart_prefetch(tiny_llama, tmp_path):
    """Full attention + Mamba2: a state per radix node end (pages 0-1, then page 2), stored in
    the Mamba pool's own manager; after a restart the restorable prefixes are the node ends,
    and the prefetch puts back the KV pages and the state at the cut, not an earlier one."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    tokens = list(range(400, 400 + 3 * PAGE))
    keys = keys_for(tokens)
    with PublishedScheduler(tiny_llama, "page_first") as sched_group:
        kv_dev, group, layers = make_mamba_pools()
        kv_host, mamba_host = (group.entry_map[p].host_pool for p in (PoolName.KV, PoolName.MAMBA))
        ctl = hybrid_controller(group, kv_dev, layers, sched_group, tmp_path)
        try:
            b = ctl.storage_backend
            idx, kv_pages = fill_pool(kv_host, 3, seed=70)
            midx, states = fill_pool(mamba_host, 2, seed=71)
            for first, end, state in ((0, 2, 0), (2, 3, 1)):  # two nodes, as the tree backs them up
                op = backup(ctl, idx[first * PAGE:end * PAGE], tokens[first * PAGE:end * PAGE],
                            keys[first:end],
                            [transfer(PoolName.MAMBA, [keys[end - 1]], midx[state:state + 1])])
                assert op.completed_tokens == (end - first) * PAGE
                assert op.pool_storage_result.extra_pool_hit_pages == {PoolName.MAMBA: 1}
            assert "|pool=mamba|layout=page_first|dtype=bfloat16" in b._pools["mamba"][1]

            b = reattach(ctl, tmp_path)
            r = b.batch_exists_v2(keys, [transfer(PoolName.MAMBA, ["__placeholder__"])])
            assert (r.kv_hit_pages, r.restorable_prefix_pages) == (3, [2, 3])
            hit, pool_hits = prefetch(ctl, tokens, [transfer(PoolName.MAMBA, ["__placeholder__"])])
            assert hit.storage_hit_count == 3 * PAGE
            assert pool_hits[PoolName.MAMBA.value] == 1
            for j in range(3):
                assert same_bytes(kv_host.get_data_page(int(hit.host_indices[j * PAGE])),
                                  kv_pages[j])
            (mamba,) = hit.pool_transfers
            got = mamba_host.get_data_page(int(mamba.host_indices[0]))
            assert mamba.keys == [keys[2]] and same_bytes(got, states[1])
        finally:
            ctl.detach_storage_backend()


def test_hybrid_swa_and_mamba_pools_serve_only_where_both_can(tiny_llama, tmp_path):
    """Full + SWA + Mamba2 (build_hybrid_mamba_swa_stack's pools): a first node of pages 0-1
    with its whole window and a state, a second of pages 2-3 whose window lost page 2 and with
    a state. The Mamba pool alone could serve 4 pages, the SWA window 1 or 2: the prefix
    served is 2 pages, with the first node's window and state, byte for byte."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    tokens = list(range(600, 600 + 4 * PAGE))
    keys = keys_for(tokens)
    with PublishedScheduler(tiny_llama, "page_first") as sched_group:
        kv_dev, group, layers = make_swa_pools("page_first", mamba=True)
        kv_host, swa_host, mamba_host = (group.entry_map[p].host_pool
                                         for p in (PoolName.KV, PoolName.SWA, PoolName.MAMBA))
        ctl = hybrid_controller(group, kv_dev, layers, sched_group, tmp_path)
        try:
            idx, kv_pages = fill_pool(kv_host, 4, seed=100)
            sidx, swa_pages = fill_pool(swa_host, 3, seed=101)  # pages 0, 1 and 3
            midx, states = fill_pool(mamba_host, 2, seed=102)
            for first, end, windows, state in ((0, 2, slice(0, 2), 0), (2, 4, slice(2, 3), 1)):
                swa_keys = keys[end - (windows.stop - windows.start):end]
                op = backup(ctl, idx[first * PAGE:end * PAGE], tokens[first * PAGE:end * PAGE],
                            keys[first:end],
                            [transfer(PoolName.SWA, swa_keys,
                                      sidx[windows.start * PAGE:windows.stop * PAGE]),
                             transfer(PoolName.MAMBA, [keys[end - 1]], midx[state:state + 1])])
                assert op.completed_tokens == 2 * PAGE

            b = reattach(ctl, tmp_path)
            both = [transfer(PoolName.SWA, ["__placeholder__"] * 2),
                    transfer(PoolName.MAMBA, ["__placeholder__"])]
            r = b.batch_exists_v2(keys, both)
            assert (r.kv_hit_pages, r.restorable_prefix_pages) == (2, [2])
            assert r.extra_pool_hit_pages == {PoolName.KV: 4, PoolName.SWA: 2, PoolName.MAMBA: 4}
            hit, pool_hits = prefetch(ctl, tokens, both)
            assert hit.storage_hit_count == 2 * PAGE
            assert (pool_hits["swa"], pool_hits["mamba"]) == (2, 1)
            swa, mamba = hit.pool_transfers
            assert swa.keys == keys[:2] and mamba.keys == [keys[1]]
            for j in range(2):
                assert same_bytes(kv_host.get_data_page(int(hit.host_indices[j * PAGE])),
                                  kv_pages[j])
                assert same_bytes(swa_host.get_data_page(int(swa.host_indices[j * PAGE])),
                                  swa_pages[j])
            assert same_bytes(mamba_host.get_data_page(int(mamba.host_indices[0])), states[0])
        finally:
            ctl.detach_storage_backend()


def test_mamba_state_keeps_the_tp_rank_of_an_mla_model(tmp_path):
    """MLA KV is the same on every TP rank (one namespace), Mamba state is each rank's shard:
    its namespace names the rank, with the default namespace and with one set in the config."""
    _, group, _ = make_mamba_pools()
    for named, model in (({}, "tiny-llama"), ({"namespace": "kimi"}, "kimi")):
        names = []
        for rank in range(2):
            cfg = storage_config(tp_rank=rank, tp_size=2, is_mla_model=True,
                                 extra_config=extra_config(tmp_path, **named))
            b = KvbmStorage(cfg, {})
            for e in group.entries:
                b.register_mem_host_pool_v2(e.host_pool, e.name)
            names.append(b._pool_namespace("mamba", group.entry_map["mamba"].host_pool))
            assert b._default_namespace(cfg) == "tiny-llama"
        assert names[0].startswith(f"{model}|tp0/2|pool=mamba|")
        assert names[1].startswith(f"{model}|tp1/2|pool=mamba|")


def test_pure_swa_model_never_asks_the_storage_backend(tiny_llama, tmp_path):
    """Every layer a sliding window: SGLang 0.5.23 picks PureSWARadixCache
    (registry.default_radix_cache_factory), which has no HiCache, even with
    --enable-hierarchical-cache and kvbm as --hicache-storage-backend: no backend is made."""
    import json

    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.runtime_context import get_server_args

    with PublishedScheduler(tiny_llama, hicache_storage_backend="dynamic",
                            hicache_storage_backend_extra_config=json.dumps(
                                extra_config(tmp_path))) as sched_group:
        dev = make_device_pool("MHA")
        allocator = PagedTokenToKVPoolAllocator(64, PAGE, torch.bfloat16, "cpu", dev,
                                                need_sort=False)
        params = CacheInitParams(disable=False, req_to_token_pool=None, page_size=PAGE,
                                 token_to_kv_pool_allocator=allocator, sliding_window_size=8,
                                 tp_cache_group=sched_group)
        ctx = TreeCacheBuildContext(
            server_args=get_server_args(), params=params, is_hybrid_swa=True, is_hybrid_ssm=False,
            enable_hierarchical_cache=True, disable_radix_cache=False, tp_worker=None,
            model_config=None, tp_size=1, tp_rank=0, tp_group=sched_group,
            full_tokens_per_layer=0)
        cache = create_tree_cache(ctx)
    assert type(cache).__name__ == "PureSWARadixCache" and cache.cache_controller is None
    assert not os.listdir(tmp_path)  # no KvbmStorage opened its G3 file there


def test_unsupported_hit_policy_is_refused(tmp_path):
    """A pool hit policy kvbm does not implement (block_groups, declared by SGLang 0.5.23 but
    used by none of its pools) is refused, as SGLang's HiCacheFile refuses it."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    _, group, _ = make_swa_pools("page_first")
    b = create_backend(storage_config(extra_config=extra_config(tmp_path)),
                       group.entry_map[PoolName.KV].host_pool)
    try:
        for e in group.entries:
            b.register_mem_host_pool_v2(e.host_pool, e.name)
        b.on_host_pools_registered()
        keys = keys_for(list(range(PAGE)))
        idx, _ = fill_pool(group.entry_map[PoolName.KV].host_pool, 1, seed=80)
        assert b.batch_set_v1(keys, idx) == [True]
        with pytest.raises(kvbm.UsageError, match="block_groups"):
            b.batch_exists_v2(keys, [PoolTransfer(name=PoolName.SWA, keys=keys,
                                                  hit_policy=PoolHitPolicy.BLOCK_GROUPS)])
    finally:
        b.close()


def test_hybrid_swa_pools_shared_through_g4(tmp_path, redis_url):
    """Two servers with their own G3 and one G4: the second finds the first's KV pages and SWA
    window through G4 (per-page presence: one probe per run of locally missing pages) and reads
    each pool's bytes, the KV and SWA pages of one page hash never mixed up."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    n, window = 3, 2
    keys = keys_for(list(range(500, 500 + n * PAGE)))
    servers = []
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
        _, group, _ = make_swa_pools("page_first")
        b = create_backend(storage_config(extra_config=extra_config(tmp_path / name,
                                                                    remote_urls=[redis_url])),
                           group.entry_map[PoolName.KV].host_pool)
        for e in group.entries:
            b.register_mem_host_pool_v2(e.host_pool, e.name)
        b.on_host_pools_registered()
        servers.append((b, group.entry_map[PoolName.KV].host_pool,
                        group.entry_map[PoolName.SWA].host_pool))
    try:
        (a, a_kv, a_swa), (b, b_kv, b_swa) = servers
        idx, kv_pages = fill_pool(a_kv, n, seed=90)
        sidx, swa_pages = fill_pool(a_swa, window, seed=91)
        assert a.batch_set_v1(keys, idx) == [True] * n
        assert a.batch_set_v2([transfer(PoolName.SWA, keys[-window:], sidx)]) == {
            PoolName.SWA: [True] * window}
        a.close()
        r = b.batch_exists_v2(keys, [transfer(PoolName.SWA, ["__placeholder__"] * window)])
        assert (r.kv_hit_pages, r.restorable_prefix_pages) == (n, [n])
        assert b._pool_presence(PoolName.SWA, keys) == [False, True, True]
        dst = b_swa.alloc(window * PAGE)
        assert b.batch_get_v2([transfer(PoolName.SWA, keys[-window:], dst)]) == {
            PoolName.SWA: [True] * window}
        for j in range(window):
            assert same_bytes(b_swa.get_data_page(int(dst[j * PAGE])), swa_pages[j])
        got = b.batch_get(keys)
        assert all(same_bytes(g, p) for g, p in zip(got, kv_pages))
    finally:
        for backend, _, _ in servers:
            backend.close()
