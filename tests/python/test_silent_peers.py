"""The loopback peers of silent_peers.py do what the G4-down tests rely on (a listener that
accepts and never answers; one whose handshake never completes), and a KvBlockManager whose G4
is either of them is built at once and serves its local tiers."""

import socket
import time

import numpy as np
import pytest

import kvbm

from conftest import pages, small_config
from redis_server import remote_available
from silent_peers import accepts_never_answers, connects_within, never_accepts
from skips import skip_or_fail


def test_accepts_never_answers_connects_and_stays_silent():
    with accepts_never_answers() as port:
        s = connects_within(port, 1.0)
        assert s is not None, "the handshake must complete"
        with s:
            s.setblocking(True)
            s.settimeout(0.3)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            with pytest.raises(socket.timeout):
                s.recv(1)  # no reply, and not closed (that would read b"")


def test_never_accepts_never_completes_a_handshake():
    with never_accepts() as port:
        for _ in range(3):
            assert connects_within(port, 0.5) is None


@pytest.mark.parametrize("peer", [accepts_never_answers, never_accepts])
def test_g4_on_a_silent_peer_never_delays_the_manager(peer):
    if not remote_available():
        skip_or_fail("kvbm was built without the remote tier (install libhiredis-dev)")
    with peer() as port:
        cfg = small_config(disk=0)
        cfg.remote.urls = [f"redis://127.0.0.1:{port}"]
        cfg.remote.model = "silent-peer"
        start = time.monotonic()
        kv = kvbm.KvBlockManager(cfg)
        try:
            assert time.monotonic() - start < 1.0
            h = kvbm.hash_keys([b"silent-%d" % i for i in range(3)])
            src = pages(3, kv.block_bytes, 5)
            assert kv.store(h, src) == 3
            out = np.zeros_like(src)
            assert kv.load(h, out) == 3
            assert (out == src).all()
        finally:
            kv.close()
