"""kvbm: block-based KV cache management across memory tiers, from Python.

The C++ library (G1 device, G2 pinned host, G3 disk file, G4 Redis) through
nanobind bindings; docs/python.md is the guide. In short::

    import numpy as np, kvbm

    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=2, outer_dim=2, page_size=16, inner_dim=128),
        device=kvbm.TierConfig(blocks=64), host=kvbm.TierConfig(blocks=256),
        disk=kvbm.TierConfig(blocks=1024), disk_directory="/var/cache/kvbm",
        disk_persistent=True, disk_namespace="my-model@rev")
    kv = kvbm.KvBlockManager(cfg)
    _, hashes = kvbm.hash_tokens(prompt_tokens, kv.block_size)
    kv.store(hashes, pages, chained=True)        # pages: (n, kv.block_bytes) bytes
    n = kv.load(hashes, out, chained=True)       # the cached prefix, verified

Every call that may wait releases the GIL. Errors are kvbm.UsageError (a
ValueError: misuse, bad options) and kvbm.KvbmRuntimeError (a RuntimeError
with .kind and .code), carrying the C++ message.
"""

from . import _kvbm
from ._kvbm import (  # noqa: F401  (the public API)
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    DirectIo,
    DiskIoEngine,
    DiskPoolReader,
    DuplicatePolicy,
    EvictionPolicy,
    HybridKvBlockManager,
    HybridOnboardHandle,
    HybridProbe,
    ImmutableBlockG1,
    ImmutableBlockG2,
    ImmutableBlockG3,
    InstanceOverlap,
    KvBlockManager,
    KvEventFeed,
    KvIndexer,
    KvRouter,
    KvbmRuntimeError,
    LayoutKind,
    MutableBlockG1,
    MutableBlockG2,
    OffloadMode,
    OnboardCounts,
    OnboardPlan,
    OnboardHandle,
    RouteDecision,
    TierId,
    TransferHandle,
    TransferStatus,
    UsageError,
    hash_key,
    hash_keys,
    hash_tokens,
    salt,
    set_log_level,
)



def release(blocks):
    """Releases a request's blocks (in prefix order) last block first.

    A pool evicts its released blocks least recently released first; releasing
    the last block first makes eviction take a chain's tail before its head,
    so no cached block is cut off from its prefix (and routers that index
    chains, as vLLM evicts them, see every removal below a block they hold).
    The handles are empty afterwards; `blocks` itself is left as it is.
    """
    for block in reversed(blocks):
        block.release()


__all__ = [name for name in dir(_kvbm) if not name.startswith("_")] + [
    "release",
    "KvBlockManagerConfig",
    "LayoutConfig",
    "TierConfig",
    "OffloadPolicyConfig",
    "BatchConfig",
    "PipelineConfig",
    "RemoteTierConfig",
]


def _keyword_init(base):
    """A subclass of the bound struct `base` whose constructor takes its fields
    as keywords and refuses a name that is not one (as a typo would be)."""

    def __init__(self, **fields):
        base.__init__(self)
        for name, value in fields.items():
            if name.startswith("_") or not hasattr(base, name):
                raise TypeError(f"{base.__name__}: no option named {name!r}")
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if not hasattr(base, name):
            raise AttributeError(f"{base.__name__}: no option named {name!r}")
        base.__setattr__(self, name, value)

    return type(base.__name__, (base,), {
        "__init__": __init__,
        "__setattr__": __setattr__,
        "__doc__": base.__doc__,
        "__module__": __name__,
    })


LayoutConfig = _keyword_init(_kvbm.LayoutConfig)
TierConfig = _keyword_init(_kvbm.TierConfig)
OffloadPolicyConfig = _keyword_init(_kvbm.OffloadPolicyConfig)
BatchConfig = _keyword_init(_kvbm.BatchConfig)
PipelineConfig = _keyword_init(_kvbm.PipelineConfig)
RemoteTierConfig = _keyword_init(_kvbm.RemoteTierConfig)
KvBlockManagerConfig = _keyword_init(_kvbm.KvBlockManagerConfig)

__version__ = _kvbm.__version__  # KVBM_VERSION: project(VERSION) of CMakeLists.txt
