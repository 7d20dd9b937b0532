"""kvbm as an SGLang HiCache storage backend: ``kvbm.integrations.sglang.KvbmStorage``.

SGLang's hierarchical cache backs its host KV pool with a storage backend it can
load by module path (``python/sglang/srt/mem_cache/hicache_storage.py``,
``HiCacheStorage``; ``storage/backend_factory.py``)::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "kvbm",
            "module_path": "kvbm.integrations.sglang", "class_name": "KvbmStorage",
            "disk_directory": "/nvme/kvbm", "disk_bytes": 200000000000,
            "remote_urls": ["redis://cache-0:6379"]}'

Each page (all layers of page_size tokens, as SGLang's host pool hands it out
flat) is one kvbm block keyed by its page hash: stored into G2, written
through to G3 (a persistent, checksummed file) and, when configured, G4
(Redis, shared by instances). A restarted server finds the pages the last one
stored; a page whose bytes fail their check is a miss and is never returned.

The interface methods keep SGLang's signatures (the generic ``get``/``set``/
``batch_get``/``batch_set``/``exists``/``batch_exists`` path, and
``batch_get_v1``/``batch_set_v1`` through the registered host pool, used with
``"interface_v1": 1``). SGLang is not needed to import this module: when it
imports, ``KvbmStorage`` subclasses the real ``HiCacheStorage``.

Buffers are whatever SGLang passes (torch tensors) or NumPy arrays: they reach
kvbm through DLPack / the buffer protocol without a copy. torch is imported only
where the backend itself must make a page (``get``/``batch_get`` without targets):
then the page is a torch tensor (the host pool's flat page when one is registered),
a NumPy array only where torch does not import.

What makes a page reusable (the G3 file's namespace and the G4 key space) is the
model and its shard (``namespace``, default the model and TP/PP/CP rank) plus the
page format: the host pool's layout (``layer_first``, ``page_first``, ...: the
order of the bytes in a flat page) and its KV dtype. A server started with another
layout or dtype on the same directory finds none of the old pages.

A hybrid model's other host pools (SWA, Mamba state, ...: SGLang's HybridCacheController and
the batch v2 calls) each get a manager of their own: a G3 file in ``pool-<name>/`` of the
directory and ``|pool=<name>`` in the namespace, so a pool's page never answers for another
pool's page of the same hash (docs/hybrid.md, "SGLang's hybrid host pools").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, List, Optional

import numpy as np

import kvbm

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageExtraInfo

    HAVE_SGLANG = True
except Exception:  # ImportError, or SGLang present without a working torch
    HAVE_SGLANG = False
    HiCacheStorageExtraInfo = Any  # type: ignore[misc,assignment]

    class HiCacheStorage:  # noqa: D101  (stands in for SGLang's ABC)
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host


__all__ = ["KvbmStorage", "HAVE_SGLANG"]

_log = logging.getLogger(__name__)

_G3_FILE = "kvbm.slots"  # the persistent G3 file's name in disk_directory (docs/disk_tier.md)


def _as_bytes_buffer(x):
    """A tensor or array as something kvbm's buffers accept (no copy)."""
    if hasattr(x, "__dlpack__") or isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def _in_place(x) -> bool:
    """True when kvbm can read and write x's memory as it lies (docs/python.md, "Buffers")."""
    if isinstance(x, np.ndarray):
        return bool(x.flags.c_contiguous and x.flags.writeable)
    if hasattr(x, "is_contiguous"):  # a torch tensor
        return bool(x.is_contiguous()) and getattr(x.device, "type", "cpu") == "cpu"
    return True


def _contiguous(x):
    """A page kvbm can read: x itself, or a C-contiguous copy of it (a source may be copied)."""
    if _in_place(x):
        return _as_bytes_buffer(x)
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    return x.contiguous().cpu()


def _copy_back(target, staged: np.ndarray) -> None:
    """Copies a staged page (bytes in C order) into a target kvbm could not write in place."""
    if isinstance(target, np.ndarray):
        target[...] = staged.view(target.dtype).reshape(target.shape)
        return
    import torch  # only torch tensors reach here besides NumPy arrays

    target.copy_(torch.from_numpy(staged).view(target.dtype).reshape(target.shape))


