"""A private redis-server for the tests that need G4 (tests/python/ and tests/engines/ both
use it through their redis_url fixture): on a Unix socket in a temporary directory, no
persistence, stopped after the test; skipped with a reason when redis-server or kvbm's remote
tier is missing."""

import shutil
import socket
import subprocess
import time

import pytest

import kvbm

from skips import skip_or_fail


def remote_available():
    """True when the kvbm imported here has the remote tier (hiredis)."""
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
        if "hiredis" in str(e) or "without the remote tier" in str(e) or "libhiredis" in str(e):
            return False
        raise


def redis_server(tmp_path_factory):
    """Generator for a pytest fixture: yields the server's URL (unix://...)."""
    server = shutil.which("redis-server")
    if server is None:
        skip_or_fail("redis-server is not installed: bash scripts/deps.sh installs it "
                     "(apt-get install redis-server)")
    if not remote_available():
        skip_or_fail("kvbm built without the remote tier: install libhiredis-dev "
                     "(bash scripts/deps.sh), then reinstall kvbm")
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
