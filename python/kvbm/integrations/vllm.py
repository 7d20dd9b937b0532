"""kvbm as a vLLM secondary KV tier: ``kvbm.integrations.vllm.KvbmTier``.

vLLM (0.33) keeps offloaded KV chunks in a CPU primary tier and cascades them
to secondary tiers it loads by module path (``vllm/v1/kv_offload/tiering/``:
``SecondaryTierManager``, ``SecondaryTierFactory``). This tier stores each chunk
in kvbm: G2 (host memory) first, then, written through, G3 (a persistent,
checksummed file) and, when configured, G4 (Redis, shared by instances). A
restarted engine finds what the last one stored; a chunk whose bytes fail
their check is a miss and is never loaded.

Configuration (the tier's dict in vLLM's offloading config)::

    {"type": "KvbmTier", "module_path": "kvbm.integrations.vllm",
     "disk_directory": "/nvme/kvbm", "disk_bytes": 200_000_000_000,
     "host_bytes": 8_000_000_000,
     "remote_urls": ["redis://cache-0:6379"]}        # G4: optional

Every key besides ``type`` and ``module_path`` reaches ``__init__`` as a keyword.

How the interface is met (all methods run on vLLM's scheduler thread and must
not block):

- ``lookup`` asks kvbm's registry (G1-G3, no I/O); with G4 a key no local tier
  holds is asked of Redis on a worker thread and answered ``RETRY`` until the
  answer is in;
- ``submit_store`` / ``submit_load`` hand the copy to a worker thread; the
  C++ calls release the GIL. A store copies the chunks out of the primary
  tier's memoryview into G2 blocks (kvbm then writes them to G3/G4); a load
  onboards them (verified) and copies them into the primary slots;
- ``get_finished_jobs`` returns what the workers finished; a load that stopped
  early reports ``success=False`` with ``successful_keys`` = the prefix that
  arrived, and the failed keys are misses from then on;
- ``drain_jobs`` waits for every submitted job, ``shutdown`` also for kvbm's
  own writes, so that G3 holds everything stored.

A hybrid model (vLLM's KV cache groups: full attention beside a sliding window,
...) needs nothing more of the tier: vLLM names a chunk of group g by its block
hash and g (``make_offload_key(hash, g)``), so the groups' chunks never share a
key, and vLLM decides which chunks of each group it stores and asks for (a
window's last chunks). The namespace names the groups (their layers and
windows), so a hybrid model's chunks are never served to its dense twin. The
tier counts, per group, the chunks stored and loaded and the lookups that hit
or missed: ``group_stats()``, and in vLLM's offloading metrics the counter
``vllm:kv_offload_kvbm_group_chunks`` labelled by ``group`` and ``op``.

vLLM itself is not needed to import this module: when ``vllm`` (and its torch)
import, ``KvbmTier`` subclasses the real ``SecondaryTierManager`` and returns
vLLM's own ``LookupResult`` / ``JobResult``; otherwise it stands alone with
look-alike types of the same names and fields (tests/python/test_vllm.py drives it that
way; tests/engines/test_vllm_engine.py runs it inside the real vLLM 0.33.0, loaded by vLLM's
SecondaryTierFactory and driven through its TieringOffloadingManager).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import numpy as np

import kvbm

logger = logging.getLogger("kvbm.integrations.vllm")

try:  # the real interface, when vLLM (and torch) are installed
    from vllm.v1.kv_offload.base import (
        Locality,
        LookupResult,
        Medium,
        OffloadingEvent,
        RequestOffloadingContext,
    )
    from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

    HAVE_VLLM = True
except Exception:  # ImportError, or vLLM present without a working torch
    HAVE_VLLM = False

    class LookupResult(Enum):
        """vLLM's LookupResult (vllm.v1.kv_offload.base)."""

        MISS = auto()
        HIT = auto()
        HIT_PENDING = auto()
        RETRY = auto()

    class Locality(Enum):
        """vLLM's Locality (vllm.v1.kv_offload.base)."""

        LOCAL = "LOCAL"
        REMOTE = "REMOTE"

    class Medium(Enum):
        """vLLM's Medium (vllm.v1.kv_offload.base)."""

        CPU = "CPU"
        STORAGE = "STORAGE"

    @dataclass
    class RequestOffloadingContext:
        """vLLM's RequestOffloadingContext; the default policy (chunk level)."""

        policy: Any = None

    @dataclass
    class OffloadingEvent:
        """vLLM's OffloadingEvent (vllm.v1.kv_offload.base)."""

        keys: list
        medium: Medium
        removed: bool
        locality: Any = None
        ownership: str | None = None
        removal_expected: bool = False
        metadata_only: bool = False

    @dataclass
    class TransferJob:
        """vLLM's TransferJob (vllm.v1.kv_offload.tiering.base)."""

        job_id: int
        keys: Collection[bytes]
        chunk_ids: np.ndarray
        is_promotion: bool
        req_context: Any
        submit_time: float = field(default_factory=time.monotonic)

    @dataclass
    class JobResult:
        """vLLM's JobResult (vllm.v1.kv_offload.tiering.base)."""

        job_id: int
        success: bool
        successful_keys: Collection[bytes] | None = None
        transfer_time: float | None = None
        transfer_bytes: int | None = None

    class SecondaryTierManager:  # noqa: D101  (stands in for vLLM's ABC)
        medium = None


