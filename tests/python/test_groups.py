"""kvbm.groups: KV cache group specs, vLLM's shapes, HybridBlockManagerG1 and
HybridKvBlockManager (the groups over G1-G4) from Python.

The real extension, no engine needed: vLLM's shapes enter as kvbm.groups.vllm_spec values;
tests/engines/test_hybrid_vs_vllm.py converts real vLLM KVCacheConfig objects.
"""

import shutil
import threading

import numpy as np
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


# --------------------------------------------------------------------------- HybridKvBlockManager
# A full + sliding-window (128 tokens) model through G2 and G3, with real files: every block's
# bytes are a pattern of its group key, so a block served for the wrong group or position shows.

PROMPT = 40  # blocks of B tokens
BLOCK_BYTES = 1024


def full_swa_groups(window=128):
    return [Spec.full(0, B, BLOCK_BYTES, [0]),
            Spec.sliding_window(1, window, B, BLOCK_BYTES, [1])]


def hybrid_kv(directory, g1=48, g2=256, g3=0, persistent=False, groups=None, remote=None,
              pipeline=None, **options):
    """A HybridKvBlockManager with g1/g2/g3 blocks per group (0: no such tier); G4 on the
    Redis at `remote` when given; `pipeline` the write-through pipelines' PipelineConfig."""
    base = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=1, outer_dim=1, page_size=B, inner_dim=64,
                                 dtype_bytes=1),
        device=kvbm.TierConfig(blocks=1), host=kvbm.TierConfig(blocks=1 if g2 else 0),
        disk=kvbm.TierConfig(blocks=1 if g3 else 0), disk_directory=str(directory),
        disk_direct_io=kvbm.DirectIo.OFF, disk_persistent=persistent,
        disk_namespace="model-a@1")
    if pipeline is not None:
        base.pipeline = pipeline
    if remote:
        base.remote.urls = [remote]
        base.remote.model = "model-a@1"
    groups = groups or full_swa_groups()
    return kvbm.HybridKvBlockManager(base, groups, group_blocks=[[g1, g2, g3]] * len(groups),
                                     **options)


def pattern(key, n=BLOCK_BYTES):
    return np.random.default_rng(key).integers(0, 256, size=n, dtype=np.uint8)


