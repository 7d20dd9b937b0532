"""kvbm.integrations.vllm.KvbmTier driven as vLLM's TieringOffloadingManager drives a
secondary tier: on_new_request, lookup per chunk, submit_store / submit_load with
chunk ids into the primary tier's memoryview, get_finished_jobs polled, touch,
take_events, on_request_finished, drain_jobs, shutdown. Then a second process on
the same directory (a restarted engine) loads the chunks warm, and a corrupted
chunk is a miss, never loaded.

vLLM is not installed here (it needs torch): the tier runs on its look-alike types,
and test_signatures_match_vllm compares the method signatures with vLLM's own
tiering/base.py when KVBM_VLLM_SOURCE names an unpacked vllm wheel.
"""

import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

import kvbm
from kvbm.integrations import vllm as kv_vllm
from kvbm.integrations.vllm import JobResult, KvbmTier, LookupResult, TransferJob

from conftest import run_python
from interface_check import abstract_interface, mismatches
from skips import skip_or_fail

CHUNK_BYTES = 64 << 10
N_CHUNKS = 32


class Engine:
    """The parts of vLLM a secondary tier sees: the primary tier's memory and the job loop."""

    def __init__(self, tmp_path, **options):
        self.primary = np.zeros((N_CHUNKS, CHUNK_BYTES), dtype=np.uint8)
        # No vLLM here: no spec to take the model from, so the namespace is given, as a
        # deployment may (tests/engines/ build the tier from vLLM's real spec).
        spec = None
        options.setdefault("namespace", "test/model|bfloat16")
        options.setdefault("disk_bytes", 256 * CHUNK_BYTES)
        options.setdefault("host_bytes", 64 * CHUNK_BYTES)
        options.setdefault("device_blocks", 16)
        self.tier = KvbmTier(offloading_spec=spec, primary_kv_view=memoryview(self.primary),
                             tier_type="KvbmTier", disk_directory=str(tmp_path), **options)
        self.next_job = 0

    def job(self, keys, chunk_ids, promotion, req):
        self.next_job += 1
        return TransferJob(job_id=self.next_job, keys=keys,
                           chunk_ids=np.asarray(chunk_ids, dtype=np.int64),
                           is_promotion=promotion, req_context=req)

    def wait(self, job_id, timeout=30):
        """Polls get_finished_jobs() as vLLM does each step, until `job_id` is reported."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.tier.get_finished_jobs():
                if r.job_id == job_id:
                    return r
            time.sleep(0.001)
        raise AssertionError(f"job {job_id} never finished")

    def lookup_prefix(self, keys, req):
        """The chunks a request can load: lookups in order, stopping at the first non-HIT."""
        n = 0
        for k in keys:
            for _ in range(1000):
                r = self.tier.lookup(k, req)
                if r is not LookupResult.RETRY:
                    break
                time.sleep(0.002)
            if r is not LookupResult.HIT:
                break
            n += 1
        return n


def test_refuses_to_start_without_knowing_the_model(tmp_path):
    """A spec that does not say which model vLLM serves (here none) is refused unless a
    namespace is given: vLLM's chunk keys hold no model, so a guess could serve another
    model's KV."""
    primary = np.zeros((4, CHUNK_BYTES), dtype=np.uint8)
    with pytest.raises(kvbm.UsageError, match='set "namespace"'):
        KvbmTier(offloading_spec=None, primary_kv_view=memoryview(primary),
                 disk_directory=str(tmp_path), disk_bytes=16 * CHUNK_BYTES,
                 host_bytes=8 * CHUNK_BYTES, device_blocks=4)


def keys_of(n, tag="req"):
    return [(f"{tag}-block-{i}".encode() * 4)[:32] + (0).to_bytes(4, "big") for i in range(n)]


def fill(primary, rows, seed):
    data = np.random.default_rng(seed).integers(0, 256, size=(len(rows), CHUNK_BYTES),
                                                dtype=np.uint8)
    primary[rows] = data
    return data