def _nbytes(x) -> int:
    if hasattr(x, "nbytes"):
        return int(x.nbytes)
    return int(x.numel() * x.element_size())  # torch tensors before 2.1 lack .nbytes


class KvbmStorage(HiCacheStorage):
    """An SGLang HiCache storage backend on kvbm's G2, persistent G3 and optional G4.

    Options (``extra_config`` of HiCacheStorageConfig, or keyword arguments):
      disk_directory   existing directory of the G3 file (required); a server of several
                       ranks gets one subdirectory per rank (tp0-pp0-cp0-dp0, ...)
      disk_bytes       G3 size (default 64 GiB, preallocated)
      host_bytes       G2 size (default 1 GiB of pinned memory)
      device_blocks    G1 blocks, the landing zone of loads (default 64)
      page_bytes       bytes of one page; otherwise learnt from the host pool or the
                       first page stored or read
      namespace        the model part of what makes pages reusable (default: model,
                       TP/PP/CP shard); the host pool's layout and KV dtype are always
                       added when known, and without a host pool (layout and dtype
                       unknown) a backend refuses to start unless it is set
      remote_urls      G4 Redis URLs (remote_model, remote_dtype,
                       remote_user_namespace as in kvbm.RemoteTierConfig)
      mla_refresh_s    an MLA model under TP > 1 without G4: the ranks SGLang does not let
                       write read the writer rank's G3 file; on a miss they re-read its
                       index at most this often (default 1.0 s)
      pool_bytes       a hybrid model's other host pools: {"swa": {"disk_bytes": ...,
                       "host_bytes": ...}, ...}; a pool not named takes disk_bytes and
                       host_bytes
    """

    def __init__(self, storage_config: Any = None, kwargs: Optional[dict] = None, **options: Any):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        extra.update(options)
        for k in ("backend_name", "module_path", "class_name", "interface_v1"):
            extra.pop(k, None)
        self.storage_config = storage_config
        base = extra.pop("disk_directory", None)
        if not base:
            raise kvbm.UsageError(
                "KvbmStorage: extra_config needs 'disk_directory' (an existing directory)")
        # One G3 file per rank: a persistent G3 file belongs to one process (it holds a lock), and
        # every TP/PP/CP/DP rank of a server creates its own backend.
        shard = self._shard_name(storage_config)
        self.disk_directory = os.path.join(base, shard) if shard else base
        if shard:
            os.makedirs(self.disk_directory, exist_ok=True)
        self.disk_bytes = int(extra.pop("disk_bytes", 64 << 30))
        self.host_bytes = int(extra.pop("host_bytes", 1 << 30))
        self.device_blocks = int(extra.pop("device_blocks", 64))
        self.page_bytes = extra.pop("page_bytes", None)
        self._user_namespace = extra.pop("namespace", None)
        self.namespace: Optional[str] = None  # set when the manager is built (_page_namespace)
        self.remote_urls = list(extra.pop("remote_urls", None) or [])
        self.remote_model = extra.pop("remote_model", None)
        self.remote_dtype = extra.pop("remote_dtype", "")
        self.remote_user_namespace = extra.pop("remote_user_namespace", "")
        self.mla_refresh_s = float(extra.pop("mla_refresh_s", 1.0))
        self.pool_bytes = dict(extra.pop("pool_bytes", None) or {})
        if extra:
            raise kvbm.UsageError(f"KvbmStorage: unknown option(s) {sorted(extra)}")
        self._lock = threading.Lock()
        # SGLang backs MLA pages up from one writer rank per DCP shard only (is_storage_writer)
        # and asks every rank batch_exists (MIN over the ranks): without G4, the other ranks
        # read the writer's G3 file (kvbm.DiskPoolReader), refreshing their index of it on a
        # miss at most every mla_refresh_s seconds.
        self._writer_directory: Optional[str] = None
        self._reader: Optional[kvbm.DiskPoolReader] = None
        self._reader_refreshed = 0.0
        cfg = storage_config
        if (getattr(cfg, "is_mla_model", False) and getattr(cfg, "tp_size", 1) > 1
                and not getattr(cfg, "is_storage_writer", cfg.tp_rank == 0)
                and not self.remote_urls):
            writer = self._shard_name(cfg, tp_rank=getattr(cfg, "dcp_rank", 0))
            self._writer_directory = os.path.join(base, writer)
        self.kv: Optional[kvbm.KvBlockManager] = None
        self.mem_pool_host = None
        # A hybrid model's other host pools (SWA, Mamba state, ...), registered by SGLang's
        # HybridCacheController (register_mem_host_pool_v2): one manager each, built once the
        # pool set is known (on_host_pools_registered) or at its first page.
        self.registered_pools: dict = {}
        self._pools: dict = {}
        # The manager is built once the page format is known: at register_mem_pool_host (what
        # SGLang calls right after creating the backend), else at the first page.

    @staticmethod
    def _shard_name(cfg, tp_rank: Optional[int] = None) -> str:
        """'' for a single-rank server, else the subdirectory name of this rank (or of TP rank
        `tp_rank` of the same PP/CP/DP shard)."""
        if cfg is None:
            return ""
        sizes = (getattr(cfg, "tp_size", 1), getattr(cfg, "pp_size", 1),
                 getattr(cfg, "attn_cp_size", 1))
        if sizes == (1, 1, 1) and not getattr(cfg, "dp_rank", 0):
            return ""
        tp = cfg.tp_rank if tp_rank is None else tp_rank
        return (f"tp{tp}-pp{getattr(cfg, 'pp_rank', 0)}-cp{getattr(cfg, 'attn_cp_rank', 0)}"
                f"-dp{getattr(cfg, 'dp_rank', 0)}")

    @staticmethod
    def _default_namespace(cfg, tp_sharded: bool = False) -> str:
        """The model and its shard; the TP rank is left out for MLA pages (the same on every
        rank) unless `tp_sharded` (a pool every rank holds its own shard of: Mamba state)."""
        if cfg is None:
            return "default"
        model = getattr(cfg, "model_name", None) or "unknown-model"
        mla = bool(getattr(cfg, "is_mla_model", False))
        parts = [model.replace("/", "-")]
        if not mla or tp_sharded:
            parts.append(f"tp{cfg.tp_rank}/{cfg.tp_size}")
        if getattr(cfg, "pp_size", 1) > 1:
            parts.append(f"pp{cfg.pp_rank}/{cfg.pp_size}")
        if getattr(cfg, "attn_cp_size", 1) > 1:
            parts.append(f"cp{cfg.attn_cp_rank}/{cfg.attn_cp_size}")
        return "|".join(parts)

    @staticmethod
    def _dtype_name(dtype) -> Optional[str]:
        """'bfloat16' for torch.bfloat16 or NumPy's bfloat16-less dtypes alike ('uint8', ...)."""
        if dtype is None:
            return None
        name = str(dtype)
        return name[len("torch."):] if name.startswith("torch.") else name

    def _page_format(self):
        """(layout, dtype name) of the pages, each None when unknown: from the registered host
        pool, else the layout from HiCacheStorageConfig.is_page_first_layout when it says so."""
        pool, cfg = self.mem_pool_host, self.storage_config
        layout = getattr(pool, "layout", None) if pool is not None else None
        dtype = self._dtype_name(getattr(pool, "dtype", None)) if pool is not None else None
        if layout is None and getattr(cfg, "is_page_first_layout", False) is True:
            layout = "page_first"
        if dtype == "uint8":  # SGLang stores every fp8 KV cache as uint8: which fp8 is it?
            fp8 = self._published_kv_cache_dtype()
            if fp8 and fp8.startswith("fp8"):
                dtype = f"uint8:{fp8}"
        return layout, dtype

    @staticmethod
    def _published_kv_cache_dtype() -> Optional[str]:
        """--kv-cache-dtype of the ServerArgs this SGLang process published (its scheduler),
        or None (not SGLang, nothing published, or this SGLang lacks runtime_context)."""
        if not HAVE_SGLANG:
            return None
        try:
            from sglang.srt.runtime_context import get_server_args

            value = getattr(get_server_args(), "kv_cache_dtype", None)
        except Exception:  # ValueError "Global server args is not set yet!", ImportError
            return None
        return value if isinstance(value, str) else None

    def _page_namespace(self) -> str:
        """The namespace of the G3 file and of G4: the model part, the layout, the KV dtype."""
        layout, dtype = self._page_format()
        if (layout is None or dtype is None) and not self._user_namespace:
            raise kvbm.UsageError(
                "KvbmStorage: the page layout and KV dtype are not known (no host pool registered"
                f"; layout {layout!r}, dtype {dtype!r}), so pages of another format could be "
                "served as this one's: register the host pool first, or set `namespace` in "
                "extra_config to a name that identifies the model, layout and KV dtype")
        parts = [self._user_namespace or self._default_namespace(self.storage_config)]
        if layout is not None:
            parts.append(f"layout={layout}")
        if dtype is not None:
            parts.append(f"dtype={dtype}")
        return "|".join(parts)

    # -- the manager, built once the page size and format are known ------------------------

    def _open_manager(self, page_bytes: int, directory: str, namespace: str,
                      remote_model: str, disk_bytes: int,
                      host_bytes: int) -> kvbm.KvBlockManager:
        """A manager of pages of page_bytes: G2, the persistent G3 file in `directory` under
        `namespace`, and G4 (keyed by remote_model) when remote_urls are set."""
        layout = kvbm.LayoutConfig(num_layers=1, outer_dim=1, page_size=1,
                                   inner_dim=page_bytes, dtype_bytes=1)
        cfg = kvbm.KvBlockManagerConfig(
            layout=layout,
            device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS,
            device=kvbm.TierConfig(blocks=self.device_blocks),
            host=kvbm.TierConfig(bytes=host_bytes),
            disk=kvbm.TierConfig(bytes=disk_bytes),
            disk_directory=directory,
            disk_persistent=True,
            disk_namespace=namespace,
            device_to_host=kvbm.OffloadMode.NONE,
        )
        if self.remote_urls:
            cfg.remote.urls = self.remote_urls
            cfg.remote.model = remote_model
            cfg.remote.dtype = self.remote_dtype
            cfg.remote.user_namespace = self.remote_user_namespace
            cfg.host_to_remote = kvbm.OffloadMode.WRITE_THROUGH
        return kvbm.KvBlockManager(cfg)

    def _manager(self, page_bytes: int) -> kvbm.KvBlockManager:
        with self._lock:
            if self.kv is None:
                namespace = self._page_namespace()
                self.kv = self._open_manager(page_bytes, self.disk_directory, namespace,
                                             self.remote_model or namespace, self.disk_bytes,
                                             self.host_bytes)
                if self._writer_directory is not None:
                    layout = kvbm.LayoutConfig(num_layers=1, outer_dim=1, page_size=1,
                                               inner_dim=page_bytes, dtype_bytes=1)
                    self._reader = kvbm.DiskPoolReader(self._writer_directory, layout, namespace)
                self.namespace = namespace
                self.page_bytes = page_bytes
            elif page_bytes != self.page_bytes:
                raise kvbm.UsageError(
                    f"KvbmStorage: a page of {page_bytes} bytes, "
                    f"but pages are {self.page_bytes} bytes")
            return self.kv

    def register_mem_pool_host(self, mem_pool_host) -> None:
        previous = self.mem_pool_host
        self.mem_pool_host = mem_pool_host
        if self.kv is not None and self._page_namespace() != self.namespace:
            self.mem_pool_host = previous
            raise kvbm.UsageError(
                f"KvbmStorage: pages are already kept under namespace {self.namespace!r}; a host "
                "pool of another layout or dtype must be registered before the first page")
        super().register_mem_pool_host(mem_pool_host)
        page = getattr(mem_pool_host, "get_dummy_flat_data_page", lambda: None)()
        if page is not None and _nbytes(page) > 0:
            self._manager(_nbytes(page))

    # -- the generic interface ----------------------------------------------------------

    def _new_page(self):
        """A page for get/batch_get without targets, of the type SGLang's own backends return:
        the host pool's flat page (its dtype) when one is registered, else page_bytes bytes as a
        torch uint8 tensor, a NumPy array only when torch does not import."""
        pool = self.mem_pool_host
        make = getattr(pool, "get_dummy_flat_data_page", None) if pool is not None else None
        if make is not None:
            page = make()
            if self.page_bytes is None or _nbytes(page) == int(self.page_bytes):
                return page
        try:
            import torch
        except ImportError:
            return np.empty(int(self.page_bytes), dtype=np.uint8)
        return torch.empty(int(self.page_bytes), dtype=torch.uint8)

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None):
        """Reads the page into target_location and returns it; None when absent or corrupt.
        Without a target: a new page (a torch tensor when torch imports, see _new_page)."""
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None):
        """Reads the longest stored prefix of `keys` into their targets; None from the first
        page that is absent (or fails its check) on."""
        if not keys:
            return []
        if target_locations is None:
            if self.page_bytes is None and self.mem_pool_host is None:
                return [None] * len(keys)
            target_locations = [self._new_page() for _ in keys]
        # A target kvbm cannot write in place (a strided or read-only view, a GPU tensor) gets
        # a staging page, copied into it afterwards: kvbm itself refuses such a destination.
        staged = {i: np.empty(_nbytes(t), np.uint8)
                  for i, t in enumerate(target_locations) if not _in_place(t)}
        targets = [staged.get(i, t) for i, t in enumerate(target_locations)]
        targets = [_as_bytes_buffer(t) for t in targets]
        kv = self._manager(_nbytes(targets[0]))
        hashes = kvbm.hash_keys(keys)
        n = kv.load(hashes, targets, chained=False)
        n += self._read_from_writer(hashes[n:], targets[n:])
        for i, page in staged.items():
            if i < n:
                _copy_back(target_locations[i], page)
        return [t if i < n else None for i, t in enumerate(target_locations)]

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        """Stores one page; True when kvbm holds it (stored now or before)."""
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """Stores the pages; True when kvbm holds every one of them."""
        if not keys:
            return True
        values = values if values is not None else target_locations
        if values is None:
            return False
        buffers = [_contiguous(v) for v in values]
        kv = self._manager(_nbytes(buffers[0]))
        return kv.store(kvbm.hash_keys(keys), buffers, chained=False) == len(keys)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """The number of leading keys stored (G1-G3, then G4 in one round trip)."""
        if not keys:
            return 0
        if self.kv is None:
            if self.page_bytes is None:
                return 0  # nothing stored or read yet, and nothing to open
            self._manager(int(self.page_bytes))  # a restarted process: its G3 file answers
        hashes = kvbm.hash_keys(keys)
        local = self.kv.present(hashes, chained=False)
        n = int(np.argmin(local > 0)) if not local.all() else len(keys)
        if n < len(keys) and self._reader is not None:
            n += self._writer_prefix(hashes[n:])
        if n == len(keys) or not self.remote_urls:
            return n
        return int(self.kv.probe(hashes, chained=False).total)

    # -- an MLA rank that is not SGLang's storage writer: the writer's G3 -----------------

    def _writer_prefix(self, hashes) -> int:
        """The number of leading hashes the writer's G3 holds, its index refreshed once when
        one misses and the last refresh is older than mla_refresh_s."""
        reader = self._reader
        n = reader.count_prefix(hashes)
        if n < len(hashes) and time.monotonic() - self._reader_refreshed >= self.mla_refresh_s:
            self._reader_refreshed = time.monotonic()
            reader.refresh()
            n = reader.count_prefix(hashes)
        return n

    def _read_from_writer(self, hashes, targets) -> int:
        """Reads what the local tiers lacked from the writer's G3: the number of leading pages
        read (each verified against its hash, layout, namespace and checksum)."""
        if self._reader is None or len(hashes) == 0:
            return 0
        if self._writer_prefix(hashes) == 0:
            return 0
        return int(self._reader.read(hashes, list(targets)))

    # -- the zero-copy interface ("interface_v1": 1), through the host pool ----------------

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Reads the longest stored prefix of `keys` into the host pool's pages. A page_first
        page goes straight from kvbm's block into the pool's memory (its K and V halves as two
        segments, an MLA page as one); other layouts through a flat staging page."""
        pool = self._host_pool()
        if not keys:
            return []
        direct = self._pages_in_place(pool, host_indices, len(keys))
        if direct is not None:
            kv = self._manager(sum(int(p.nbytes) for p in direct[0]))
            hashes = kvbm.hash_keys(keys)
            n = kv.load(hashes, direct, chained=False)
            n += self._read_from_writer(hashes[n:], direct[n:])
            return [i < n for i in range(len(keys))]
        pages = [pool.get_dummy_flat_data_page() for _ in keys]
        got = self.batch_get(keys, pages)
        out = []
        for i, page in enumerate(got):
            if page is None:
                out.append(False)
                continue
            pool.set_from_flat_data_page(host_indices[i * pool.page_size], page)
            out.append(True)
        return out

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Stores the host pool's pages; page_first pages are read in place (no copy)."""
        pool = self._host_pool()
        if not keys:
            return []
        direct = self._pages_in_place(pool, host_indices, len(keys))
        if direct is not None:
            kv = self._manager(sum(int(p.nbytes) for p in direct[0]))
            ok = kv.store(kvbm.hash_keys(keys), direct, chained=False) == len(keys)
            return [ok] * len(keys)
        pages = [pool.get_data_page(host_indices[i * pool.page_size], flat=True)
                 for i in range(len(keys))]
        ok = self.batch_set(keys, pages)
        return [ok] * len(keys)

    @classmethod
    def _pages_in_place(cls, pool, host_indices, n):
        """_page_in_place() of the first n pages at host_indices, or None unless every one is."""
        pages = [cls._page_in_place(pool, host_indices[i * pool.page_size]) for i in range(n)]
        return pages if all(p is not None for p in pages) else None

    @staticmethod
    def _page_in_place(pool, index):
        """The page at host token `index` as segments of the pool's own memory whose bytes, in
        order, are the flat page's (what batch_get/batch_set move), or None when the page is
        not laid out that way (layer_first: each layer's slice lies apart; the generic path
        copies it). A page_first MHA page is its K and V halves, an MLA page one range."""
        if getattr(pool, "layout", None) != "page_first":
            return None
        page = pool.get_data_page(int(index), flat=False)  # a view (basic slicing), no copy
        if getattr(page, "_base", None) is None or getattr(page, "device", None) is None or \
                page.device.type != "cpu":
            return None
        if page.is_contiguous():
            return (page,)
        parts = tuple(page[j] for j in range(page.shape[0]))
        return parts if all(p.is_contiguous() for p in parts) else None

    def _host_pool(self):
        if self.mem_pool_host is None:
            raise kvbm.UsageError("KvbmStorage: batch_*_v1 needs register_mem_pool_host() first")
        return self.mem_pool_host

    # -- a hybrid model's other host pools (SGLang's batch v2 interface) -------------------
    #
    # SGLang's HybridCacheController (hybrid SWA, Mamba/linear attention, ...) registers each
    # host pool of its HostPoolGroup by name (register_mem_host_pool_v2: "kv", "swa",
    # "mamba", ...), backs the KV pages up through batch_set/batch_set_v1 and every other
    # pool's pages through batch_set_v2, and asks batch_exists_v2 for the prefix every pool
    # can serve. A page of pool P under page hash H is another block than the KV page under
    # H: each pool has its own manager, whose G3 file lies in its own subdirectory
    # (pool-<name>) and whose namespace (G3 and G4) names the pool.

    def register_mem_host_pool_v2(self, host_pool, host_pool_name) -> None:
        name = self._pool_key(host_pool_name)
        with self._lock:
            built = self._pools.get(name)
        if built is not None and self._pool_namespace(name, host_pool) != built[1]:
            raise kvbm.UsageError(
                f"KvbmStorage: pool {name!r} already keeps pages under namespace "
                f"{built[1]!r}; a host pool of another layout or dtype cannot replace it")
        self.registered_pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        """Opens every registered pool's manager now, so that a restarted server's
        batch_exists_v2 finds what the last one stored (its G3 files are read at open)."""
        for name in list(self.registered_pools):
            if self._pool_key(name) != "kv":
                self._pool_manager(name)

    @staticmethod
    def _pool_key(name) -> str:
        """'swa' for PoolName.SWA and 'swa' alike."""
        return str(getattr(name, "value", name))

    def _registered_pool(self, name):
        for key, pool in self.registered_pools.items():
            if self._pool_key(key) == self._pool_key(name):
                return pool
        if self._pool_key(name) == "kv" and self.mem_pool_host is not None:
            return self.mem_pool_host
        raise kvbm.UsageError(
            f"KvbmStorage: no host pool {self._pool_key(name)!r} registered "
            "(register_mem_host_pool_v2 first)")

    def _pool_namespace(self, name: str, pool) -> str:
        """The model part (the TP shard included for Mamba state, which every rank holds its
        own shard of even where the KV is MLA), the pool's name, its layout and dtypes."""
        cfg = self.storage_config
        base = self._user_namespace or self._default_namespace(cfg, tp_sharded=name == "mamba")
        if name == "mamba" and self._user_namespace and getattr(cfg, "tp_size", 1) > 1:
            base += f"|tp{cfg.tp_rank}/{cfg.tp_size}"  # a `namespace` for MLA KV has no shard
        dtypes = [self._dtype_name(getattr(pool, a, None))
                  for a in ("dtype", "temporal_dtype")]
        dtype = "+".join(dict.fromkeys(d for d in dtypes if d))  # conv+temporal for Mamba
        return "|".join(p for p in (base, f"pool={name}",
                                    f"layout={getattr(pool, 'layout', None)}",
                                    f"dtype={dtype or None}"))

    def _pool_manager(self, name) -> kvbm.KvBlockManager:
        """The manager of pool `name`'s pages ('kv': the KV manager of the v1 interface)."""
        key = self._pool_key(name)
        with self._lock:  # the usual case: built already (no page made to learn its size)
            built = self.kv if key == "kv" else self._pools.get(key, (None,))[0]
        if built is not None:
            return built
        pool = self._registered_pool(name)
        page_bytes = _nbytes(pool.get_dummy_flat_data_page())
        if key == "kv":
            return self._manager(page_bytes)
        with self._lock:
            if key not in self._pools:
                namespace = self._pool_namespace(key, pool)
                directory = os.path.join(self.disk_directory, f"pool-{key}")
                os.makedirs(directory, exist_ok=True)
                sizes = dict(self.pool_bytes.get(key) or {})
                remote = f"{self.remote_model}|pool={key}" if self.remote_model else namespace
                kv = self._open_manager(page_bytes, directory, namespace, remote,
                                        int(sizes.get("disk_bytes", self.disk_bytes)),
                                        int(sizes.get("host_bytes", self.host_bytes)))
                self._pools[key] = (kv, namespace)
            return self._pools[key][0]

    def _pool_presence(self, name, keys: List[str]) -> List[bool]:
        """Whether pool `name` holds each key's page: the local tiers, then G4 (one probe per
        run of pages the local tiers lack)."""
        if not keys:
            return []
        kv = self._pool_manager(name)
        hashes = kvbm.hash_keys(keys)
        out = [bool(x) for x in kv.present(hashes, chained=False)]
        i = 0
        while self.remote_urls and i < len(out):
            if out[i]:
                i += 1
                continue
            held = int(kv.probe(hashes[i:], chained=False).total)
            out[i:i + held] = [True] * held
            i += held + 1
        return out

    @staticmethod
    def _restorable(policy: str, present: List[bool], trailing: int):
        """The prefix lengths (in pages) a pool with `present` pages can serve, by SGLang's
        hit policies: every page of the prefix, or its last `trailing` pages."""
        if policy == "all_pages":
            boundary = present.index(False) if False in present else len(present)
            return set(range(1, boundary + 1))
        if policy == "trailing_pages":
            return {p for p in range(1, len(present) + 1)
                    if all(present[max(0, p - trailing):p])}
        raise kvbm.UsageError(
            f"KvbmStorage: hit policy {policy!r} is not supported (all_pages, trailing_pages)")

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None):
        """The longest prefix of `keys` whose KV pages are stored and which every pool of
        pool_transfers can serve by its hit policy; per pool, the longest it can serve; and
        every restorable prefix length (a Mamba state exists only at some boundaries)."""
        from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransferResult

        kv_pages = self.batch_exists(keys, extra_info)
        hits = {PoolName.KV: kv_pages} if kv_pages else {}
        restorable = list(range(1, kv_pages + 1))
        for transfer in pool_transfers or []:
            if not restorable:
                break
            present = self._pool_presence(transfer.name, keys[:kv_pages])
            policy = str(getattr(transfer.hit_policy, "value", transfer.hit_policy))
            served = self._restorable(policy, present, max(1, len(transfer.keys or ())))
            if served:
                hits[transfer.name] = max(served)
            restorable = [p for p in restorable if p in served]
        return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)

    def _pool_pages(self, transfer):
        """(pool, keys, host index of each page) of a transfer, or None when its host indices
        are not one page per key (what SGLang's own backends refuse too)."""
        pool = self._registered_pool(transfer.name)
        keys = list(transfer.keys or [])
        step = int(getattr(pool, "page_size", 1) or 1)
        idx = transfer.host_indices
        if idx is None or int(idx.numel()) != len(keys) * step:
            _log.error("KvbmStorage: pool %s: %d keys but %s host indices (page size %d)",
                       self._pool_key(transfer.name), len(keys),
                       None if idx is None else int(idx.numel()), step)
            return None
        return pool, keys, [int(idx[i * step]) for i in range(len(keys))]

    def _pages_of(self, transfers, results):
        """(transfer, pool, keys, host index of each page) of each transfer with pages; a
        transfer without (no keys, or host indices not one page per key) is answered False for
        every key in `results` and skipped."""
        for transfer in transfers:
            found = self._pool_pages(transfer)
            if found is None or not found[1]:
                results[transfer.name] = [False] * len(transfer.keys or [])
                continue
            yield (transfer, *found)

    def batch_set_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        """Stores each transfer's pages of its host pool under its keys, in that pool's
        manager; per pool, whether each page is held."""
        results = {}
        for transfer, pool, keys, index in self._pages_of(transfers, results):
            pages = [_contiguous(pool.get_data_page(i, flat=True)) for i in index]
            kv = self._pool_manager(transfer.name)
            ok = kv.store(kvbm.hash_keys(keys), pages, chained=False) == len(keys)
            results[transfer.name] = [ok] * len(keys)
        return results

    def batch_get_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        """Reads the longest stored prefix of each transfer's keys into its host pool's pages;
        per pool, whether each page was read."""
        results = {}
        for transfer, pool, keys, index in self._pages_of(transfers, results):
            pages = [pool.get_dummy_flat_data_page() for _ in keys]
            staged = [p if _in_place(p) else np.empty(_nbytes(p), np.uint8) for p in pages]
            n = self._pool_manager(transfer.name).load(
                kvbm.hash_keys(keys), [_as_bytes_buffer(p) for p in staged], chained=False)
            for i in range(n):
                if staged[i] is not pages[i]:
                    _copy_back(pages[i], staged[i])
                pool.set_from_flat_data_page(index[i], pages[i])
            results[transfer.name] = [i < n for i in range(len(keys))]
        return results

    # -- housekeeping -------------------------------------------------------------------

    def _take_managers(self) -> list:
        """Takes every manager out of the backend: (manager, its directory), KV first."""
        with self._lock:
            taken = [(self.kv, self.disk_directory)] if self.kv is not None else []
            taken += [(kv, os.path.join(self.disk_directory, f"pool-{name}"))
                      for name, (kv, _) in self._pools.items()]
            self.kv, self._pools = None, {}
        return taken

    def clear(self) -> None:
        """Forgets every page of every pool: the managers are closed and their G3 files
        removed, then opened anew."""
        for kv, directory in self._take_managers():
            kv.close()
        for directory in [self.disk_directory] + [
                os.path.join(self.disk_directory, f"pool-{self._pool_key(n)}")
                for n in self.registered_pools if self._pool_key(n) != "kv"]:
            try:
                os.remove(os.path.join(directory, _G3_FILE))
            except FileNotFoundError:
                pass
        if self.page_bytes is not None:
            self._manager(int(self.page_bytes))
        self.on_host_pools_registered()

    def get_stats(self):
        return None

    def kvbm_stats(self, pool: Optional[str] = None) -> Optional[dict]:
        """kvbm's own counters (KvBlockManager.stats()) of the KV pages, or of host pool
        `pool` ('swa', 'mamba', ...); None before its first page."""
        if pool is None or self._pool_key(pool) == "kv":
            return self.kv.stats() if self.kv is not None else None
        with self._lock:
            entry = self._pools.get(self._pool_key(pool))
        return entry[0].stats() if entry is not None else None

    def close(self) -> None:
        """Waits for kvbm's writes to G3/G4 and closes every manager."""
        for kv, _ in self._take_managers():
            kv.drain()
            kv.close()
