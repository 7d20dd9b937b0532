"""kvbm's KvRouter on router_compare's cluster model equals kvbm-replay, figure for figure.

tools/router_compare/ compares kvbm's router with SGLang's and Dynamo's on one
Python model of kvbm-replay's cluster (cluster_model.py); kvbm's router runs
there through the bindings (kvbm.KvRouter fed by a kvbm.KvIndexer from the
model's events). Here the built kvbm-replay runs the first requests of the
shipped trace with `--router kv` and `--router round_robin` at 2, 4 and 8
instances, G1 only and G1 + G2, and the model must give exactly its figures:
every instance's requests, G1 and G2 hit blocks and computed tokens, the
prefix blocks the router predicted, and the TTFT mean, p50, p90 and p99 (the
same doubles, not approximately). docs/router.md has the full trace's.

KVBM_REPLAY names the binary (scripts/test.sh sets it when build/release has
one); KVBM_ROUTER_MODEL_REQUESTS the prefix length (default 2,000).
"""

import os
import sys
from pathlib import Path

import pytest

import kvbm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "router_compare"))
import cluster_model  # noqa: E402
from skips import skip_or_fail  # noqa: E402

REPLAY = os.environ.get("KVBM_REPLAY") or str(ROOT / "build" / "release" / "tools" / "replay" /
                                              "kvbm-replay")
REQUESTS = int(os.environ.get("KVBM_ROUTER_MODEL_REQUESTS", "2000"))
TRACE = ROOT / "examples" / "data" / "conversation_trace.jsonl"


@pytest.fixture(scope="module")
def replay():
    if not os.access(REPLAY, os.X_OK):
        skip_or_fail(f"no kvbm-replay at {REPLAY} (build target kvbm-replay of the release "
                    "preset, or set KVBM_REPLAY)")
    return REPLAY


@pytest.fixture(scope="module")
def trace():
    return cluster_model.load_trace(str(TRACE), limit=REQUESTS)


@pytest.mark.parametrize("tiers", list(cluster_model.TIERS))
@pytest.mark.parametrize("instances", [2, 4, 8])
@pytest.mark.parametrize("policy", ["kv", "round_robin"])
def test_model_with_kvbm_router_equals_kvbm_replay(replay, trace, policy, instances, tiers):
    g2 = cluster_model.TIERS[tiers]
    result = cluster_model.run_replay(replay, str(TRACE), instances, g2, policy, REQUESTS)
    assert result["requests"] == len(trace)
    expected = cluster_model.replay_figures(result)
    rate = result["cluster"]["prefill_tokens_per_s"]
    model = cluster_model.simulate(trace, instances, g2, rate, cluster_model.KvbmRouter(policy))
    got = cluster_model.model_figures(model)
    assert cluster_model.differences(expected, got) == []
    # Not a vacuous match: every instance served, and the kv router found prefixes.
    assert all(expected["requests"])
    assert sum(expected["hit_blocks_G1"]) > 0
    if g2:
        assert sum(expected["hit_blocks_G2"]) > 0
    if policy == "kv":
        assert expected["predicted_prefix_blocks"] > 0


def test_the_comparison_notices_a_model_that_differs(replay, trace, monkeypatch):
    """A model one G1 block smaller than kvbm-replay's is caught (the check can fail)."""
    result = cluster_model.run_replay(replay, str(TRACE), 4, 0, "kv", REQUESTS)
    rate = result["cluster"]["prefill_tokens_per_s"]
    monkeypatch.setattr(cluster_model, "G1_BLOCKS", cluster_model.G1_BLOCKS - 1)
    model = cluster_model.simulate(trace, 4, 0, rate, cluster_model.KvbmRouter("kv"))
    diff = cluster_model.differences(cluster_model.replay_figures(result),
                                     cluster_model.model_figures(model))
    assert any(d.startswith("hit_blocks_G1") for d in diff), diff


def test_the_model_is_deterministic(trace):
    """Two runs of the model give the same doubles (the report's figures repeat exactly)."""
    runs = [cluster_model.model_figures(cluster_model.simulate(
        trace[:500], 4, 10000, 30906.0, cluster_model.KvbmRouter("kv"))) for _ in range(2)]
    assert runs[0] == runs[1]


def test_events_built_in_python_feed_the_index():
    """kvbm.BlockStored / BlockRemoved built in Python, as the model builds them."""
    index = kvbm.KvIndexer()
    a = index.add_instance("a")
    stored = kvbm.BlockStored([11, 12, 13], parent_block_hash=None, medium="GPU", block_size=16)
    assert stored.block_hashes == [11, 12, 13] and stored.medium == "GPU"
    assert stored.parent_block_hash is None and stored.block_size == 16
    g2 = kvbm.BlockStored([13], parent_block_hash=12, medium="CPU")
    assert index.apply(a, 0, [stored, g2, kvbm.BlockRemoved([13], medium="GPU")])[0] == "applied"
    (o,) = index.overlaps([11, 12, 13])
    assert o.prefix_blocks == 3 and o.per_tier["G1"] == 2 and o.per_tier["G2"] == 1
    assert index.apply(a, 1, [kvbm.AllBlocksCleared()])[0] == "applied"
    assert index.overlaps([11])[0].prefix_blocks == 0
    with pytest.raises(kvbm.UsageError, match="block_hashes"):
        kvbm.BlockStored([-1])
    with pytest.raises(kvbm.UsageError, match="block_hashes"):
        kvbm.BlockRemoved([1.5])