__all__ = ["KvbmTier", "HAVE_VLLM", "LookupResult", "JobResult", "TransferJob"]

# The tier's per-group counter in vLLM's offloading metrics (KvbmTier.get_stats()).
GROUP_CHUNKS_METRIC = "vllm:kv_offload_kvbm_group_chunks"
GROUP_OPS = ("stored", "loaded", "hit", "miss")


def _group_of(key) -> int:
    """The KV cache group of an offload key: make_offload_key() appends it to the block hash
    as 4 big-endian bytes (vllm.v1.kv_offload.base.get_offload_group_idx)."""
    return int.from_bytes(bytes(key[-4:]), "big")


class _GroupCounts:
    """Per KV cache group of the engine's OffloadingConfig, chunks stored and loaded and
    lookups that hit or missed: totals, and what changed since the last take()."""

    def __init__(self, offloading_spec) -> None:
        groups = getattr(_spec_config(offloading_spec), "groups", None) or ()
        self._ids = {int(g.group_id) for g in groups}
        self._lock = threading.Lock()
        self._totals = {g: dict.fromkeys(GROUP_OPS, 0) for g in sorted(self._ids)}
        self._since: dict[tuple[str, str], int] = {}

    def count(self, keys, op: str) -> None:
        if not self._ids:
            return
        with self._lock:
            for k in keys:
                g = _group_of(k)
                if g not in self._ids:
                    continue  # not a key of this engine's groups: nothing to count it under
                self._totals[g][op] += 1
                label = (str(g), op)
                self._since[label] = self._since.get(label, 0) + 1

    def totals(self) -> dict[int, dict[str, int]]:
        with self._lock:
            return {g: dict(c) for g, c in self._totals.items()}

    def take(self) -> dict[tuple[str, str], int]:
        with self._lock:
            since, self._since = self._since, {}
        return since


def _spec_config(offloading_spec):
    """vLLM's OffloadingConfig (vllm/v1/kv_offload/config.py) of the spec, or None."""
    return getattr(offloading_spec, "config", None)


def _model_namespace(offloading_spec) -> str:
    """What makes a chunk reusable, from the engine's own OffloadingConfig: the model, its KV
    dtype, the chunk geometry (tokens per hash, blocks per chunk, bytes per block), the KV
    layout and attention kind (layout name, canonical or replicated MLA layout, the cache
    groups with their layers and sliding windows) and the parallelism whose bytes a chunk
    holds (TP/PP/PCP/DCP sizes and the worker rank). vLLM's chunk keys are hashes of token ids
    with no model in them, so two engines that differ in any of these must never share a
    chunk: they get different namespaces, on G3 and as G4's model. Raises UsageError when the
    spec does not say which model it serves."""
    config = _spec_config(offloading_spec)
    model = getattr(config, "model", None)
    name = getattr(model, "name", None)
    if not name:
        raise kvbm.UsageError(
            "KvbmTier: the offloading spec does not say which model vLLM serves (no "
            "spec.config.model.name); set \"namespace\" in the tier's config to a name of the "
            "model, its KV dtype and layout, so that no other model's chunks are ever served")
    parallel = config.parallel
    cache = config.cache
    groups = ";".join(
        f"{g.tokens_per_block}t:{len(g.layer_names)}l:{kvbm.hash_key(','.join(g.layer_names)):x}"
        f":w{g.sliding_window_size_in_chunks}" for g in config.groups)
    parts = [
        f"vllm:{name}",
        f"dtype={model.dtype}",
        f"hash={cache.tokens_per_hash}x{cache.blocks_per_chunk}",
        f"bytes={config.worker_kv_bytes_per_block}",
        f"layout={config.kv_cache_layout}",
        f"canonical={int(bool(config.canonical_layout))}",
        f"replicated={int(bool(config.replicated_layout))}",
        f"groups={groups}",
        f"tp={parallel.tp_size},pp={parallel.pp_size},pcp={parallel.pcp_size},"
        f"dcp={parallel.dcp_size},rank={parallel.rank}",
    ]
    return "|".join(parts)


