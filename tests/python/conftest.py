"""Shared fixtures of the Python tests (tests/python/, run by `scripts/test.sh python`).

Everything is real: the kvbm extension as installed, files in pytest's tmp_path,
child processes for restarts, and a redis-server for G4 when one is installed
(tests that need it skip, saying why, otherwise).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvbm
from redis_server import redis_server

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


@pytest.fixture
def redis_url(tmp_path_factory):
    """A private redis-server on a Unix socket, stopped after the test (redis_server.py)."""
    yield from redis_server(tmp_path_factory)
