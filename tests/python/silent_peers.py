"""Peers on loopback that never answer, for the tests of a tier whose server is down (tests/python/
and tests/engines/ both use them). Tests talk only to this machine: these stand in for a server
that is unreachable without sending a packet anywhere else.

- accepts_never_answers(): a listener on 127.0.0.1 whose thread accepts every connection and
  holds it open without reading or writing: connect() succeeds, no reply ever comes.
- never_accepts(): a listener on 127.0.0.1 whose accept queue is full (listen(0), filled with
  connections that are never accepted): Linux drops every further SYN, so a connect() never
  completes its handshake; the client only sees its own timeout.

Each is a context manager yielding the port; closing it closes every socket it holds.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

HOST = "127.0.0.1"


@contextlib.contextmanager
def accepts_never_answers():
    """Yields the port of a listener that accepts and then says nothing."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((HOST, 0))
    listener.listen(16)
    held = []
    stop = threading.Event()

    def accept_and_hold():
        while not stop.is_set():
            ready, _, _ = select.select([listener], [], [], 0.05)
            if ready:
                conn, _ = listener.accept()
                held.append(conn)  # never read, never written

    thread = threading.Thread(target=accept_and_hold, name="accepts-never-answers", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
        listener.close()


def connects_within(port: int, seconds: float) -> socket.socket | None:
    """A non-blocking connect to 127.0.0.1:port: the socket when the handshake completes within
    `seconds`, else None (the half-open socket is closed)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    err = s.connect_ex((HOST, port))
    if err == 0:
        return s
    _, writable, _ = select.select([], [s], [], seconds)
    if writable and s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
        return s
    s.close()
    return None


@contextlib.contextmanager
def never_accepts(max_fillers: int = 64):
    """Yields the port of a listener whose handshake never completes: listen(0), then as many
    connections as the kernel completes into the accept queue (never accepted), until one does
    not complete within 0.2 s: from then on every SYN to the port is dropped."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((HOST, 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(max_fillers):
            s = connects_within(port, 0.2)
            if s is None:
                break
            fillers.append(s)
        else:
            raise RuntimeError(f"the accept queue of 127.0.0.1:{port} did not fill after "
                               f"{max_fillers} connections: this kernel completes handshakes "
                               "past the listen backlog (net.ipv4.tcp_abort_on_overflow?)")
        yield port
    finally:
        for s in fillers:
            s.close()
        listener.close()