def _dp_index(offloading_spec) -> int | None:
    """This engine's data-parallel index, or None when vLLM runs no data parallelism.

    vLLM says so in two ways: a MoE model's DP engines keep data_parallel_size = N with
    data_parallel_index = i; a dense model's DP engines are made independent
    (ParallelConfig.reconfigure_for_independent_dp_rank sets data_parallel_size to 1) but keep
    data_parallel_index = i, and the engine core appends "_dp<i>" to the engine id of every DP
    engine (vllm/v1/engine/core.py). Either sign makes it DP."""
    config = _spec_config(offloading_spec)
    parallel = getattr(config, "parallel", None)
    if parallel is None:
        return None
    index = int(getattr(parallel, "data_parallel_index", 0) or 0)
    size = int(getattr(parallel, "data_parallel_size", 1) or 1)
    suffix = re.search(r"_dp(\d+)$", str(getattr(config, "engine_id", "") or ""))
    if size > 1 or index > 0 or suffix:
        return index
    return None


def _engine_directory(disk_directory: str, offloading_spec) -> str:
    """The G3 directory of this engine: vLLM gives every data-parallel engine the same tier
    config, and a G3 file belongs to one process, so DP engine i keeps its G3 in
    <disk_directory>/dp<i> (stable across restarts, unlike the engine id). The engines share
    chunks through G4."""
    index = _dp_index(offloading_spec)
    if index is None:
        return disk_directory
    sub = os.path.join(disk_directory, f"dp{index}")
    os.makedirs(sub, exist_ok=True)
    return sub


def _primary_rows(view: memoryview) -> np.ndarray:
    """The primary tier's memory as (chunks, chunk bytes) uint8, without a copy."""
    arr = np.asarray(view)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    arr = arr.reshape(arr.shape[0], -1)
    if arr.dtype != np.uint8:
        arr = arr.view(np.uint8)
    if not arr.flags.c_contiguous:
        raise kvbm.UsageError("KvbmTier: the primary tier's memoryview must be C-contiguous")
    return arr