def test_store_then_load_in_engine_order(tmp_path):
    e = Engine(tmp_path, enable_kv_events=True)
    t = e.tier
    req = SimpleNamespace(req_id="r1", kv_transfer_params=None)
    keys = keys_of(8)
    t.on_new_request(req)
    assert e.lookup_prefix(keys, req) == 0
    # The scheduler cascades chunks 0-7 (primary slots 3..10) down to this tier.
    rows = list(range(3, 11))
    data = fill(e.primary, rows, seed=1)
    job = e.job(keys, rows, False, req)
    t.submit_store(job)
    r = e.wait(job.job_id)
    assert isinstance(r, JobResult) and r.success and r.transfer_bytes == 8 * CHUNK_BYTES
    events = list(t.take_events())
    assert len(events) == 1 and events[0].keys == keys and not events[0].removed
    assert e.lookup_prefix(keys, req) == 8
    t.touch(keys, req)
    t.on_request_finished(req)
    # A later request promotes them into other primary slots.
    e.primary[:] = 0
    req2 = SimpleNamespace(req_id="r2", kv_transfer_params=None)
    t.on_new_request(req2)
    assert e.lookup_prefix(keys, req2) == 8
    dst = list(range(20, 28))
    job = e.job(keys, dst, True, req2)
    t.submit_load(job)
    r = e.wait(job.job_id)
    assert r.success and r.successful_keys is None
    assert (e.primary[dst] == data).all()
    t.on_request_finished(req2)
    t.drain_jobs()
    assert not t.has_pending_work()
    t.shutdown()


def test_load_of_missing_chunks_reports_the_prefix(tmp_path):
    e = Engine(tmp_path)
    req = SimpleNamespace(req_id="r", kv_transfer_params=None)
    keys = keys_of(6, "partial")
    fill(e.primary, list(range(4)), seed=2)
    job = e.job(keys[:4], range(4), False, req)
    e.tier.submit_store(job)
    assert e.wait(job.job_id).success
    job = e.job(keys, range(10, 16), True, req)  # 4 stored, 2 never were
    e.tier.submit_load(job)
    r = e.wait(job.job_id)
    assert not r.success and list(r.successful_keys) == keys[:4]
    assert e.tier.lookup(keys[4], req) is LookupResult.MISS
    e.tier.shutdown()


CHILD = """
import sys, time, numpy as np
sys.path.insert(0, sys.argv[2])
from types import SimpleNamespace
from test_vllm import Engine, keys_of, fill, N_CHUNKS
from kvbm.integrations.vllm import LookupResult
e = Engine(sys.argv[1])
req = SimpleNamespace(req_id="x", kv_transfer_params=None)
keys = keys_of(12, "restart")
if sys.argv[3] == "store":
    fill(e.primary, list(range(12)), seed=5)
    job = e.job(keys, range(12), False, req)
    e.tier.submit_store(job)
    print(int(e.wait(job.job_id).success))
else:
    n = e.lookup_prefix(keys, req)
    job = e.job(keys, range(12, 24), True, req)
    e.tier.submit_load(job)
    r = e.wait(job.job_id)
    ref = np.random.default_rng(5).integers(0, 256, size=(12, e.primary.shape[1]), dtype=np.uint8)
    got = len(r.successful_keys) if r.successful_keys is not None else (12 if r.success else 0)
    ok = int((e.primary[12:12 + got] == ref[:got]).all())
    print(n, int(r.success), got, ok, int(e.tier.lookup(keys[-1], req) is LookupResult.HIT))
e.tier.shutdown()
"""


def test_restarted_engine_loads_warm_from_g3(tmp_path):
    here = os.path.dirname(__file__)
    assert run_python(CHILD, tmp_path, here, "store").split()[-1] == "1"
    n, success, got, ok, last_hit = run_python(CHILD, tmp_path, here, "load").split()[-5:]
    assert (n, success, got, ok, last_hit) == ("12", "1", "12", "1", "1")


def test_corrupt_chunk_is_a_miss_never_loaded(tmp_path):
    here = os.path.dirname(__file__)
    run_python(CHILD, tmp_path, here, "store")
    ref = np.random.default_rng(5).integers(0, 256, size=(12, CHUNK_BYTES), dtype=np.uint8)
    path = tmp_path / "kvbm.slots"
    data = bytearray(path.read_bytes())
    at = data.find(ref[7, :256].tobytes())
    assert at >= 0
    data[at + 4096] ^= 0x01  # one bit of chunk 7
    path.write_bytes(bytes(data))
    n, success, got, ok, last_hit = run_python(CHILD, tmp_path, here, "load").split()[-5:]
    # Chunks 0-6 are served (bytes equal); 7 and after are never copied into the primary tier.
    assert success == "0" and int(got) == 7 and ok == "1", (n, success, got, ok)
    # Only the chunk that failed its check became a miss: chunk 11 is intact, still a HIT.
    assert last_hit == "1"


