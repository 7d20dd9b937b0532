"""Fixtures of tests/engines/: a private redis-server for G4 (as tests/python/conftest.py's
redis_url), skipped with a reason when redis-server or kvbm's remote tier is missing."""

import importlib.util
import shutil
import socket
import subprocess
import time

import pytest


def _remote_available():
    """True when the kvbm installed here has the remote tier (hiredis)."""
    if importlib.util.find_spec("kvbm") is None:
        return False
    import kvbm

    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=1, outer_dim=1, page_size=1, inner_dim=64,
                                 dtype_bytes=1),
        device=kvbm.TierConfig(blocks=4), device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS)
    cfg.host = kvbm.TierConfig(blocks=4)
    cfg.remote.urls = ["redis://127.0.0.1:1"]
    cfg.remote.model = "probe"
    try:
        kvbm.KvBlockManager(cfg).close()
        return True
    except kvbm.UsageError as e:
        if "hiredis" in str(e) or "without the remote tier" in str(e):
            return False
        raise


@pytest.fixture
def redis_url(tmp_path_factory):
    """A private redis-server on a Unix socket, stopped after the test."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server not installed (bash scripts/deps.sh installs it)")
    if not _remote_available():
        pytest.skip("kvbm was built without the remote tier (install libhiredis-dev)")
    d = tmp_path_factory.mktemp("redis")
    sock = d / "redis.sock"
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", str(sock), "--save", "",
                             "--appendonly", "no", "--dir", str(d)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(str(sock))
                    break
                except OSError:
                    pass
            time.sleep(0.02)
        else:
            pytest.fail("redis-server did not start")
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
