"""skip_or_fail (tests/python/skips.py): a skip outside CI, a failure under CI=true unless the
reason is one the CI machine cannot meet."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skips import ALLOWED_IN_CI, import_or_skip, skip_allowed_in_ci, skip_or_fail


def test_only_hardware_reasons_may_skip_in_ci():
    assert skip_allowed_in_ci("no GPU: no usable CUDA device")
    assert skip_allowed_in_ci("GPU present: device memory is real")
    # The sanitizer stages run a reduced check instead of skipping.
    assert not skip_allowed_in_ci("KVBM_STRESS_SCALE < 1: full trace only")
    assert not skip_allowed_in_ci("sanitizer build: its allocator holds freed memory")
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


def test_the_cpp_helper_allows_the_same_reasons():
    header = (Path(__file__).resolve().parents[1] / "skip_or_fail.h").read_text()
    body = header[header.index("inline bool skip_allowed_in_ci"):]
    body = body[body.index("{"):body.index("})")]
    assert tuple(re.findall(r'"([^"]+)"', body)) == ALLOWED_IN_CI


def test_skip_report_groups_pytest_skips_and_refuses_them_under_ci(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text("SKIPPED [2] tests/python/a.py:3: no GPU: none here\n"
                   "SKIPPED [1] tests/python/skips.py:35: redis-server is not installed: x\n"
                   "1 passed, 3 skipped in 0.1s\n")
    report = Path(__file__).resolve().parents[2] / "scripts" / "skip_report.py"
    run = [sys.executable, str(report), "pytest", str(log)]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    out = subprocess.run(run, env=env, capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (
        0, "skipped: 3 (no GPU 2, redis-server is not installed 1)\n")
    out = subprocess.run(run, env={**env, "CI": "true"}, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stdout.splitlines()[1:] == [
        "tests/python/skips.py:35: redis-server is not installed: x"]


def test_skip_report_reads_the_gtest_reason_from_ctest_junit(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuite><testcase name="A.b" status="notrun"><skipped message="m"/><system-out>'
        "x.cpp:3: Skipped\nio_uring unavailable: EPERM\n[  SKIPPED ] A.b\n</system-out>"
        '</testcase><testcase name="A.c" status="run"><system-out>ok</system-out></testcase>'
        '<testcase name="ex" status="notrun"><skipped message="m"/><system-out>starting\n'
        "no redis-server\n</system-out></testcase></testsuite>")
    report = Path(__file__).resolve().parents[2] / "scripts" / "skip_report.py"
    out = subprocess.run([sys.executable, str(report), "ctest", str(junit)],
                         env={**os.environ, "CI": "true"}, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stdout == ("skipped: 2 (io_uring unavailable 1, skipped by its exit code 1)\n"
                          "A.b: io_uring unavailable: EPERM\n"
                          "ex: skipped by its exit code: no redis-server\n")