def serve_kv(m, toks, step=64):
    """One request over `toks` from its hit (onboarded from any tier; its bytes checked) to its
    end, every block written with pattern(its group key); returns the hit's tokens."""
    h = hashes_of(m, toks)
    keys = [m.group_hashes(g, h) for g in range(m.group_count)]
    hit = m.onboard(h, len(toks) - 1).take_hit()
    expect_served(m, h, hit)
    r = m.start_request(hit)
    cut = r.computed_tokens
    while r.computed_tokens < len(toks):
        start = r.computed_tokens
        end = min(len(toks), start + step)
        assert m.allocate(r, end)
        for g in range(m.group_count):
            for i in range(start // B, -(-end // B)):
                if r.holds_block(g, i):
                    m.write(r, g, i, pattern(keys[g][i]))
        m.commit(r, h, end)
        m.release_out_of_reach(r, end)
    m.finish(r, h)
    m.drain()
    return cut


def expect_served(m, h, hit):
    """Every block of `hit` holds its own group's bytes at its own position."""
    for g in range(m.group_count):
        first, last = hit.ranges[g]
        dst = np.zeros((last - first, m.block_bytes(g)), dtype=np.uint8)
        assert m.read(hit, g, dst) == last - first
        keys = m.group_hashes(g, h, first, last)
        for row, key in zip(dst, keys):
            assert np.array_equal(row, pattern(key)), f"group {g}: another block's bytes"


def expect_balanced(m, tiers):
    """audit() is empty and every pool of every group balances with nothing in use."""
    m.drain()
    assert m.audit() == ""
    for g in range(m.group_count):
        assert m.audit(g) == ""
        for t in tiers:
            c = m.pool_counts(g, t)
            assert c["balanced"] and c["reset"] + c["inactive"] + c["in_use"] == c["total"]
            assert c["in_use"] == 0, (g, t, c)


def serve_a_then_evict(m):
    """Serves prompt A, then B and C (as long), so that A leaves G1 (48 blocks a group)."""
    a = tokens(PROMPT * B)
    assert serve_kv(m, a) == 0
    assert serve_kv(m, tokens(PROMPT * B, start=10_000)) == 0
    assert serve_kv(m, tokens(PROMPT * B, start=20_000)) == 0
    return a


@pytest.mark.parametrize("tier", ["G2", "G3"])
def test_hybrid_kv_window_hit_onboards_only_the_windows_tail(tmp_path, tier):
    sizes = dict(g2=256) if tier == "G2" else dict(g2=48, g3=256)
    with hybrid_kv(tmp_path, **sizes) as m:
        assert (m.group_count, m.hash_block_size, m.block_bytes(1)) == (2, B, BLOCK_BYTES)
        a = serve_a_then_evict(m)
        h = hashes_of(m, a)
        limit = len(a) - 1
        p = m.probe(h, limit)
        # The cut at 624 tokens (39 blocks); the window reads the 8 blocks before it.
        assert p.tokens == 624 and p.ranges == [(0, 39), (31, 39)]
        source = "host" if tier == "G2" else "disk"
        assert getattr(p.found[0], source) == 39 and getattr(p.found[1], source) == 8
        oh = m.onboard(h, limit)
        assert oh.planned_tokens == 624 and oh.planned_range(1) == (31, 39)
        full, win = oh.counts(0), oh.counts(1)
        assert full.total == 39 and getattr(full, source) == 39  # A left G1
        assert win.total == 8 and getattr(win, source) == 8  # only the window's tail
        hit = oh.take_hit()
        assert hit.tokens == 624 and hit.held_blocks == [39, 8]
        expect_served(m, h, hit)
        r = m.start_request(hit)
        assert r.computed_tokens == 624 and r.held_range(1) == (31, 39)
        m.finish(r)
        onboarded = m.stats()[1]["onboarding"]["onboarded"]
        assert sum(onboarded.values()) == 8
        expect_balanced(m, [kvbm.TierId.G1, kvbm.TierId.G2] + (
            [kvbm.TierId.G3] if tier == "G3" else []))


def test_hybrid_kv_restart_warm_g3_serves_each_groups_blocks(tmp_path):
    a = tokens(PROMPT * B)
    with hybrid_kv(tmp_path, g1=64, g2=64, g3=256, persistent=True) as m:
        serve_kv(m, a)
        expect_balanced(m, list(kvbm.TierId)[:3])
    assert (tmp_path / "group-0-full").is_dir() and (tmp_path / "group-1-swa128").is_dir()
    with hybrid_kv(tmp_path, g1=64, g2=64, g3=256, persistent=True) as m:
        assert [m.disk_recovery(g)["recovered"] for g in range(2)] == [PROMPT, PROMPT]
        h = hashes_of(m, a)
        oh = m.onboard(h, len(a) - 1)
        assert (oh.counts(0).disk, oh.counts(1).disk) == (39, 8)
        assert (oh.counts(0).total, oh.counts(1).total) == (39, 8)
        hit = oh.take_hit()
        assert hit.tokens == 624
        expect_served(m, h, hit)
        del hit
        expect_balanced(m, list(kvbm.TierId)[:3])


def test_hybrid_kv_a_groups_file_never_serves_another_group(tmp_path):
    """Group 0's G3 file put in group 1's place is reset, not recovered: its namespace names
    group 0. Two groups of one geometry see the same hashes, so only the group tells them
    apart."""
    groups = [Spec.full(0, B, BLOCK_BYTES, [0]), Spec.full(1, B, BLOCK_BYTES, [1])]
    a = tokens(PROMPT * B)
    with hybrid_kv(tmp_path, g1=64, g2=64, g3=256, persistent=True, groups=groups) as m:
        serve_kv(m, a)
        h = hashes_of(m, a)
        assert not set(m.group_hashes(0, h)) & set(m.group_hashes(1, h))
    shutil.copyfile(tmp_path / "group-0-full" / "kvbm.slots",
                    tmp_path / "group-1-full" / "kvbm.slots")
    with hybrid_kv(tmp_path, g1=64, g2=64, g3=256, persistent=True, groups=groups) as m:
        assert m.disk_recovery(0)["recovered"] == PROMPT
        assert m.disk_recovery(1)["recovered"] == 0
        assert "fingerprint" in m.disk_recovery(1)["reset_reason"]
        p = m.probe(hashes_of(m, a), len(a) - 1)
        assert p.tokens == 0 and p.found[1].total == 0
        assert m.onboard(hashes_of(m, a), len(a) - 1).take_hit().tokens == 0
        expect_balanced(m, list(kvbm.TierId)[:3])


def test_hybrid_kv_two_managers_share_each_groups_blocks_through_g4(tmp_path, redis_url):
    """Two managers of the model on one Redis: the second finds the first's blocks per group
    in G4 (each group under its own namespace and keys), only the window's tail for the
    window group, with their bytes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tokens(PROMPT * B)
    with hybrid_kv(tmp_path / "a", remote=redis_url) as first:
        serve_kv(first, a)
        assert first.stats()[0]["remote"]["puts"] >= PROMPT
    with hybrid_kv(tmp_path / "b", remote=redis_url) as second:
        h = hashes_of(second, a)
        p = second.probe(h, len(a) - 1)
        assert p.tokens == 624 and (p.found[0].remote, p.found[1].remote) == (39, 8)
        oh = second.onboard(h, len(a) - 1)
        assert (oh.counts(0).remote, oh.counts(1).remote) == (39, 8)
        hit = oh.take_hit()
        assert hit.tokens == 624
        expect_served(second, h, hit)
        del hit
        expect_balanced(second, [kvbm.TierId.G1, kvbm.TierId.G2])


def test_hybrid_kv_threads_share_prompts_through_g1_and_g2(tmp_path):
    """Three threads serve six prompts (each twice, in different orders) through G1 pools too
    small to keep them all, while the other threads commit and evict; every hit carries its own
    group's bytes (serve_kv checks), and every pool balances at the end. The write-through
    pipeline holds its queued blocks (hold_queued_blocks), so none leaves G1 before its copy:
    G2 holds every prompt, and a thread's second round hits each prompt in full, from G1 or G2.
    (With the default, a block evicted while its copy waits is dropped: a slow copy, as under
    TSan, then cuts a hit.) G1 has room for every thread's request and queued blocks at once."""
    prompts = [tokens(PROMPT * B, start=100_000 * p) for p in range(6)]
    errors = []
    cuts = {}

    def worker(name, order):
        try:
            cuts[name] = [serve_kv(m, prompts[p]) for p in order + order]
        except Exception as e:  # noqa: BLE001  (reported below, with the thread's name)
            errors.append((name, e))

    with hybrid_kv(tmp_path, g1=160, g2=512,
                   pipeline=kvbm.PipelineConfig(hold_queued_blocks=True)) as m:
        orders = {"a": [0, 1, 2, 3, 4, 5], "b": [5, 3, 1, 4, 2, 0], "c": [2, 4, 0, 5, 1, 3]}
        threads = [threading.Thread(target=worker, args=item) for item in orders.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for name in orders:
            assert cuts[name][6:] == [624] * 6, (name, cuts[name])
        expect_balanced(m, [kvbm.TierId.G1, kvbm.TierId.G2])


def test_hybrid_kv_refuses_hits_and_requests_of_another_manager(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tokens(PROMPT * B)
    with hybrid_kv(tmp_path / "a") as m, hybrid_kv(tmp_path / "b") as other:
        serve_kv(m, a)
        serve_kv(other, a)
        h = hashes_of(m, a)
        hit = m.onboard(h, len(a) - 1).take_hit()
        assert hit.tokens == 624
        with pytest.raises(kvbm.UsageError, match="another manager"):
            other.start_request(hit)
        with pytest.raises(kvbm.UsageError, match="another manager"):
            other.read(hit, 0, np.zeros((39, BLOCK_BYTES), dtype=np.uint8))
        g1_only = full_swa(blocks=64, window=128)  # the same groups, G1 alone
        run(g1_only, a)
        with pytest.raises(kvbm.UsageError, match="another manager"):
            m.start_request(g1_only.find_prefix(hashes_of(g1_only, a), len(a) - 1))
        r = m.start_request(hit)  # its own manager takes it
        assert r.computed_tokens == 624
        m.finish(r)
        foreign = g1_only.start_request()
        assert g1_only.allocate(foreign, 2 * B)  # holds g1_only's blocks in both groups
        for call in (lambda: m.allocate(foreign, 3 * B), lambda: m.commit(foreign, h, B),
                     lambda: m.write(foreign, 0, 0, pattern(1)), lambda: m.finish(foreign)):
            with pytest.raises(kvbm.UsageError, match="another manager"):
                call()
        assert foreign.held_blocks(0) == 2 and m.pool_counts(0)["in_use"] == 0
        g1_only.finish(foreign)
        one_group = kg.HybridBlockManagerG1([Spec.full(0, B, BLOCK_BYTES, [0])], 8)
        with pytest.raises(kvbm.UsageError, match="1 groups, the manager 2"):
            m.allocate(one_group.start_request(), B)
        expect_balanced(m, [kvbm.TierId.G1, kvbm.TierId.G2])
        expect_balanced(other, [kvbm.TierId.G1, kvbm.TierId.G2])


def test_hybrid_kv_bad_input_raises_usage_error(tmp_path):
    with pytest.raises(kvbm.UsageError, match="group_blocks has 1 rows for 2 groups"):
        kvbm.HybridKvBlockManager(kvbm.KvBlockManagerConfig(device=kvbm.TierConfig(blocks=1)),
                                  full_swa_groups(), group_blocks=[[8]])
    with pytest.raises(kvbm.UsageError, match="G4"):
        kvbm.HybridKvBlockManager(kvbm.KvBlockManagerConfig(device=kvbm.TierConfig(blocks=1)),
                                  full_swa_groups(), group_blocks=[[8, 0, 0, 8]] * 2)
    with pytest.raises(kvbm.UsageError, match="holds no block"):  # G1 of 2 KiB, two groups
        kvbm.HybridKvBlockManager(kvbm.KvBlockManagerConfig(device=kvbm.TierConfig(bytes=1024)),
                                  full_swa_groups())
    with pytest.raises(kvbm.UsageError):  # invalid groups: a layer twice
        kvbm.HybridKvBlockManager(kvbm.KvBlockManagerConfig(device=kvbm.TierConfig(blocks=8)),
                                  [Spec.full(0, B, 1024, [0]), Spec.full(1, B, 1024, [0])])
    m = hybrid_kv(tmp_path)
    toks = tokens(4 * B)
    h = hashes_of(m, toks)
    r = m.start_request()
    assert m.allocate(r, 2 * B)
    with pytest.raises(kvbm.UsageError, match="group 2 of 2"):
        m.write(r, 2, 0, pattern(1))
    with pytest.raises(kvbm.UsageError, match="whole number of blocks"):
        m.write(r, 0, 0, np.zeros(BLOCK_BYTES + 1, dtype=np.uint8))
    with pytest.raises(kvbm.UsageError, match="holds no block 2"):
        m.write(r, 0, 2, pattern(1))
    m.write(r, 0, 0, np.stack([pattern(1), pattern(2)]))
    m.commit(r, h, 2 * B)
    with pytest.raises(kvbm.UsageError, match="is computed"):
        m.write(r, 0, 1, pattern(3))  # registered: shared, read-only
    read_only = np.zeros((2, BLOCK_BYTES), dtype=np.uint8)
    read_only.setflags(write=False)
    with pytest.raises(kvbm.UsageError, match="writable"):
        m.read(r, 0, read_only)
    dst = np.zeros((2, BLOCK_BYTES), dtype=np.uint8)
    assert m.read(r, 0, dst) == 2 and np.array_equal(dst[1], pattern(2))
    with pytest.raises(kvbm.UsageError, match="no G3 pool"):
        m.pool_counts(0, kvbm.TierId.G3)
    m.finish(r, h)
    with pytest.raises(kvbm.UsageError, match="finished"):
        m.commit(r, h, 3 * B)
    with pytest.raises(kvbm.UsageError, match="without events"):
        m.take_events()
    expect_balanced(m, [kvbm.TierId.G1, kvbm.TierId.G2])
    m.close()
    m.close()  # idempotent
    with pytest.raises(kvbm.UsageError, match="closed"):
        m.probe(h)


def test_hybrid_kv_events_name_each_group(tmp_path):
    with hybrid_kv(tmp_path, events=True) as m:
        serve_kv(m, tokens(4 * B))
        stored = [e for e in m.take_events() if isinstance(e, kvbm.BlockStored)]
        by = {(e.medium, e.group_idx): e for e in stored}
        assert set(by) == {("GPU", 0), ("GPU", 1), ("CPU", 0), ("CPU", 1)}
        assert by[("GPU", 0)].kv_cache_spec_kind == "full_attention"
        assert by[("CPU", 1)].kv_cache_spec_kind == "sliding_window"
        assert by[("CPU", 1)].kv_cache_spec_sliding_window == 128
        assert by[("GPU", 0)].kv_cache_spec_sliding_window is None
        h = hashes_of(m, tokens(4 * B))
        assert [k for e in stored if e.medium == "GPU" and e.group_idx == 1
                for k in e.block_hashes] == m.group_hashes(1, h)
        expect_balanced(m, [kvbm.TierId.G1, kvbm.TierId.G2])
