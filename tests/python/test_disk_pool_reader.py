"""kvbm.DiskPoolReader: reading a persistent G3 file that another manager owns (and holds the
lock of), with the buffers the bindings accept everywhere (docs/python.md, "Buffers")."""

import numpy as np
import pytest

import kvbm
from conftest import pages, small_config


@pytest.fixture
def owner(tmp_path):
    """A manager whose persistent G3 holds 6 blocks stored with chained=False (opaque keys,
    as the engine integrations store them), kept open: it holds the directory's lock."""
    kv = kvbm.KvBlockManager(small_config(tmp_path, persistent=True, namespace="model-a"))
    hashes = kvbm.hash_keys([b"blk-%d" % i for i in range(6)])
    data = pages(6, kv.block_bytes, 5)
    assert kv.store(hashes, data, chained=False) == 6
    kv.drain()
    yield kv, hashes, data, tmp_path
    kv.close()


def reader_of(tmp_path, namespace="model-a"):
    return kvbm.DiskPoolReader(str(tmp_path), small_config().layout, namespace)


def test_reads_what_the_owner_wrote_in_order(owner):
    kv, hashes, data, tmp_path = owner
    r = reader_of(tmp_path)
    assert len(r) == 0 and hashes[0] not in r  # nothing before refresh()
    assert r.refresh() == 6 and r.last_error == ""
    assert r.block_bytes == kv.block_bytes
    assert r.count_prefix(hashes) == 6
    assert r.count_prefix([hashes[0], 12345, hashes[2]]) == 1
    out = np.zeros((6, kv.block_bytes), np.uint8)
    assert r.read(hashes, list(out)) == 6
    assert (out == data).all()
    # A hash it does not hold stops the read there.
    out[:] = 0
    assert r.read([hashes[1], 999, hashes[2]], list(out[:3])) == 1
    assert (out[0] == data[1]).all() and not out[1:].any()


def test_segments_and_any_dtype_in_place(owner):
    kv, hashes, data, tmp_path = owner
    r = reader_of(tmp_path)
    r.refresh()
    half = kv.block_bytes // 2
    a, b = np.zeros(half, np.uint8), np.zeros(half // 2, np.float16)
    assert r.read(hashes[:1], [(a, b)]) == 1
    assert (np.concatenate([a, b.view(np.uint8)]) == data[0]).all()


@pytest.mark.parametrize("make,what", [
    (lambda n: np.zeros(n - 1, np.uint8), "bytes; a block is"),
    (lambda n: np.zeros(2 * n, np.uint8)[::2], "contiguous"),
    (lambda n: np.zeros(n, np.uint8).reshape(2, -1).T, "contiguous"),
    (lambda n: np.frombuffer(bytes(n), np.uint8), "read-only"),
])
def test_a_destination_it_cannot_write_in_place_is_refused(owner, make, what):
    kv, hashes, _, tmp_path = owner
    r = reader_of(tmp_path)
    r.refresh()
    with pytest.raises(kvbm.UsageError, match=what):
        r.read(hashes[:1], [make(kv.block_bytes)])


def test_other_namespace_and_missing_file_serve_nothing(owner, tmp_path_factory):
    _, hashes, _, tmp_path = owner
    other = reader_of(tmp_path, namespace="model-b")
    assert other.refresh() == 0 and "another layout or namespace" in other.last_error
    assert other.count_prefix(hashes) == 0
    missing = reader_of(tmp_path_factory.mktemp("empty") / "nowhere")
    assert missing.refresh() == 0 and "does not exist" in missing.last_error
    with pytest.raises(kvbm.UsageError, match="one buffer per hash"):
        other.read(hashes[:2], [np.zeros(other.block_bytes, np.uint8)])
    with pytest.raises(kvbm.UsageError):
        other.read([-1], [np.zeros(other.block_bytes, np.uint8)])
