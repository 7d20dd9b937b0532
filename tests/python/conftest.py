"""Shared fixtures of the Python tests (tests/python/, run by `scripts/test.sh python`).

Everything is real: the kvbm extension as installed, files in pytest's tmp_path,
child processes for restarts, and a redis-server for G4 when one is installed
(tests that need it skip, saying why, otherwise).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kvbm

HERE = Path(__file__).resolve().parent


def small_config(tmp_path=None, *, device=16, host=32, disk=128, persistent=False,
                 namespace="tests", inner_dim=256, **extra):
    """A KvBlockManagerConfig of small blocks (2 layers x K/V x 16 tokens x inner_dim x 2 B)."""
    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=2, outer_dim=2, page_size=16, inner_dim=inner_dim,
                                 dtype_bytes=2),
        device=kvbm.TierConfig(blocks=device),
        device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS,
    )
    if host:
        cfg.host = kvbm.TierConfig(blocks=host)
    if disk and tmp_path is not None:
        cfg.disk = kvbm.TierConfig(blocks=disk)
        cfg.disk_directory = str(tmp_path)
        cfg.disk_persistent = persistent
        cfg.disk_namespace = namespace
    for k, v in extra.items():
        setattr(cfg, k, v)
    return cfg


def pages(n, block_bytes, seed):
    """n random blocks of bytes, one per row."""
    return np.random.default_rng(seed).integers(0, 256, size=(n, block_bytes), dtype=np.uint8)


def run_python(code, *args, timeout=120, env=None):
    """Runs `code` in a fresh interpreter (a real second process); returns its stdout."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=full_env)
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def remote_available():
    """True when this build has the remote tier (hiredis)."""
    cfg = small_config()
    cfg.remote.urls = ["redis://127.0.0.1:1"]
    cfg.remote.model = "probe"
    try:
        kvbm.KvBlockManager(cfg).close()
        return True
    except kvbm.UsageError as e:
        if "hiredis" in str(e) or "without the remote tier" in str(e) or "libhiredis" in str(e):
            return False
        raise


@pytest.fixture
def redis_url(tmp_path_factory):
    """A private redis-server on a Unix socket, stopped after the test."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server not installed (bash scripts/deps.sh installs it)")
    if not remote_available():
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