def test_g4_shared_by_two_engines(tmp_path, redis_url):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = Engine(a_dir, remote_urls=[redis_url])
    b = Engine(b_dir, remote_urls=[redis_url])
    req = SimpleNamespace(req_id="g4", kv_transfer_params=None)
    keys = keys_of(5, "shared")
    data = fill(a.primary, list(range(5)), seed=9)
    job = a.job(keys, range(5), False, req)
    a.tier.submit_store(job)
    assert a.wait(job.job_id).success
    a.tier.kv.drain()  # written through to Redis
    assert b.lookup_prefix(keys, req) == 5  # RETRY while Redis is asked, then HIT
    job = b.job(keys, range(10, 15), True, req)
    b.tier.submit_load(job)
    assert b.wait(job.job_id).success
    assert (b.primary[10:15] == data).all()
    a.tier.shutdown()
    b.tier.shutdown()


def test_loadable_the_way_vllm_loads_it():
    """SecondaryTierFactory.get_tier_class: import module_path, getattr(module, type)."""
    import importlib
    cfg = {"type": "KvbmTier", "module_path": "kvbm.integrations.vllm"}
    cls = getattr(importlib.import_module(cfg["module_path"]), cfg["type"])
    assert cls is KvbmTier
    if kv_vllm.HAVE_VLLM:  # the factory asserts it
        from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
        assert issubclass(cls, SecondaryTierManager)


def test_signatures_match_vllm():
    src = os.environ.get("KVBM_VLLM_SOURCE")
    path = src and os.path.join(src, "vllm", "v1", "kv_offload", "tiering", "base.py")
    if not path or not os.path.exists(path):
        skip_or_fail("engine sources missing: KVBM_VLLM_SOURCE not set (a directory holding an "
                     "unpacked vllm wheel; the engines stage sets it)")
    iface = abstract_interface(path, "SecondaryTierManager")
    abstract = [n for n, (_, a, _) in iface.items() if a]
    for name in abstract:
        assert name in KvbmTier.__dict__, f"KvbmTier lacks abstract method {name}"
    methods = ["lookup", "submit_store", "submit_load", "get_finished_jobs", "has_pending_work",
               "take_events", "touch", "on_new_request", "on_request_finished", "drain_jobs",
               "shutdown"]
    assert not mismatches(KvbmTier, iface, methods)
    assert iface["__init__"][0] == ["self", "offloading_spec", "primary_kv_view", "tier_type",
                                    "backpressure_detector"]
    import inspect
    ours = list(inspect.signature(KvbmTier.__init__).parameters)[:5]
    assert ours == iface["__init__"][0]


def _dp_spec(engine_id, index, size):
    """The parts of vLLM's spec that say which DP engine this is (spec.config.engine_id and
    spec.config.parallel, vLLM's OffloadingConfig / OffloadingParallelConfig)."""
    parallel = SimpleNamespace(data_parallel_index=index, data_parallel_size=size)
    return SimpleNamespace(config=SimpleNamespace(engine_id=engine_id, parallel=parallel))


@pytest.mark.parametrize("size", [1, 2], ids=["dense", "moe"])
def test_data_parallel_engines_keep_g3_in_dp_i(tmp_path, size):
    """A MoE model's DP engines keep data_parallel_size = N; a dense model's are made
    independent (vLLM sets data_parallel_size back to 1) but keep data_parallel_index and the
    "_dp<i>" engine id. Either way engine i keeps G3 in <disk_directory>/dp<i>, and the two
    run at once (a G3 file belongs to one process)."""
    primary = [np.zeros((4, CHUNK_BYTES), dtype=np.uint8) for _ in range(2)]
    tiers = [KvbmTier(offloading_spec=_dp_spec(f"engine_dp{i}", i, size),
                      primary_kv_view=memoryview(primary[i]), disk_directory=str(tmp_path),
                      namespace="dp/model", disk_bytes=16 * CHUNK_BYTES,
                      host_bytes=8 * CHUNK_BYTES, device_blocks=4) for i in range(2)]
    try:
        assert [t.disk_directory for t in tiers] == [str(tmp_path / "dp0"), str(tmp_path / "dp1")]
    finally:
        for t in tiers:
            t.shutdown()
    # Not DP: the directory itself.
    t = KvbmTier(offloading_spec=_dp_spec("engine", 0, 1), primary_kv_view=memoryview(primary[0]),
                 disk_directory=str(tmp_path), namespace="dp/model", disk_bytes=16 * CHUNK_BYTES,
                 host_bytes=8 * CHUNK_BYTES, device_blocks=4)
    assert t.disk_directory == str(tmp_path)
    t.shutdown()
