"""Fixtures of tests/engines/: a private redis-server for G4, the one tests/python/ uses
(tests/python/redis_server.py), skipped with a reason when redis-server or kvbm's remote tier
is missing."""

import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


@pytest.fixture
def redis_url(tmp_path_factory):
    """A private redis-server on a Unix socket, stopped after the test."""
    if importlib.util.find_spec("kvbm") is None:
        pytest.skip("kvbm is not installed here")
    from redis_server import redis_server

    yield from redis_server(tmp_path_factory)
