"""Builders of SGLang's own objects on the CPU, for tests/engines/smoke_test.py and
test_sglang_engine.py, with the KV dtype and the layout as parameters. Only
SGLang's classes, built the way SGLang builds them; nothing monkeypatched. Import it only where
sglang and torch import (the test module skips itself elsewhere).
"""

from __future__ import annotations

import json
import os
import tempfile

import torch

PAGE = 4  # tokens per SGLang page
NUM_KV_HEADS, HEAD_SIZE, NUM_LAYERS = 2, 16, 2
KV_LORA_RANK, QK_ROPE_HEAD_DIM = 32, 16
DEVICE_TOKENS = 64

# The tiny llama (tiny_llama.py): ServerArgs reads only its config.json.
from tiny_llama import write_model as write_tiny_llama  # noqa: E402,F401


def make_device_pool(kind, dtype=torch.bfloat16):
    """SGLang's device KV pool (MHATokenToKVPool / MLATokenToKVPool) in CPU memory."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool

    common = dict(layer_num=NUM_LAYERS, device="cpu", enable_memory_saver=False,
                  start_layer=0, end_layer=NUM_LAYERS)
    if kind == "MHA":
        return MHATokenToKVPool(DEVICE_TOKENS, PAGE, dtype, head_num=NUM_KV_HEADS,
                                head_dim=HEAD_SIZE, **common)
    return MLATokenToKVPool(DEVICE_TOKENS, PAGE, dtype, kv_lora_rank=KV_LORA_RANK,
                            qk_rope_head_dim=QK_ROPE_HEAD_DIM, **common)


def make_host_pool(dev, layout):
    """As sglang's hybrid_pool_assembler._build_mha_mla_host_pool builds it, on the CPU
    (pin_memory=False): host pool of twice the device pool's tokens."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    info = dev.get_device_pool_infos()[0].buffer_info
    capacity = dev.size if dev.host_capacity_tokens is None else dev.host_capacity_tokens
    common = dict(pin_memory=False, device="cpu", device_capacity_tokens=capacity,
                  start_layer=dev.start_layer, end_layer=dev.end_layer)
    if isinstance(dev, MHATokenToKVPool):
        return MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout,
                                    write_back_staging=dev.hicache_write_back_staging, **common)
    return MLATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, target_layer_num=dev.layer_num,
                                override_kv_cache_dim=dev.kv_cache_dim, **common)


def make_swa_pools(layout, mamba=False):
    """A hybrid SWA model's pools (full attention on layers 1 and 3, a sliding window on 0 and
    2): SGLang's SWAKVPool, and the host pool group hybrid_pool_assembler.build_hybrid_swa_group
    builds from it ("kv" anchor, "swa"), on the CPU; with `mamba`, also Mamba2 state on layers 4
    and 5 ("mamba"), as build_hybrid_mamba_swa_stack adds it. Returns (device KV pool, group,
    layer count)."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import (
        _swa_layer_mappings,
        build_pool_entry,
    )
    from sglang.srt.mem_cache.pool_host import HostPoolGroup
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    dev = SWAKVPool(size=DEVICE_TOKENS, size_swa=DEVICE_TOKENS // 2, page_size=PAGE,
                    dtype=torch.bfloat16, head_num=NUM_KV_HEADS, head_dim=HEAD_SIZE,
                    swa_attention_layer_ids=[0, 2], full_attention_layer_ids=[1, 3], device="cpu")
    full, swa = _swa_layer_mappings(dev)
    layers = 6 if mamba else max(full.keys() | swa.keys()) + 1
    group = HostPoolGroup([
        build_pool_entry(name=PoolName.KV, host_pool=make_host_pool(dev.full_kv_pool, layout),
                         device_pool=dev.full_kv_pool, layer_mapping=full,
                         transfer_layer_id_max=layers, is_anchor=True),
        build_pool_entry(name=PoolName.SWA, host_pool=make_host_pool(dev.swa_kv_pool, layout),
                         device_pool=dev.swa_kv_pool, layer_mapping=swa,
                         transfer_layer_id_max=layers),
    ])
    if mamba:
        group.add_entry(_mamba_entry(layout, [4, 5], layers))
    return dev.full_kv_pool, group, layers


def _mamba_entry(layout, layer_ids, layers):
    """The "mamba" pool entry: SGLang's MambaPool (Mamba2 state of `layer_ids`) and the
    MambaPoolHost build_mamba_host_pool makes of it (one state per slot), on the CPU."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
    from sglang.srt.mem_cache.memory_pool import MambaPool
    from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost

    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=32, n_groups=1,
                                    num_heads=2, head_dim=16, state_size=8, conv_kernel=4)
    mamba = MambaPool(size=8, spec_state_size=8, device="cpu", mamba_layer_ids=layer_ids,
                      cache_params=Mamba2CacheParams(shape=shape, layers=layer_ids))
    (info,) = mamba.get_device_pool_infos()
    host = MambaPoolHost(info.buffer_info, 2.0, 0, device_capacity=mamba.size, device="cpu",
                         pin_memory=False, layout=layout)
    return build_pool_entry(name=PoolName.MAMBA, host_pool=host, device_pool=mamba,
                            layer_mapping={lid: i for i, lid in enumerate(layer_ids)},
                            transfer_layer_id_max=layers)


