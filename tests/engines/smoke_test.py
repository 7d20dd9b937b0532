"""The engines environment is real: vLLM's and SGLang's own classes import and run on the CPU.

Run in the venv that scripts/engines_env.sh builds (tests/engines/requirements.txt):

    bash scripts/engines_env.sh
    PYTHONWARNINGS=ignore::DeprecationWarning \
        build/engines-venv/bin/python -m pytest -q tests/engines/smoke_test.py

(PYTHONWARNINGS: a SWIG type in the stack warns at interpreter exit, after pytest's summary
line; the variable keeps that summary the last line.) Elsewhere the module skips itself.

Nothing here is a stand-in for an engine class: every object is built by the engine's own
code, the way the engine builds it, over CPU memory. What the CPU needs instead of a GPU:

- vLLM: VLLM_TARGET_DEVICE=cpu (set below, before vllm is imported) selects vLLM's CpuPlatform;
  without it the CUDA build of vLLM finds no platform and VllmConfig fails ("Device string must
  not be empty"). The KV cache layout is resolved by hand with vLLM's resolve_kv_cache_layout,
  as the engine core does with its workers' answer. No monkeypatch.
- SGLang: pin_memory=False for the host pools; HiCacheController needs a published ServerArgs
  (sglang.srt.runtime_context.publish, as the scheduler process does) and a torch.distributed
  group (gloo, world size 1). No monkeypatch.

The out-of-tree secondary tier (vLLM) and storage backend (SGLang) defined here are the real
extension points (loaded by module path, the way kvbm.integrations loads); they record the
arguments the engine passes them and copy bytes, so the tests also show those arguments.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import time

import pytest

from skips import import_or_skip, skip_or_fail  # tests/python/skips.py (on the path: conftest.py)

# Outside the engines venv (e.g. `pytest tests/` in build/venv) there is nothing to prove: skip.
# Inside it, where vllm and sglang are installed, every import below must work.
if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("sglang") is None:
    skip_or_fail(
        "engine wheel missing: vllm/sglang not importable; run in the venv of "
        "scripts/engines_env.sh (tests/engines/requirements.txt)",
        allow_module_level=True,
    )

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult, Medium, RequestOffloadingContext  # noqa: E402
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager  # noqa: E402

from vllm_util import (  # noqa: E402  (the vLLM objects, built as vLLM builds them)
    BLOCK_SIZE,
    HEAD_SIZE,
    NUM_KV_HEADS,
    NUM_LAYERS,
    TINY_LLAMA,
    make_kv_cache_config,
    make_vllm_config,
)
from vllm_util import step as _step  # noqa: E402
from sglang_util import (  # noqa: E402  (SGLang's objects, built as SGLang builds them)
    PAGE,
    make_device_pool,
    make_host_pool,
    storage_config,
)

THIS_MODULE = __name__

# --------------------------------------------------------------------------- torch


def test_torch_is_the_cuda_build_and_computes_on_cpu():
    import torch.version

    assert torch.version.cuda is not None and torch.version.cuda.startswith("13.")
    assert not torch.cuda.is_available()
    assert float(torch.zeros(4).sum()) == 0.0
    a = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    b = a.to(torch.bfloat16)
    assert (b @ b.T).dtype == torch.bfloat16
    torch.testing.assert_close((b @ b.T).float(), a @ a.T, rtol=1e-2, atol=1.0)
    f8 = torch.tensor([0.5, -1.0, 2.0, 448.0]).to(torch.float8_e4m3fn)
    assert f8.dtype == torch.float8_e4m3fn and f8.element_size() == 1
    assert f8.float().tolist() == [0.5, -1.0, 2.0, 448.0]
    assert f8.view(torch.uint8).tolist() == [0x30, 0xB8, 0x40, 0x7E]


# --------------------------------------------------------------------------- vLLM


def test_vllm_classes_import():
    from vllm.config import KVEventsConfig, KVTransferConfig, VllmConfig  # noqa: F401
    from vllm.distributed.kv_events import (  # noqa: F401
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        EventPublisherFactory,
        KVEventBatch,
        ZmqEventPublisher,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (  # noqa: F401
        OffloadingConnectorScheduler,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # noqa: F401
        OffloadingConnector,
    )
    from vllm.v1.kv_offload.config import OffloadingConfig  # noqa: F401
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: F401
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager, TransferJob
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec  # noqa: F401

    assert SecondaryTierManager.__abstractmethods__ == {
        "lookup",
        "submit_store",
        "submit_load",
        "get_finished_jobs",
        "on_new_request",
        "drain_jobs",
    }
    assert {f.name for f in dataclasses.fields(TransferJob)} == {
        "job_id",
        "keys",
        "chunk_ids",
        "is_promotion",
        "req_context",
        "submit_time",
    }
    assert SecondaryTierFactory.get_tier_class({"type": "fs"}) is FileSystemTierManager
    # An out-of-tree tier: no registration, just module_path.
    assert (
        SecondaryTierFactory.get_tier_class({"type": "ProbeTier", "module_path": THIS_MODULE})
        is ProbeTier
    )


class ProbeTier(SecondaryTierManager):
    """A synchronous dict-backed secondary tier that records every call."""

    medium = Medium.STORAGE

    def __init__(
        self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None, **extra
    ):
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.extra = extra
        self.rows = np.asarray(primary_kv_view)  # (num_chunks, bytes per chunk) int8, writable
        self.data: dict[bytes, bytes] = {}
        self.calls: list[tuple] = []
        self.finished: list = []

    def lookup(self, key, req_context):
        self.calls.append(("lookup", key, req_context))
        return LookupResult.HIT if key in self.data else LookupResult.MISS

    def submit_store(self, job_metadata):
        self.calls.append(("submit_store", job_metadata))
        for key, chunk in zip(job_metadata.keys, job_metadata.chunk_ids):
            self.data[key] = self.rows[int(chunk)].tobytes()
        self.finished.append(JobResult(job_id=job_metadata.job_id, success=True))

    def submit_load(self, job_metadata):
        self.calls.append(("submit_load", job_metadata))
        for key, chunk in zip(job_metadata.keys, job_metadata.chunk_ids):
            self.rows[int(chunk)] = np.frombuffer(self.data[key], dtype=self.rows.dtype)
        self.finished.append(JobResult(job_id=job_metadata.job_id, success=True))

    def get_finished_jobs(self):
        done, self.finished = self.finished, []
        return done

    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def drain_jobs(self):
        pass


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-llama")
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return str(d)


def test_vllm_config_from_a_local_config_json(tiny_llama):
    from vllm.config import VllmConfig
    from vllm.platforms import current_platform

    assert type(current_platform).__name__ == "CpuPlatform"
    vc = make_vllm_config(
        tiny_llama, {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 22}
    )
    assert isinstance(vc, VllmConfig)
    assert vc.model_config.get_num_layers(vc.parallel_config) == NUM_LAYERS
    assert vc.model_config.dtype == torch.bfloat16
    assert vc.cache_config.block_size == BLOCK_SIZE
    assert vc.kv_transfer_config.kv_connector == "OffloadingConnector"


@pytest.fixture
def tiering(tiny_llama, tmp_path):
    """(VllmConfig, scheduler KVCacheConfig, OffloadingConfig, fs root) for a TieringOffloadingSpec
    with a CPU primary tier, the probe tier (by module_path) and vLLM's own fs tier."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        build_offloading_config,
    )

    root = str(tmp_path / "fs-tier")
    extra = {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 1 << 22,
        "secondary_tiers": [
            {"type": "ProbeTier", "module_path": THIS_MODULE, "tag": "probe"},
            {"type": "fs", "root_dir": root, "n_read_threads": 1, "n_write_threads": 1},
        ],
    }
    vc = make_vllm_config(tiny_llama, extra)
    kcc = make_kv_cache_config(vc)
    return vc, kcc, build_offloading_config(vc, kcc), root


