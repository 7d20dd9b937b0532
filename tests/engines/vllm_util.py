"""vLLM's own objects, built on the CPU the way vLLM builds them (shared by smoke_test.py and
test_vllm_engine.py). Import only inside the engines venv, after VLLM_TARGET_DEVICE is set
(this module sets it too, before vllm is imported).

- make_vllm_config: VllmConfig from EngineArgs, as `vllm serve --kv-transfer-config ...` does;
- make_kv_cache_config: the scheduler's KVCacheConfig from the specs the workers would report,
  the KV layout resolved by vLLM's resolve_kv_cache_layout as the engine core does;
- step: the end of one scheduler step (on_schedule_end), as OffloadingConnectorScheduler does.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

# The tiny llama (tiny_llama.py): vLLM reads only its config.json (load_format="dummy").
from tiny_llama import TINY_LLAMA, write_model  # noqa: E402,F401
BLOCK_SIZE = 16  # tokens per vLLM block
NUM_KV_HEADS, HEAD_SIZE, NUM_LAYERS = 2, 16, 2


def make_vllm_config(model_dir, extra_config, *, kv_events=False, **engine_args):
    """VllmConfig the way `vllm serve --kv-transfer-config ...` builds it. `engine_args` are
    further EngineArgs (dtype=, tensor_parallel_size=, ...); kv_events=True turns vLLM's
    global KV cache events on (KVEventsConfig, publisher "null": nothing is sent)."""
    from vllm.config import KVEventsConfig, KVTransferConfig
    from vllm.engine.arg_utils import EngineArgs

    if kv_events:
        engine_args["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="null")
    args = EngineArgs(
        model=str(model_dir),
        skip_tokenizer_init=True,
        load_format="dummy",
        max_model_len=256,
        block_size=BLOCK_SIZE,
        enforce_eager=True,
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config=extra_config,
        ),
        **engine_args,
    )
    return args.create_engine_config()


def make_kv_cache_config(vllm_config, num_blocks=64, layout="LBNHC", sliding_window=None):
    """The scheduler's KVCacheConfig, built by the engine core's own functions from the specs
    the workers would report for the model (one full-attention spec per layer, in the model's
    dtype, the KV heads of one TP rank); `layout` is what the workers' backends support.
    With `sliding_window` = W, the odd layers report a SlidingWindowSpec of W tokens instead
    (a hybrid model: vLLM makes a full-attention group and a sliding-window group)."""
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    mc, pc = vllm_config.model_config, vllm_config.parallel_config
    shape = dict(block_size=BLOCK_SIZE, num_kv_heads=mc.get_num_kv_heads(pc),
                 head_size=mc.get_head_size(), dtype=mc.dtype)
    full = FullAttentionSpec(**shape)
    window = full if sliding_window is None else SlidingWindowSpec(
        **shape, sliding_window=sliding_window)
    layers = mc.get_num_layers(pc)
    specs = [{f"model.layers.{i}.self_attn.attn": window if i % 2 else full
              for i in range(layers)}]
    resolve_kv_cache_layout(vllm_config, [[layout]], list(specs[0].values()))
    groups = get_global_kv_cache_groups(vllm_config, specs)
    memory = num_blocks * full.page_size_bytes * layers
    configs = get_kv_cache_configs(vllm_config, specs, [memory], groups)
    return generate_scheduler_kv_cache_config(configs)


def offloading_config(vllm_config, kv_cache_config=None, **kv_cache_kwargs):
    """vLLM's OffloadingConfig, by the connector's own build_offloading_config."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        build_offloading_config,
    )

    if kv_cache_config is None:
        kv_cache_config = make_kv_cache_config(vllm_config, **kv_cache_kwargs)
    return build_offloading_config(vllm_config, kv_cache_config)


def step(manager, new=()):
    """The end of one scheduler step (the manager's lock held by the caller)."""
    from vllm.v1.kv_offload.base import ScheduleEndContext

    manager.on_schedule_end(ScheduleEndContext(new_req_ids=list(new), preempted_req_ids=[]))


__all__ = ["TINY_LLAMA", "BLOCK_SIZE", "NUM_KV_HEADS", "HEAD_SIZE", "NUM_LAYERS", "write_model",
           "make_vllm_config", "make_kv_cache_config", "offloading_config", "step", "torch"]
