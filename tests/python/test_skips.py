"""skip_or_fail (tests/python/skips.py): a skip outside CI, a failure under CI=true unless the
reason is one the CI machine cannot meet."""

import pytest

from skips import import_or_skip, skip_allowed_in_ci, skip_or_fail


def test_only_hardware_and_stage_reasons_may_skip_in_ci():
    assert skip_allowed_in_ci("no GPU: no usable CUDA device")
    assert skip_allowed_in_ci("GPU present: device memory is real")
    assert not skip_allowed_in_ci("redis-server is not installed: bash scripts/deps.sh")
    assert not skip_allowed_in_ci("no GPU")  # a class needs its ": "


def test_a_missing_package_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="redis-server is not installed"):
        skip_or_fail("redis-server is not installed: bash scripts/deps.sh")


def test_a_missing_package_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: a skip for this reason is a failure"):
        skip_or_fail("redis-server is not installed: bash scripts/deps.sh")
    with pytest.raises(pytest.skip.Exception, match="no GPU: none here"):
        skip_or_fail("no GPU: none here")


def test_a_missing_module_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="engine wheel missing: x .*kvbm_no_such_mod"):
        import_or_skip("kvbm_no_such_module", "engine wheel missing: x")
    assert import_or_skip("json", "never").dumps([]) == "[]"