def test_vllm_tiering_spec_with_cpu_primary_and_secondary_tiers(tiering):
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.base import TransferJob
    from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
    from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

    _, _, oc, root = tiering
    assert (
        oc.worker_kv_bytes_per_block == NUM_LAYERS * 2 * BLOCK_SIZE * NUM_KV_HEADS * HEAD_SIZE * 2
    )
    spec = OffloadingSpecFactory.create_spec(oc)
    assert isinstance(spec, TieringOffloadingSpec)
    assert spec.num_chunks == (1 << 22) // oc.worker_kv_bytes_per_block
    manager = spec.get_manager()
    try:
        assert isinstance(manager, TieringOffloadingManager)
        probe, fs = manager.secondary_tiers
        assert isinstance(probe, ProbeTier) and isinstance(fs, FileSystemTierManager)
        assert probe.extra == {"tag": "probe"} and probe.tier_type == "ProbeTier"
        view = manager.primary_tier.get_kv_memoryview()
        assert (view.format, view.shape) == ("b", (spec.num_chunks, oc.worker_kv_bytes_per_block))
        assert probe.block_size_bytes == oc.worker_kv_bytes_per_block

        # GPU -> CPU primary -> cascade to every secondary tier.
        ctx = ReqContext(req_id="r1")
        keys = [make_offload_key(bytes([i + 1]) * 32, 0) for i in range(3)]
        with manager.lock:
            manager.on_new_request(ctx)
            out = manager.prepare_store(keys, ctx)
        assert out.keys_to_store == keys
        for key, chunk in zip(keys, out.store_spec.chunk_ids):
            np.asarray(view)[int(chunk)] = key[0]  # what the GPU->CPU transfer would write
        with manager.lock:
            manager.complete_store(keys, ctx)
            _step(manager, ["r1"])
        (job,) = [c[1] for c in probe.calls if c[0] == "submit_store"]
        assert isinstance(job, TransferJob) and not job.is_promotion
        assert list(job.keys) == keys and job.req_context is ctx
        assert job.chunk_ids.dtype == np.int32 and len(job.chunk_ids) == 3
        deadline = time.monotonic() + 30
        while True:
            with manager.lock:
                _step(manager)
                busy = manager.has_pending_work()
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        files = [
            os.path.join(d, f) for d, _, fs_ in os.walk(root) for f in fs_ if f.endswith(".bin")
        ]
        assert len(files) == 3

        # Evict the primary; a lookup finds the chunks in the probe tier and promotes them.
        with manager.lock:
            manager.on_request_finished(ctx)
            manager.reset_cache()
            manager.on_reset_flushed()
            ctx2 = ReqContext(req_id="r2")
            manager.on_new_request(ctx2)
            assert [manager.lookup(k, ctx2) for k in keys] == [LookupResult.HIT_PENDING] * 3
            _step(manager, ["r2"])
            (load,) = [c[1] for c in probe.calls if c[0] == "submit_load"]
            assert load.is_promotion and list(load.keys) == keys
            assert [manager.lookup(k, ctx2) for k in keys] == [LookupResult.HIT] * 3
            spec_in = manager.prepare_load(keys, ctx2)
            assert [int(np.asarray(view)[int(c)][0]) for c in spec_in.chunk_ids] == [1, 2, 3]
            manager.complete_load(keys, ctx2)
            manager.on_request_finished(ctx2)
    finally:
        manager.shutdown()

    # A second engine over the same directory: vLLM's fs tier promotes what the first stored.
    oc2 = dataclasses.replace(
        oc,
        engine_id=oc.engine_id + "-2",
        extra_config=dict(
            oc.extra_config,
            secondary_tiers=[
                {"type": "fs", "root_dir": root, "n_read_threads": 1, "n_write_threads": 1}
            ],
        ),
    )
    manager2 = TieringOffloadingSpec(oc2).get_manager()
    try:
        ctx3 = ReqContext(req_id="r3")
        with manager2.lock:
            manager2.on_new_request(ctx3)
        deadline = time.monotonic() + 30
        while True:
            with manager2.lock:
                results = [manager2.lookup(k, ctx3) for k in keys]
                _step(manager2)
            if results == [LookupResult.HIT] * 3 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert results == [LookupResult.HIT] * 3
        with manager2.lock:
            spec_in = manager2.prepare_load(keys, ctx3)
            rows = np.asarray(manager2.primary_tier.get_kv_memoryview())
            for key, chunk in zip(keys, spec_in.chunk_ids):
                assert (rows[int(chunk)] == key[0]).all()
            manager2.complete_load(keys, ctx3)
            manager2.on_request_finished(ctx3)
    finally:
        manager2.shutdown()


