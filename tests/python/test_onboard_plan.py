"""Load or recompute from Python: the OnboardPlan object (plan_onboard, onboard with mode= and
deadline=, handle.plan), the measured costs (transfer_costs) and report_prefill
(kvbm/onboard_plan.h, kvbm/transfer_costs.h; docs/onboarding.md)."""

import numpy as np
import pytest

import kvbm

from conftest import pages, small_config


def stored_in_g2(kv, tag, n=4):
    """n blocks stored into G2 (not G1), flat hashes."""
    h = kvbm.hash_keys([b"%s-%d" % (tag, i) for i in range(n)])
    assert kv.store(h, pages(n, kv.block_bytes, 7), chained=False) == n
    kv.drain()
    assert kv.present(h, chained=False).tolist() == [2] * n
    return h


def test_the_plan_is_returned_before_any_copy_and_modes_are_followed():
    cfg = small_config(device=16, host=16, disk=0, prefill_tokens_per_second=1000.0)
    with kvbm.KvBlockManager(cfg) as kv:
        h = stored_in_g2(kv, b"plan")
        costs = kv.transfer_costs()
        assert set(costs["paths"]) == {"G1_to_G2", "G2_to_G1"}
        assert not costs["paths"]["G2_to_G1"]["model"]["known"]
        assert costs["prefill"]["configured_tokens_per_second"] == 1000.0
        assert costs["prefill"]["model"]["known"] and costs["prefill"]["reported"] is None

        plan = kv.plan_onboard(h, chained=False)
        assert isinstance(plan, kvbm.OnboardPlan)
        assert plan.mode == "auto" and plan.blocks == 4 and plan.deadline_s is None
        assert plan.found == {"device": 0, "host": 4, "disk": 0, "remote": 0}
        assert plan.load["host"] == 4 and plan.loaded == 4 and plan.copies == 4
        assert plan.compute_blocks == 0 and plan.compute_tokens == 0
        assert not plan.estimates_known  # G2 -> G1 not measured yet: auto loads
        assert kv.present(h, chained=False).tolist() == [2] * 4  # nothing copied
        assert "OnboardPlan(mode=auto" in repr(plan)

        none = kv.onboard(h, chained=False, mode="recompute_all")
        assert none.wait(timeout_s=30) == kvbm.TransferStatus.DONE
        assert none.plan.loaded == 0 and none.plan.compute_blocks == 4
        assert none.plan.compute_tokens == 4 * kv.block_size
        assert none.counts().total == 0 and none.take_blocks() == []

        every = kv.onboard(h, chained=False, mode="load_all")
        assert every.wait(timeout_s=30) == kvbm.TransferStatus.DONE
        assert every.plan.mode == "load_all" and every.plan.load["host"] == 4
        assert every.counts().host == 4 and len(every.take_blocks()) == 4
        del every

        plain = kv.onboard(h, chained=False)
        assert plain.plan is None
        plain.wait(timeout_s=30)
        del plain

        g2 = kv.transfer_costs()["paths"]["G2_to_G1"]
        assert g2["model"]["known"] and g2["sizes"][0]["batches"] >= 1
        assert g2["sizes"][0]["block_bytes"] == kv.block_bytes
        assert g2["sizes"][0]["p99_s"] >= g2["sizes"][0]["p50_s"] >= 0
        kv.drain()
        assert kv.audit() == ""


def test_a_deadline_and_reported_prefill():
    cfg = small_config(device=16, host=16, disk=0)
    with kvbm.KvBlockManager(cfg) as kv:
        warm = stored_in_g2(kv, b"warm")
        kv.onboard(warm, chained=False).wait(timeout_s=30)  # G2 -> G1 measured
        assert kv.transfer_costs()["paths"]["G2_to_G1"]["model"]["known"]
        h = stored_in_g2(kv, b"late")
        assert not kv.transfer_costs()["prefill"]["model"]["known"]
        kv.report_prefill(1000, 0.5)
        prefill = kv.transfer_costs()["prefill"]
        assert prefill["reported"]["batches"] == 1 and prefill["model"]["known"]
        # A copy takes some time; no load fits in a deadline of 0: compute all of it.
        plan = kv.plan_onboard(h, chained=False, deadline=0.0)
        assert plan.deadline_s == 0.0 and plan.loaded == 0 and plan.compute_blocks == 4
        handle = kv.onboard(h, chained=False, deadline=0.0)
        assert handle.wait(timeout_s=30) == kvbm.TransferStatus.DONE
        assert handle.plan.mode == "auto" and handle.counts().total == 0
        assert kv.present(h, chained=False).tolist() == [2] * 4
        with pytest.raises(kvbm.UsageError, match="onboarding mode"):
            kv.plan_onboard(h, chained=False, mode="sometimes")
        with pytest.raises(kvbm.UsageError, match="negative"):
            kv.plan_onboard(h, chained=False, deadline=-1.0)
        kv.drain()
        assert kv.audit() == ""
