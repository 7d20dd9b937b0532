"""kvbm's HybridBlockManagerG1 against vLLM 0.33.0's real KVCacheManager, step by step.

tests/engines/hybrid_compare.py drives both with the same hybrid KVCacheConfig (kvbm's groups
read from vLLM's objects by kvbm.groups.groups_from_vllm) on the first 2,000 requests of the
shipped trace (KVBM_STRESS_SCALE scales the count), requests finishing and new ones arriving:
full + sliding window, full + chunked local, full + Mamba ("align", kvbm's
SnapshotPolicy.step_end()), and full attention at 32 tokens per block beside a sliding window at
16, each prefilling 64 tokens a step. With pools that hold the whole run, every
request's computed prefix, every computed count and every allocation's outcome are equal on
both sides, and kvbm holds exactly as many blocks of each group as vLLM at every step
(docs/hybrid.md, "Compared with vLLM", says why equal and when they part).

    PYTHONWARNINGS=ignore::DeprecationWarning \
        build/engines-venv/bin/python -m pytest -q tests/engines/test_hybrid_vs_vllm.py
"""

import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from skips import skip_or_fail  # noqa: E402  (tests/python/skips.py, on the path by conftest)

import hybrid_compare as hc  # noqa: E402

ROOMY = 200_000  # vLLM blocks: more than the run ever holds, so nothing is evicted


def _requirements():
    for module in ("vllm", "kvbm"):
        if importlib.util.find_spec(module) is None:
            skip_or_fail(f"{module} not importable: bash scripts/engines_env.sh builds the venv")
    import kvbm

    if not hasattr(kvbm._kvbm, "HybridBlockManagerG1"):
        skip_or_fail("kvbm without HybridBlockManagerG1: reinstall it (scripts/engines_env.sh)")
    if hc.trace_path() is None:
        skip_or_fail("no trace: the shipped conversation_trace.jsonl (KVBM_TRACE) is missing")


def _requests():
    scale = float(os.environ.get("KVBM_STRESS_SCALE", "1"))
    if scale < 1:
        skip_or_fail("KVBM_STRESS_SCALE < 1: the comparison needs at least 2,000 requests")
    return int(2000 * scale)


@pytest.fixture(scope="module")
def records():
    _requirements()
    return hc.load_trace(_requests())


@pytest.mark.parametrize("name", list(hc.MODELS))
def test_groups_from_real_vllm_config(name):
    """groups_from_vllm reads vLLM's own objects: kinds, windows, block sizes, page bytes."""
    _requirements()
    import kvbm.groups

    specs = hc.MODELS[name][0]
    config = hc.kv_cache_config(specs(), 64)
    groups = kvbm.groups.groups_from_vllm(config)
    assert len(groups) == len(config.kv_cache_groups)
    kinds = {"FullAttentionSpec": "full", "SlidingWindowSpec": "swa",
             "ChunkedLocalAttentionSpec": "chunk", "MambaSpec": "state"}
    for i, (g, vg) in enumerate(zip(groups, config.kv_cache_groups)):
        spec = vg.kv_cache_spec
        label = kinds[type(spec).__name__]
        label += str(getattr(spec, "sliding_window", None) or
                     getattr(spec, "attention_chunk_size", None) or "")
        assert (g.id, g.kind_label(), g.tokens_per_block) == (i, label, spec.block_size)
        assert g.bytes_per_block == spec.page_size_bytes * len(vg.layer_names)
        assert g.layers == [i]


@pytest.mark.parametrize("name", list(hc.MODELS))
def test_equal_to_vllm_step_by_step(name, records):
    run = hc.Compare(name, ROOMY).run(records)  # raises Mismatch at the first difference
    assert run.prompt_tokens > 0 and run.hit["vllm"] == run.hit["kvbm"] > 0
    assert run.held["vllm"] == run.held["kvbm"]
    print(run.report())


def test_the_comparison_sees_a_wrong_window(records):
    """The lockstep fails when kvbm's model differs from vLLM's: a window of 144, not 128."""
    import kvbm.groups

    run = hc.Compare("full+swa128", ROOMY)
    full, swa = run.groups
    wrong = kvbm.groups.KvCacheGroupSpec.sliding_window(1, 144, swa.tokens_per_block,
                                                        swa.bytes_per_block, swa.layers)
    run.groups = [full, wrong]
    run.km = kvbm.groups.HybridBlockManagerG1(run.groups, run.kvbm_blocks)
    with pytest.raises(hc.Mismatch):
        run.run(records[:300])


def test_the_comparison_sees_every_block_snapshots_in_align_mode(records):
    """With 64-token steps, every_block() takes and registers the states inside a step, which an
    align-mode engine never writes: kvbm holds more Mamba blocks than vLLM and the run fails."""
    run = hc.Compare("full+mamba", ROOMY, policy="every_block")
    with pytest.raises(hc.Mismatch, match="group 1 holds"):
        run.run(records[:50])