class KvbmTier(SecondaryTierManager):
    """A vLLM secondary tier backed by kvbm's G2, persistent G3 and optional G4.

    Keyword options (from vLLM's tier config):
      disk_directory   existing directory of the G3 file (required); DP engine i uses
                       <disk_directory>/dp<i>
      disk_bytes       G3 size (default 64 GiB, preallocated)
      host_bytes       G2 size (default 1 GiB of pinned memory)
      device_blocks    G1 blocks, the landing zone of loads (default 64)
      namespace        what makes blocks reusable (default: from vLLM's OffloadingConfig:
                       model name, KV dtype, chunk geometry, KV layout, cache groups,
                       TP/PP/PCP/DCP and rank; refused when the model is not known)
      remote_urls      G4 Redis URLs; remote_model / remote_dtype /
                       remote_user_namespace default to the namespace's parts
      enable_kv_events report stored chunks through take_events(); only when vLLM's KV
                       cache events are on (kv_events_config), else a warning
      workers          copy threads (default 2)
      locality         "LOCAL" or "REMOTE": tier.locality, for vLLM's load filters and events
    """

    medium = Medium.STORAGE

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str = "KvbmTier",
        backpressure_detector: Any = None,
        *,
        disk_directory: str,
        disk_bytes: int = 64 << 30,
        host_bytes: int = 1 << 30,
        device_blocks: int = 64,
        namespace: str | None = None,
        remote_urls: list[str] | None = None,
        remote_model: str | None = None,
        remote_dtype: str = "",
        remote_user_namespace: str = "",
        enable_kv_events: bool = False,
        workers: int = 2,
        locality: str | None = None,
    ) -> None:
        if HAVE_VLLM:
            super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        else:
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type
            self.locality = None
            self._bp_detector = backpressure_detector
        self.locality = Locality(locality) if locality is not None else None
        self._rows = _primary_rows(primary_kv_view)
        chunk_bytes = self._rows.shape[1]
        self._chunk_bytes = chunk_bytes
        self.namespace = namespace or _model_namespace(offloading_spec)
        disk_directory = _engine_directory(disk_directory, offloading_spec)
        self.disk_directory = disk_directory
        events_config = getattr(offloading_spec, "kv_events_config", None)
        if enable_kv_events and events_config is not None and not getattr(
                events_config, "enable_kv_cache_events", False):
            logger.warning(
                "KvbmTier: enable_kv_events is set on secondary tier '%s' but vLLM's KV cache "
                "events are disabled globally (kv_events_config); the tier emits no events",
                tier_type)
            enable_kv_events = False

        cfg = kvbm.KvBlockManagerConfig(
            layout=kvbm.LayoutConfig(
                num_layers=1, outer_dim=1, page_size=1, inner_dim=chunk_bytes, dtype_bytes=1
            ),
            device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS,
            device=kvbm.TierConfig(blocks=device_blocks),
            host=kvbm.TierConfig(bytes=host_bytes),
            disk=kvbm.TierConfig(bytes=disk_bytes),
            disk_directory=disk_directory,
            disk_persistent=True,
            disk_namespace=self.namespace,
            device_to_host=kvbm.OffloadMode.NONE,  # loads land in G1; they are already below
        )
        if remote_urls:
            cfg.remote.urls = list(remote_urls)
            cfg.remote.model = remote_model or self.namespace
            cfg.remote.dtype = remote_dtype
            cfg.remote.user_namespace = remote_user_namespace
            cfg.host_to_remote = kvbm.OffloadMode.WRITE_THROUGH
        self.kv = kvbm.KvBlockManager(cfg)
        self._remote = bool(remote_urls)
        self._load_batch = max(1, device_blocks // 2)

        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="kvbm-vllm"
        )
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future] = set()
        self._finished: list = []
        self._events: list | None = [] if enable_kv_events else None
        self._misses: set[bytes] = set()  # failed loads: misses until stored again
        self._storing: dict[bytes, int] = {}  # keys of stores in flight
        self._remote_pending: set[bytes] = set()
        self._remote_verdict: dict[bytes, bool] = {}
        self._groups = _GroupCounts(offloading_spec)

    # -- lookups --------------------------------------------------------------------------

    def lookup(self, key, req_context) -> LookupResult:
        """HIT when a local tier holds the chunk; with G4, RETRY while Redis is asked."""
        result = self._lookup(key)
        if result is LookupResult.HIT:
            self._groups.count((key,), "hit")
        elif result is LookupResult.MISS:
            self._groups.count((key,), "miss")
        return result

    def _lookup(self, key) -> LookupResult:
        with self._lock:
            if key in self._misses or key in self._storing:
                return LookupResult.MISS
        h = np.array([kvbm.hash_key(key)], dtype=np.uint64)
        if self.kv.present(h, chained=False)[0]:
            return LookupResult.HIT
        if not self._remote:
            return LookupResult.MISS
        with self._lock:
            verdict = self._remote_verdict.pop(key, None)
            if verdict is not None:
                return LookupResult.HIT if verdict else LookupResult.MISS
            ask = key not in self._remote_pending
            self._remote_pending.add(key)
        if ask:
            self._submit(self._ask_remote, key, h)
        return LookupResult.RETRY

    def _ask_remote(self, key, h) -> None:
        found = self.kv.probe(h, chained=False).total > 0  # one round trip, GIL released
        with self._lock:
            self._remote_pending.discard(key)
            self._remote_verdict[key] = found

    def touch(self, keys, req_context):
        """Marks the chunks most recently used in every local tier."""
        keys = list(keys)
        if keys:
            self.kv.touch(kvbm.hash_keys(keys), chained=False)

    # -- jobs -----------------------------------------------------------------------------

    def submit_store(self, job_metadata) -> None:
        """Copies the chunks into kvbm on a worker (G2, then G3/G4 written through)."""
        keys = list(job_metadata.keys)
        rows = np.asarray(job_metadata.chunk_ids, dtype=np.int64).reshape(-1)
        if len(keys) != len(rows):
            raise kvbm.UsageError(f"submit_store: {len(keys)} keys but {len(rows)} chunk_ids")
        with self._lock:
            for k in keys:
                self._storing[k] = self._storing.get(k, 0) + 1
        self._submit(self._store, job_metadata.job_id, keys, rows)

    def _store(self, job_id, keys, rows) -> None:
        start = time.monotonic()
        try:
            held = self.kv.store(kvbm.hash_keys(keys), self._rows, rows=rows, chained=False)
            ok = held == len(keys)
        except Exception:  # reported as a failed job: vLLM keeps the chunks in the primary tier
            ok = False
        elapsed = time.monotonic() - start
        if ok:
            self._groups.count(keys, "stored")
        with self._lock:
            for k in keys:
                n = self._storing.get(k, 0) - 1
                if n > 0:
                    self._storing[k] = n
                else:
                    self._storing.pop(k, None)
                if ok:
                    self._misses.discard(k)
            self._finished.append(JobResult(job_id=job_id, success=ok, transfer_time=elapsed,
                                            transfer_bytes=len(keys) * self._chunk_bytes))
            if ok and self._events is not None:
                self._events.append(OffloadingEvent(keys=keys, medium=self.medium, removed=False,
                                                    locality=self.locality))

    def submit_load(self, job_metadata) -> None:
        """Onboards the chunks (verified) and copies them into the primary slots, on a worker."""
        keys = list(job_metadata.keys)
        rows = np.asarray(job_metadata.chunk_ids, dtype=np.int64).reshape(-1)
        if len(keys) != len(rows):
            raise kvbm.UsageError(f"submit_load: {len(keys)} keys but {len(rows)} chunk_ids")
        self._submit(self._load, job_metadata.job_id, keys, rows)

    def _load(self, job_id, keys, rows) -> None:
        start = time.monotonic()
        hashes = kvbm.hash_keys(keys)
        loaded = 0
        try:
            for lo in range(0, len(keys), self._load_batch):
                hi = min(len(keys), lo + self._load_batch)
                n = self.kv.load(hashes[lo:hi], self._rows, rows=rows[lo:hi], chained=False)
                loaded += n
                if n < hi - lo:
                    break
        except Exception:
            pass  # what arrived before the failure is kept; the rest is a miss
        elapsed = time.monotonic() - start
        ok = loaded == len(keys)
        self._groups.count(keys[:loaded], "loaded")
        with self._lock:
            if not ok:  # the chunk that ended the prefix; those after it may well be intact
                self._misses.add(keys[loaded])
            self._finished.append(JobResult(
                job_id=job_id, success=ok,
                successful_keys=None if ok or loaded == 0 else tuple(keys[:loaded]),
                transfer_time=elapsed, transfer_bytes=loaded * self._chunk_bytes))

    def _submit(self, fn, *args) -> None:
        fut = self._pool.submit(fn, *args)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(self._forget)

    def _forget(self, fut) -> None:
        with self._lock:
            self._futures.discard(fut)

    def get_finished_jobs(self) -> Iterable:
        """The jobs (stores and loads) finished since the last call."""
        with self._lock:
            done, self._finished = self._finished, []
        return done

    def has_pending_work(self) -> bool:
        with self._lock:
            return bool(self._futures)

    def drain_jobs(self) -> None:
        """Waits until every submitted job has finished (its result queued)."""
        while True:
            with self._lock:
                pending = list(self._futures)
            if not pending:
                return
            concurrent.futures.wait(pending)

    def take_events(self) -> Iterable:
        """Stored chunks (enable_kv_events=True), as vLLM's OffloadingEvent."""
        if self._events is None:
            return ()
        with self._lock:
            events, self._events = self._events, []
        return events

    # -- per-group accounting -------------------------------------------------------------

    def group_stats(self) -> dict[int, dict[str, int]]:
        """Per KV cache group of the engine (vLLM's group index), since the tier was built:
        chunks "stored" and "loaded", and lookups answered HIT ("hit") or MISS ("miss")."""
        return self._groups.totals()

    @classmethod
    def build_metric_definitions(cls, extra_config) -> dict:
        """The tier's counter in vLLM's offloading metrics: chunks per group and operation."""
        from vllm.v1.kv_offload.base import OffloadingCounterMetadata

        return {GROUP_CHUNKS_METRIC: OffloadingCounterMetadata(
            documentation="KvbmTier: chunks stored and loaded, and lookups that hit or missed, "
                          "per KV cache group (vLLM's group index).",
            labelnames=("group", "op"))}

    def get_stats(self):
        """What group_stats() gained since the last call, as vLLM's OffloadingConnectorStats
        (None when nothing changed)."""
        since = self._groups.take()
        if not since or not HAVE_VLLM:
            return None
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
            OffloadingConnectorStats,
        )

        stats = OffloadingConnectorStats()
        for label, n in sorted(since.items()):
            stats.increase_counter(GROUP_CHUNKS_METRIC, n, label)
        return stats

    # -- request lifecycle ----------------------------------------------------------------

    def on_new_request(self, req_context) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def on_request_finished(self, req_context) -> None:
        return None

    def shutdown(self) -> None:
        """Waits for every job and for kvbm's writes to G3/G4, then closes the manager and lets
        go of the primary tier's memory (vLLM unmaps it next, which it cannot do while a view
        of it is held: it would keep the mapping and warn)."""
        self.drain_jobs()
        self._pool.shutdown(wait=True)
        if self.kv is not None:
            self.kv.drain()
            self.kv.close()
            self.kv = None
        self._rows = None
