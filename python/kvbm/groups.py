"""KV cache groups of hybrid models (docs/hybrid.md), and vLLM's KVCacheConfig read into them.

A vLLM KVCacheConfig (vllm.v1.kv_cache_interface) lists its groups as
KVCacheGroupSpec(layer_names, kv_cache_spec). groups_from_vllm() reads the
fields that decide each group's geometry from the real objects (no vLLM import
here: the spec classes are recognised by name along their MRO) into
kvbm._kvbm.vllm_spec values and calls the C++ conversion (from_vllm() of
kvbm/groups/vllm_kv_cache_spec.h)::

    groups = kvbm.groups.groups_from_vllm(kv_cache_config)
    m = kvbm.groups.HybridBlockManagerG1(groups, block_counts=[...])       # G1 only
    m = kvbm.groups.HybridKvBlockManager(base_config, groups)             # G1-G4 per group

A spec class kvbm has no row for (CrossAttentionSpec, CircularBufferSpec, ...)
raises kvbm.UsageError naming it.
"""

from ._kvbm import (  # noqa: F401  (the public API of this module)
    AttentionKind,
    HybridBlockManagerG1,
    HybridKvBlockManager,
    HybridOnboardHandle,
    HybridProbe,
    HybridRequestG1,
    KvCacheGroupSpec,
    PrefixHitG1,
    SnapshotPolicy,
    UsageError,
    alignment_tokens,
    hash_block_size,
    validate_groups,
)
from ._kvbm import vllm_spec

_ATTENTION = ("FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec")
_REFUSED = ("CrossAttentionSpec", "EncoderOnlyAttentionSpec", "CircularBufferSpec")


def _kind(spec):
    """The vLLM spec class name kvbm converts `spec` as: its own or its nearest base's."""
    names = [c.__name__ for c in type(spec).__mro__]
    for name in names:
        if name in _REFUSED:
            break
        if name in _ATTENTION or name in ("MLAAttentionSpec", "MambaSpec"):
            return name
    raise UsageError(
        f"groups_from_vllm: {type(spec).__name__} has no kvbm group kind "
        "(docs/hybrid.md, 'vLLM's other kinds')"
    )


def _itemsize(dtype):
    size = getattr(dtype, "itemsize", None)
    if size is None:
        raise UsageError(f"groups_from_vllm: dtype {dtype!r} has no itemsize")
    return int(size)


def _shape(spec):
    return vllm_spec.AttentionShape(
        block_size=int(spec.block_size),
        num_kv_heads=int(spec.num_kv_heads),
        head_size=int(spec.head_size),
        head_size_v=int(getattr(spec, "head_size_v", None) or 0),
        dtype=str(spec.dtype).removeprefix("torch."),
        dtype_bytes=_itemsize(spec.dtype),
        page_size_padded=getattr(spec, "page_size_padded", None),
    )


def spec_from_vllm(spec):
    """Returns the kvbm._kvbm.vllm_spec value of one real vLLM KVCacheSpec."""
    kind = _kind(spec)
    if kind == "SlidingWindowSpec":
        return vllm_spec.SlidingWindowSpec(_shape(spec), int(spec.sliding_window))
    if kind == "ChunkedLocalAttentionSpec":
        return vllm_spec.ChunkedLocalAttentionSpec(_shape(spec), int(spec.attention_chunk_size))
    if kind == "MambaSpec":
        states = [
            vllm_spec.MambaState([int(d) for d in shape], _itemsize(dtype))
            for shape, dtype in zip(spec.shapes, spec.dtypes)
        ]
        mamba_type = getattr(spec.mamba_type, "name", spec.mamba_type)
        return vllm_spec.MambaSpec(
            int(spec.block_size),
            states,
            page_size_padded=spec.page_size_padded,
            mamba_type=str(mamba_type).lower(),
            mamba_cache_mode=str(spec.mamba_cache_mode),
            num_speculative_blocks=int(spec.num_speculative_blocks),
        )
    window = getattr(spec, "sliding_window", None)
    chunk = getattr(spec, "attention_chunk_size", None)
    return vllm_spec.FullAttentionSpec(
        _shape(spec),
        mla=kind == "MLAAttentionSpec",
        sliding_window=None if window is None else int(window),
        attention_chunk_size=None if chunk is None else int(chunk),
    )


def config_from_vllm(kv_cache_config):
    """Returns the kvbm._kvbm.vllm_spec.KVCacheConfig of a real vLLM KVCacheConfig."""
    groups = [
        vllm_spec.KVCacheGroupSpec(list(g.layer_names), spec_from_vllm(g.kv_cache_spec))
        for g in kv_cache_config.kv_cache_groups
    ]
    return vllm_spec.KVCacheConfig(int(kv_cache_config.num_blocks), groups)


def groups_from_vllm(kv_cache_config):
    """Returns the KvCacheGroupSpec list (GroupId i for vLLM's group i) of a vLLM KVCacheConfig."""
    return vllm_spec.from_vllm(config_from_vllm(kv_cache_config))
