"""kvbm.groups: KV cache group specs, vLLM's shapes and HybridBlockManagerG1 from Python.

The real extension, no engine needed: vLLM's shapes enter as kvbm.groups.vllm_spec values;
tests/engines/test_hybrid_vs_vllm.py converts real vLLM KVCacheConfig objects.
"""

import pytest

import kvbm
from kvbm import groups as kg
from kvbm.groups import KvCacheGroupSpec as Spec

B = 16


def tokens(n, start=0):
    return list(range(start + 1, start + n + 1))


def hashes_of(m, toks):
    return kvbm.hash_tokens(toks, m.hash_block_size)[1]


def full_swa(blocks=64, window=64):
    return kg.HybridBlockManagerG1(
        [Spec.full(0, B, 4096, [0, 2]), Spec.sliding_window(1, window, B, 4096, [1, 3])], blocks)


def run(m, toks, step=B * 4):
    """One request over `toks` (prefill in steps of `step`), finished; returns its hit."""
    h = hashes_of(m, toks)
    hit = m.find_prefix(h, len(toks) - 1)
    cut = hit.tokens
    r = m.start_request(hit)
    while r.computed_tokens < len(toks):
        end = min(len(toks), r.computed_tokens + step)
        assert m.allocate(r, end)
        m.commit(r, h, end)
    m.finish(r, h)
    assert m.audit() == ""
    return cut


def test_group_spec_fields_and_labels():
    s = Spec.sliding_window(1, 128, B, 2048, [1, 3])
    assert (s.id, s.kind, s.window_tokens, s.tokens_per_block) == (
        1, kg.AttentionKind.SLIDING_WINDOW, 128, B)
    assert s.layers == [1, 3] and s.kind_label() == "swa128"
    assert s.namespace_for("m") == "m/group:1:swa128:16"
    assert s == Spec.sliding_window(1, 128, B, 2048, [1, 3])
    assert s != Spec.sliding_window(1, 64, B, 2048, [1, 3])


def test_invalid_specs_raise_usage_error():
    with pytest.raises(kvbm.UsageError):
        Spec.chunked_local(0, 40, B, 1024, [0])  # a chunk not a multiple of the block size
    with pytest.raises(kvbm.UsageError):
        kg.validate_groups([Spec.full(0, B, 1, [0]), Spec.full(1, B, 1, [0])])  # a layer twice
    with pytest.raises(kvbm.UsageError):
        kg.HybridBlockManagerG1([Spec.full(0, B, 1, [0])], [8, 8])  # two counts, one group


def test_block_sizes_gcd_and_lcm():
    g = [Spec.full(0, 32, 1, [0]), Spec.sliding_window(1, 128, 16, 1, [1])]
    assert (kg.hash_block_size(g), kg.alignment_tokens(g)) == (16, 32)
    m = kg.HybridBlockManagerG1(g, 32)
    assert (m.hash_block_size, m.alignment_tokens, m.group_count) == (16, 32, 2)


def test_prefix_hit_reads_only_the_window_tail():
    m = full_swa(window=64)
    toks = tokens(200)
    assert run(m, toks) == 0
    hit = m.find_prefix(hashes_of(m, toks), len(toks) - 1)
    # cut 192 = 12 blocks; the window needs ceil(63 / 16) = 4 blocks before the cut.
    assert hit.tokens == 192
    assert hit.ranges == [(0, 12), (8, 12)] and hit.held_blocks == [12, 4]
    assert len(set(hit.block_ids(0))) == 12
    r = m.start_request(hit)
    assert r.computed_tokens == 192 and r.held_range(1) == (8, 12)
    assert [r.held_blocks(g) for g in range(2)] == [12, 4]
    assert r.registered_blocks(0) == 12
    m.finish(r)
    assert r.group_count == 0 and m.audit() == ""