def test_vllm_offloading_connector_scheduler(tiering):
    from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
        OffloadingConnector,
    )
    from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager

    vc, kcc, _, _ = tiering
    connector = OffloadingConnector(vc, KVConnectorRole.SCHEDULER, kcc)
    try:
        assert isinstance(connector.connector_scheduler, OffloadingConnectorScheduler)
        assert isinstance(connector.connector_scheduler.manager, TieringOffloadingManager)
        assert connector.connector_worker is None
    finally:
        connector.shutdown()


def test_vllm_kv_events_roundtrip_and_zmq_publisher(tmp_path):
    import msgspec
    import zmq
    from vllm.config import KVEventsConfig
    from vllm.distributed.kv_events import (
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        EventPublisherFactory,
        KVEventBatch,
        ZmqEventPublisher,
    )

    batch = KVEventBatch(
        ts=time.time(),
        events=[
            BlockStored(
                block_hashes=[b"\x01" * 32],
                parent_block_hash=None,
                token_ids=list(range(BLOCK_SIZE)),
                block_size=BLOCK_SIZE,
                lora_id=None,
                medium="CPU",
                lora_name=None,
            ),
            BlockRemoved(block_hashes=[b"\x01" * 32], medium="CPU"),
            AllBlocksCleared(),
        ],
    )
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(batch), type=KVEventBatch)
    assert [type(e).__name__ for e in decoded.events] == [
        "BlockStored",
        "BlockRemoved",
        "AllBlocksCleared",
    ]
    assert decoded.events[0].token_ids == list(range(BLOCK_SIZE))

    endpoint = f"ipc://{tmp_path}/kv-events.sock"  # ipc:// binds on the publisher's side
    publisher = EventPublisherFactory.create(
        KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=endpoint, topic="kv"),
        data_parallel_rank=0,
    )
    assert isinstance(publisher, ZmqEventPublisher)
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.connect(endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.RCVTIMEO = 200
        parts = None
        for _ in range(50):  # a SUB socket drops what was published before it joined
            publisher.publish(batch)
            try:
                parts = sub.recv_multipart()
                break
            except zmq.Again:
                continue
        assert parts is not None
        topic, seq, payload = parts
        assert topic == b"kv" and len(seq) == 8
        got = msgspec.msgpack.decode(payload, type=KVEventBatch)
        assert got.data_parallel_rank == 0 and isinstance(got.events[1], BlockRemoved)
    finally:
        sub.close(linger=0)
        publisher.shutdown()


# --------------------------------------------------------------------------- SGLang

def test_sglang_classes_import():
    from sglang.srt.managers.cache_controller import HiCacheController  # noqa: F401
    from sglang.srt.mem_cache import memory_pool_host  # noqa: F401
    from sglang.srt.mem_cache.hicache_storage import (
        HiCacheFile,
        HiCacheStorage,
        HiCacheStorageConfig,  # noqa: F401
    )
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: F401
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: F401
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    assert issubclass(HiCacheFile, HiCacheStorage)
    assert HiCacheStorage.__abstractmethods__ == {"get", "batch_get", "set", "batch_set", "exists"}
    assert "file" in StorageBackendFactory._registry


HOST_SHAPES = {
    ("MHA", "layer_first"): (2, NUM_LAYERS, 132, NUM_KV_HEADS, HEAD_SIZE),
    ("MHA", "page_first"): (2, 132, NUM_LAYERS, NUM_KV_HEADS, HEAD_SIZE),
    ("MHA", "page_first_direct"): (2, 33, NUM_LAYERS, PAGE, NUM_KV_HEADS, HEAD_SIZE),
    ("MLA", "layer_first"): (NUM_LAYERS, 132, 1, 48),
    ("MLA", "page_first"): (132, NUM_LAYERS, 1, 48),
    ("MLA", "page_first_direct"): (33, NUM_LAYERS, PAGE, 1, 48),
}


@pytest.mark.parametrize("kind,layout", sorted(HOST_SHAPES))
def test_sglang_host_pool_pages(kind, layout):
    host = make_host_pool(make_device_pool(kind), layout)
    assert tuple(host.kv_buffer.shape) == HOST_SHAPES[kind, layout]
    assert host.kv_buffer.device.type == "cpu" and host.dtype == torch.bfloat16
    itemsize = 2
    per_token = host.get_size_per_token()  # bytes of one token over all layers (K and V)
    assert per_token == (
        2 * NUM_LAYERS * NUM_KV_HEADS * HEAD_SIZE * itemsize
        if kind == "MHA"
        else NUM_LAYERS * 48 * itemsize
    )
    indices = host.alloc(2 * PAGE)
    assert indices.dtype == torch.int64 and len(indices) == 2 * PAGE
    flat = host.get_dummy_flat_data_page()
    assert flat.numel() * itemsize == PAGE * per_token
    payload = torch.arange(flat.numel(), dtype=torch.float32).to(torch.bfloat16)
    page = int(indices[PAGE])
    host.set_from_flat_data_page(page, payload)
    assert torch.equal(host.get_data_page(page, flat=True), payload)
    # Zero-copy metadata: (pointers, byte sizes) into kv_buffer for each page of `indices`.
    ptrs, sizes = host.get_page_buffer_meta(indices)
    base = host.kv_buffer.data_ptr()
    page_bytes = PAGE * per_token
    if kind == "MHA" and layout == "layer_first":
        # per page, per layer: a K pointer and a V pointer of page_size tokens of that layer
        assert len(ptrs) == 2 * 2 * NUM_LAYERS
        assert set(sizes) == {PAGE * NUM_KV_HEADS * HEAD_SIZE * itemsize}
    elif kind == "MHA":
        # per page: K (all layers) and V (all layers), each half a page, V in the buffer's V half
        assert len(ptrs) == 2 * 2 and set(sizes) == {page_bytes // 2}
        assert ptrs[1] - ptrs[0] == host.kv_buffer.numel() * itemsize // 2
    elif layout == "layer_first":
        assert len(ptrs) == 2 * NUM_LAYERS and set(sizes) == {PAGE * 48 * itemsize}
    else:
        # MLA page_first(_direct): one contiguous pointer per page
        assert len(ptrs) == 2 and set(sizes) == {page_bytes}
        assert ptrs[0] == base + int(indices[0]) * per_token
    host.free(indices)


class ProbeStore(HiCacheStorage):
    """A dict-backed HiCacheStorage, created by StorageBackendFactory's 'dynamic' path."""

    def __init__(self, storage_config, kwargs):
        self.storage_config, self.kwargs = storage_config, kwargs
        self.data: dict[str, torch.Tensor] = {}
        self.calls: list[tuple] = []

    def get(self, key, target_location=None, target_sizes=None):
        self.calls.append(("get", key))
        if key not in self.data:
            return None
        target_location.copy_(self.data[key])
        return target_location

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [self.get(k, t) for k, t in zip(keys, target_locations)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        self.calls.append(("set", key))
        self.data[key] = value.clone()
        return True

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return all(self.set(k, v) for k, v in zip(keys, values))

    def exists(self, key):
        return key in self.data

    # The zero-copy interface, used when extra_config has "interface_v1": 1.
    def batch_set_v1(self, keys, host_indices, extra_info=None):
        self.calls.append(("batch_set_v1", list(keys), host_indices.clone(), extra_info))
        pool, page = self.mem_pool_host, self.mem_pool_host.page_size
        for i, k in enumerate(keys):
            self.data[k] = pool.get_data_page(int(host_indices[i * page]), flat=True).clone()
        return [True] * len(keys)

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        self.calls.append(("batch_get_v1", list(keys), host_indices.clone(), extra_info))
        pool, page = self.mem_pool_host, self.mem_pool_host.page_size
        out = []
        for i, k in enumerate(keys):
            if k in self.data:
                pool.set_from_flat_data_page(int(host_indices[i * page]), self.data[k])
            out.append(k in self.data)
        return out


def test_sglang_file_backend_and_dynamic_factory(tmp_path):
    from sglang.srt.mem_cache.hicache_storage import HiCacheFile
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    host = make_host_pool(make_device_pool("MHA"), "layer_first")
    idx = host.alloc(PAGE)
    host.set_from_flat_data_page(int(idx[0]), torch.full_like(host.get_dummy_flat_data_page(), 3.0))
    cfg = storage_config(extra_config={"file_storage_path": str(tmp_path)})
    fb = StorageBackendFactory.create_backend("file", cfg, host)
    assert isinstance(fb, HiCacheFile) and fb.file_path == str(tmp_path)
    fb.register_mem_pool_host(host)
    assert fb.batch_set(["k0"], [host.get_data_page(int(idx[0]))])
    assert fb.batch_exists(["k0", "k1"]) == 1
    assert os.listdir(tmp_path) == ["k0_tiny-llama_0_1.bin"]  # key + "_<model>_<tp_rank>_<tp_size>"
    got = fb.batch_get(["k0"], [host.get_dummy_flat_data_page()])[0]
    assert got.float().unique().tolist() == [3.0]

    extra = {"backend_name": "kvbm", "module_path": THIS_MODULE, "class_name": "ProbeStore", "x": 1}
    dyn = StorageBackendFactory.create_backend(
        "dynamic", storage_config(extra_config=extra), host, y=2
    )
    # backend_class(storage_config, kwargs): the kwargs dict, not mem_pool_host, is the 2nd argument
    assert isinstance(dyn, ProbeStore) and dyn.kwargs == {"y": 2}
    assert dyn.storage_config.extra_config == extra


@pytest.fixture
def published_scheduler(tiny_llama):
    """The process-wide config a SGLang scheduler process publishes, and a gloo TP group."""
    import tempfile

    import torch.distributed as dist
    from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(
        model_path=tiny_llama,
        device="cpu",
        skip_tokenizer_init=True,
        page_size=PAGE,
        enable_hierarchical_cache=True,
        hicache_mem_layout="page_first",
    )
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=None))
    fd, store = tempfile.mkstemp()
    os.close(fd)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield dist.new_group([0], backend="gloo")
    finally:
        dist.destroy_process_group()
        reset_context()
        os.unlink(store)


@pytest.mark.parametrize("interface_v1", [0, 1])
def test_sglang_cache_controller_drives_a_dynamic_backend(published_scheduler, interface_v1):
    from sglang.srt.managers.cache_controller import HiCacheController, get_storage_hash_str
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

    dev = make_device_pool("MHA")
    allocator = PagedTokenToKVPoolAllocator(64, PAGE, torch.bfloat16, "cpu", dev, need_sort=False)
    host = make_host_pool(dev, "page_first")
    ctl = HiCacheController(
        allocator, host, PAGE, published_scheduler, threading.Event(), io_backend="direct"
    )
    extra = {
        "backend_name": "kvbm",
        "module_path": THIS_MODULE,
        "class_name": "ProbeStore",
        "interface_v1": interface_v1,
    }
    ctl.attach_storage_backend(
        "dynamic", model_name="tiny-llama", storage_backend_extra_config=extra
    )
    try:
        store = ctl.storage_backend
        assert isinstance(store, ProbeStore) and store.mem_pool_host is host
        expected = (
            ("_page_get_zero_copy", "_page_set_zero_copy")
            if interface_v1
            else ("_generic_page_get", "_generic_page_set")
        )
        assert (ctl.page_get_func.__name__, ctl.page_set_func.__name__) == expected

        # Backup: host pages -> storage, keyed by SGLang's page hash chain.
        tokens = list(range(100, 100 + 2 * PAGE))
        hashes = get_storage_hash_str(tokens, None, page_size=PAGE)
        assert len(hashes) == 2 and all(len(h) == 64 for h in hashes)
        hi = host.alloc(2 * PAGE)
        for j in range(2):
            host.set_from_flat_data_page(
                int(hi[j * PAGE]), torch.full_like(host.get_dummy_flat_data_page(), float(j + 1))
            )
        ctl.write_storage(hi, tokens, hash_value=hashes)
        op = ctl.ack_backup_queue.get(timeout=30)
        assert op.completed_tokens == 2 * PAGE and sorted(store.data) == sorted(hashes)
        if interface_v1:
            name, keys, indices, info = store.calls[0]
            assert name == "batch_set_v1" and keys == hashes and torch.equal(indices, hi)
            assert info.prefix_keys is None
        host.free(hi)

        # Prefetch: storage -> host, as the radix cache drives it.
        ctl.prefetch("req-1", tokens)
        hit = ctl.prefetch_hit_queue.get(timeout=30)
        assert hit.storage_hit_count == 2 * PAGE and hit.hash_value == hashes
        hit.host_indices = ctl.mem_pool_host.alloc(hit.storage_hit_count)
        ctl.prefetch_buffer.put(hit)
        acks = []
        while not acks or not acks[-1].completed_req:
            acks.append(ctl.ack_prefetch_queue.get(timeout=30))
        assert acks[0].completed_tokens == 2 * PAGE
        for j in range(2):
            page = host.get_data_page(int(hit.host_indices[j * PAGE]))
            assert page.float().unique().tolist() == [float(j + 1)]
    finally:
        ctl.detach_storage_backend()


# --------------------------------------------------------------------------- kvbm


def test_kvbm_integrations_subclass_the_real_engine_classes():
    import_or_skip(
        "kvbm", "kvbm not importable: bash scripts/engines_env.sh installs it into its venv")
    from kvbm.integrations.sglang import KvbmStorage
    from kvbm.integrations.vllm import KvbmTier
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

    assert issubclass(KvbmTier, SecondaryTierManager)
    assert issubclass(KvbmStorage, HiCacheStorage)
    assert sys.modules["vllm"].__file__ and sys.modules["sglang"].__file__
