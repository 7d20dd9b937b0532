"""Every call that takes a block handle checks that the block is this manager's.

Two managers' block ids overlap (both count from 0), so a handle of manager B
passed to manager A names one of A's blocks by id: accepted, it would overwrite
A's registered block, and A would serve the new bytes under the old hash. Each
call refuses it with kvbm.UsageError, and nothing changes on either side.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvbm
from conftest import pages, small_config

FOREIGN = "belongs to another KvBlockManager"


def manager():
    return kvbm.KvBlockManager(small_config(device=16, host=16, disk=0, inner_dim=4))


def test_every_handle_taking_call_refuses_another_managers_blocks():
    with manager() as a, manager() as b:
        bb = a.block_bytes
        keys = kvbm.hash_keys([b"a-0", b"a-1"])
        assert a.store(keys, pages(2, bb, 1), tier=kvbm.TierId.G1) == 2
        held = a.match(keys, kvbm.TierId.G1, chained=False)  # A's ids 0 and 1
        b_mut1, b_mut2 = b.allocate(2), b.allocate(2, kvbm.TierId.G2)
        b_imm1 = b.register(b.allocate(2), [7, 8], chained=False)
        b_imm2 = b.register(b.allocate(2, kvbm.TierId.G2), [7, 8], chained=False)
        assert {x.block_id for x in b_mut1} & {x.block_id for x in held}  # ids do overlap
        junk = np.full((2, bb), 0xEE, np.uint8)
        calls = [
            lambda: a.write(b_mut1, junk), lambda: a.write(b_mut2, junk),
            lambda: a.read(b_imm1, np.zeros((2, bb), np.uint8)),
            lambda: a.read(b_imm2, np.zeros((2, bb), np.uint8)),
            lambda: a.read(b_mut1, np.zeros((2, bb), np.uint8)),
            lambda: a.view(b_mut1[0]), lambda: a.view(b_imm1[0]), lambda: a.view(b_imm2[0]),
            lambda: a.region_view(b_mut2[0], 0, 0), lambda: a.region_view(b_imm1[1], 1, 1),
            lambda: a.register(b_mut1, [1, 2], chained=False),
            lambda: a.register(b_mut2, [1, 2], chained=False),
            lambda: a.block_address(b_imm1[0]),
        ]
        for i, call in enumerate(calls):
            with pytest.raises(kvbm.UsageError, match=FOREIGN):
                call()
        with pytest.raises(kvbm.UsageError, match="another manager"):
            a.offload(b_imm1)  # the facade's own check, same rule
        # Nothing moved: B's handles are intact, A serves A's bytes.
        assert all(x.valid for x in b_mut1 + b_mut2 + b_imm1 + b_imm2)
        out = np.zeros((2, bb), np.uint8)
        del held
        assert a.load(keys, out) == 2
        assert np.array_equal(out, pages(2, bb, 1))
        del b_mut1, b_mut2, b_imm1, b_imm2
        assert a.audit() == "" and b.audit() == ""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(owners=st.lists(st.integers(0, 2), min_size=1, max_size=6),
       op=st.sampled_from(["write", "read", "register", "view"]),
       tier=st.sampled_from([kvbm.TierId.G1, kvbm.TierId.G2]))
def test_handles_from_several_managers(owners, op, tier):
    """A call on manager 0 with handles drawn from managers 0-2 succeeds only when every
    handle is manager 0's; otherwise it raises and manager 0's stored bytes stay its own."""
    ms = [manager() for _ in range(3)]
    try:
        bb = ms[0].block_bytes
        keys = kvbm.hash_keys([b"k-%d" % i for i in range(4)])
        ms[0].store(keys, pages(4, bb, 9), tier=tier)  # 4 + at most 6 allocated: no eviction
        pools = [m.allocate(owners.count(i), tier) or [] for i, m in enumerate(ms)]
        if op == "read":
            pools = [m.register(p, list(range(100, 100 + len(p))), chained=False)
                     for m, p in zip(ms, pools)]
        handles = [pools[o].pop() for o in owners]
        own = all(o == 0 for o in owners)
        n = len(handles)
        if op == "write":
            call = lambda: ms[0].write(handles, np.full((n, bb), 0xAB, np.uint8))  # noqa: E731
        elif op == "read":
            call = lambda: ms[0].read(handles, np.zeros((n, bb), np.uint8))  # noqa: E731
        elif op == "register":
            call = lambda: ms[0].register(handles, list(range(200, 200 + n)),  # noqa: E731
                                          chained=False)
        else:
            call = lambda: [ms[0].view(h) for h in handles]  # noqa: E731
        if own:
            call()
        else:
            with pytest.raises(kvbm.UsageError, match=FOREIGN):
                call()
            assert all(h.valid for h in handles)
        del handles, pools
        out = np.zeros((4, bb), np.uint8)
        assert ms[0].load(keys, out) == 4
        assert np.array_equal(out, pages(4, bb, 9))
        assert all(m.audit() == "" for m in ms)
    finally:
        for m in ms:
            m.close()