def test_window_group_releases_blocks_out_of_reach():
    m = full_swa(blocks=200, window=64)
    toks = tokens(1024)
    h = hashes_of(m, toks)
    r = m.start_request()
    most = 0
    for end in range(B, len(toks) + 1, B):
        assert m.allocate(r, end)
        m.commit(r, h, end)
        most = max(most, r.held_blocks(1))
    assert r.held_blocks(0) == 64 and most <= 6  # 4 in the window, the one written, one more
    m.release_out_of_reach(r, len(toks))
    assert r.held_range(1) == ((1024 - 63) // B, 64)
    m.finish(r, h)
    assert m.audit() == ""
    counts = m.pool_counts(1)
    assert counts["in_use"] == 0 and counts["reset"] + counts["inactive"] == counts["total"]


def test_allocate_is_all_or_nothing():
    m = kg.HybridBlockManagerG1(
        [Spec.full(0, B, 1, [0]), Spec.sliding_window(1, 64, B, 1, [1])], [4, 100])
    a, r = m.start_request(), m.start_request()
    assert m.allocate(a, 2 * B)
    assert not m.allocate(r, 3 * B)  # group 0 has 2 blocks left: nothing taken anywhere
    assert [r.held_blocks(g) for g in range(2)] == [0, 0]
    assert m.pool_counts(1)["in_use"] == 2 and m.pool_counts(0)["reset"] == 2
    assert m.allocate(r, 2 * B)
    m.finish(a)
    m.finish(r)
    assert m.audit() == ""


def test_recurrent_state_hit_is_one_snapshot_per_policy():
    g = [Spec.full(0, B, 1, [0]), Spec.recurrent_state(1, B, 8192, [1])]
    # A request of 100 tokens, then one sharing its first 80 (5 blocks): every_block() has the
    # snapshot after 80 tokens, every_kth_block(4) the one after 64, request_end() only the one
    # after 96, past the shared prefix.
    for policy, cut in ((kg.SnapshotPolicy.every_block(), 80),
                        (kg.SnapshotPolicy.every_kth_block(4), 64),
                        (kg.SnapshotPolicy.request_end(), 0)):
        m = kg.HybridBlockManagerG1(g, 64, snapshot_policy=policy)
        toks = tokens(100)
        run(m, toks, step=B)
        longer = toks[:80] + tokens(50, start=1000)
        hit = m.find_prefix(hashes_of(m, longer), len(longer) - 1)
        assert hit.tokens == cut, policy.name
        assert hit.held_blocks == [cut // B, 1 if cut else 0]


def test_request_end_snapshot_serves_the_next_turn():
    m = kg.HybridBlockManagerG1([Spec.full(0, B, 1, [0]), Spec.recurrent_state(1, B, 1, [1])], 64,
                                snapshot_policy=kg.SnapshotPolicy.request_end())
    toks = tokens(96)
    run(m, toks, step=B)
    nxt = toks + tokens(40, start=500)
    assert m.find_prefix(hashes_of(m, nxt), len(nxt) - 1).tokens == 96


def test_step_end_takes_only_each_steps_end_state():
    m = kg.HybridBlockManagerG1([Spec.full(0, B, 1, [0]), Spec.recurrent_state(1, B, 1, [1])], 64,
                                snapshot_policy=kg.SnapshotPolicy.step_end())
    assert m.snapshot_policy.name == "step_end"
    toks = tokens(6 * B)
    h = hashes_of(m, toks)
    r = m.start_request()
    assert m.allocate(r, 4 * B)
    assert r.held_blocks(1) == 1 and r.held_range(1) == (0, 4)
    ids = r.block_ids(1)
    assert ids[:3] == [None, None, None] and ids[3] is not None
    assert not r.holds_block(1, 0) and r.holds_block(1, 3)
    m.commit(r, h, 4 * B)
    assert m.allocate(r, 6 * B)
    assert r.held_blocks(1) == 2  # the state the step reads (block 3) and block 5
    m.commit(r, h, 6 * B)
    m.finish(r, h)
    assert m.pool_counts(1)["inactive"] == 2  # blocks 3 and 5, none inside a step
    assert m.find_prefix(h, 5 * B).tokens == 4 * B
    assert m.audit() == ""


def test_group_keys_differ_between_groups():
    m = full_swa()
    h = hashes_of(m, tokens(64))
    k0, k1 = m.group_hashes(0, h), m.group_hashes(1, h)
    assert len(k0) == len(k1) == 4 and not set(k0) & set(k1)
    assert m.group_hashes(0, h, 1, 3) == k0[1:3]


def test_vllm_spec_values_convert_through_from_vllm():
    v = kg.vllm_spec
    shape = v.AttentionShape(block_size=B, num_kv_heads=2, head_size=64, dtype="bfloat16",
                             dtype_bytes=2)
    mamba = v.MambaSpec(B, [v.MambaState([4, 128], 2), v.MambaState([2, 32, 64], 2)],
                        mamba_cache_mode="align")
    cfg = v.KVCacheConfig(100, [
        v.KVCacheGroupSpec(["model.layers.0.attn", "model.layers.2.attn"],
                           v.FullAttentionSpec(shape)),
        v.KVCacheGroupSpec(["model.layers.1.attn"], v.SlidingWindowSpec(shape, 128)),
        v.KVCacheGroupSpec(["model.layers.3.mixer"], mamba),
        v.KVCacheGroupSpec(["model.layers.4.attn"], v.ChunkedLocalAttentionSpec(shape, 64)),
    ])
    g = v.from_vllm(cfg)
    assert [s.kind_label() for s in g] == ["full", "swa128", "state", "chunk64"]
    assert [s.id for s in g] == [0, 1, 2, 3]
    assert g[0].layers == [0, 2] and g[2].layers == [3]
    page = B * 2 * (64 + 64) * 2
    assert v.attention_page_size_bytes(shape) == page
    assert g[0].bytes_per_block == 2 * page and g[1].bytes_per_block == page
    assert g[2].bytes_per_block == v.mamba_page_size_bytes(mamba) == (4 * 128 + 2 * 32 * 64) * 2
    # A window recorded on FullAttentionSpec (vLLM's hybrid allocator off) keeps every token.
    kept = v.from_vllm(v.KVCacheConfig(1, [
        v.KVCacheGroupSpec(["layers.0"], v.FullAttentionSpec(shape, sliding_window=128))]))
    assert kept[0].kind == kg.AttentionKind.FULL
    with pytest.raises(kvbm.UsageError, match="none"):
        v.from_vllm(v.KVCacheConfig(1, [v.KVCacheGroupSpec(
            ["layers.0"], v.MambaSpec(B, [v.MambaState([4], 2)], mamba_cache_mode="none"))]))