def make_mamba_pools(layout="page_first"):
    """A hybrid Mamba2 model's pools (attention on layers 0 and 1, Mamba2 on 2 and 3): the KV
    pool and the host pool group build_hybrid_mamba_stack builds ("kv" anchor, "mamba"), on the
    CPU. Returns (device KV pool, group, layer count)."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import build_pool_entry
    from sglang.srt.mem_cache.pool_host import HostPoolGroup

    kv = make_device_pool("MHA")
    group = HostPoolGroup([
        build_pool_entry(name=PoolName.KV, host_pool=make_host_pool(kv, layout), device_pool=kv,
                         layer_mapping={0: 0, 1: 1}, transfer_layer_id_max=4, is_anchor=True),
        _mamba_entry(layout, [2, 3], 4),
    ])
    return kv, group, 4


def storage_config(**overrides):
    """HiCacheStorageConfig as HiCacheController._generate_storage_config fills it (TP 1)."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    fields = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                  is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                  model_name="tiny-llama")
    fields.update(overrides)
    return HiCacheStorageConfig(**fields)


class PublishedScheduler:
    """The process-wide config a SGLang scheduler publishes, and a gloo TP group of size 1
    (what HiCacheController needs); a context manager."""

    def __init__(self, model_dir, layout="page_first", kv_cache_dtype="auto", **server_args):
        self.model_dir, self.layout, self.kv_cache_dtype = model_dir, layout, kv_cache_dtype
        self.server_args = server_args  # more ServerArgs fields (hicache_storage_backend, ...)

    def __enter__(self):
        import torch.distributed as dist
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import ServerArgs

        args = ServerArgs(model_path=self.model_dir, device="cpu", skip_tokenizer_init=True,
                          page_size=PAGE, enable_hierarchical_cache=True,
                          hicache_mem_layout=self.layout, kv_cache_dtype=self.kv_cache_dtype,
                          **self.server_args)
        publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=None))
        fd, self.store = tempfile.mkstemp()
        os.close(fd)
        dist.init_process_group("gloo", init_method=f"file://{self.store}", rank=0, world_size=1)
        return dist.new_group([0], backend="gloo")

    def __exit__(self, *exc):
        import torch.distributed as dist
        from sglang.srt.runtime_context import reset_context

        dist.destroy_process_group()
        reset_context()
        if os.path.exists(self.store):  # torch's FileStore removes it when its last user leaves
            os.unlink(self.store)
