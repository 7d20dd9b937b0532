"""Fixtures of tests/engines/: a private redis-server for G4, the one tests/python/ uses
(tests/python/redis_server.py), skipped with a reason when redis-server or kvbm's remote tier
is missing."""

import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from skips import skip_or_fail  # noqa: E402  (tests/python/skips.py)


@pytest.fixture
def redis_url(tmp_path_factory):
    """A private redis-server on a Unix socket, stopped after the test."""
    if importlib.util.find_spec("kvbm") is None:
        skip_or_fail("kvbm not importable: bash scripts/engines_env.sh installs it into its venv")
    from redis_server import redis_server

    yield from redis_server(tmp_path_factory)
