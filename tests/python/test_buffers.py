"""The buffer rules of the bindings (docs/python.md, "Buffers").

Every call that takes a buffer uses the caller's memory in place or refuses it
with kvbm.UsageError: a destination kvbm cannot write in place (not
C-contiguous, read-only, too small, not host memory) is never swapped for a
converted copy that receives the bytes and is dropped. Property-based: arrays
of every dtype, shape, order, stride and offset a caller can build with NumPy,
for store, load, write and read, single arrays and lists of one-block arrays.
"""

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvbm
from conftest import pages, small_config

INNER = 4  # 2 layers x K/V x 16 tokens x 4 x 2 B = 512 bytes a block: small random arrays
DTYPES = [np.uint8, np.int8, np.bool_, np.int16, np.uint16, np.float16, np.int32, np.float32,
          np.int64, np.uint64, np.float64, np.complex64, np.complex128]
# How a caller's array may lie over its memory; only the first two (and, where numpy calls the
# result C-contiguous, the others for one block) can be written in place.
LAYOUTS = ["c", "flat", "3d", "fortran", "transposed", "every_other_row", "column_slice",
           "reversed", "unaligned", "readonly"]
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def manager():
    return kvbm.KvBlockManager(small_config(device=16, host=32, disk=0, inner_dim=INNER))


def shaped(n, block_bytes, dtype, layout, fill=0):
    """An array of n blocks of `dtype` laid out as `layout`, every byte `fill`."""
    cols = block_bytes // np.dtype(dtype).itemsize
    if layout == "every_other_row":
        base = np.full((2 * n, block_bytes), fill, np.uint8).view(dtype)
        return base[::2]
    if layout == "column_slice":
        base = np.full((n, 2 * block_bytes), fill, np.uint8).view(dtype)
        return base[:, :cols]
    if layout == "unaligned":  # C-contiguous, one byte past an aligned start
        raw = np.full(n * block_bytes + 1, fill, np.uint8)
        return raw[1:].view(dtype).reshape(n, cols)
    arr = np.full((n, block_bytes), fill, np.uint8).view(dtype)
    if layout == "flat":
        return arr.reshape(-1)
    if layout == "3d":
        return arr.reshape(n, 2, cols // 2)
    if layout == "fortran":
        return np.asfortranarray(arr)
    if layout == "transposed":
        return np.ascontiguousarray(arr.T).T
    if layout == "reversed":
        return arr[::-1]
    if layout == "readonly":
        arr.flags.writeable = False
    return arr


def memory_bytes(arr):
    """The bytes of a C-contiguous array in memory order."""
    return arr.reshape(-1).view(np.uint8)


def raw(arr):
    """The bytes of any array in logical order (a copy when it is not contiguous)."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def usable(arr, write):
    return arr.flags.c_contiguous and (arr.flags.writeable or not write)


@SETTINGS
@given(n=st.integers(1, 4), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       as_list=st.booleans(), seed=st.integers(0, 2**16))
def test_load_writes_in_place_or_refuses(n, dtype, layout, as_list, seed):
    with manager() as kv:
        bb = kv.block_bytes
        src = pages(n, bb, seed)
        hashes = kvbm.hash_keys([b"blk-%d-%d" % (seed, i) for i in range(n)])
        assert kv.store(hashes, src) == n
        if as_list:
            dst = [shaped(1, bb, dtype, layout) for _ in range(n)]
            ok = all(usable(d, write=True) for d in dst)
        else:
            dst = shaped(n, bb, dtype, layout)
            ok = usable(dst, write=True)
        before = [np.array(d, copy=True) for d in dst] if as_list else np.array(dst, copy=True)
        if ok:
            assert kv.load(hashes, dst) == n
            got = (np.concatenate([memory_bytes(d) for d in dst]) if as_list
                   else memory_bytes(dst))
            assert np.array_equal(got, src.reshape(-1))
        else:
            with pytest.raises(kvbm.UsageError, match="load: dst"):
                kv.load(hashes, dst)
            if as_list:
                assert all(np.array_equal(raw(a), raw(b)) for a, b in zip(dst, before))
            else:
                assert np.array_equal(raw(dst), raw(before))  # nothing written
        assert kv.audit() == ""


@SETTINGS
@given(n=st.integers(1, 4), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       as_list=st.booleans(), seed=st.integers(0, 2**16))
def test_store_reads_in_place_or_refuses(n, dtype, layout, as_list, seed):
    with manager() as kv:
        bb = kv.block_bytes
        hashes = kvbm.hash_keys([b"blk-%d-%d" % (seed, i) for i in range(n)])
        fill = seed % 251 + 1
        if as_list:
            src = [shaped(1, bb, dtype, layout, fill + i) for i in range(n)]
            ok = all(usable(s, write=False) for s in src)
        else:
            src = shaped(n, bb, dtype, layout, fill)
            ok = usable(src, write=False)
        if ok:
            assert kv.store(hashes, src) == n
            out = np.zeros((n, bb), np.uint8)
            assert kv.load(hashes, out) == n
            want = (np.concatenate([memory_bytes(s) for s in src]) if as_list
                    else memory_bytes(src))
            assert np.array_equal(out.reshape(-1), want)
        else:
            with pytest.raises(kvbm.UsageError, match="store: src"):
                kv.store(hashes, src)
            assert list(kv.present(hashes, chained=False)) == [0] * n  # nothing stored
        assert kv.audit() == ""


@SETTINGS
@given(n=st.integers(1, 4), dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       tier=st.sampled_from([kvbm.TierId.G1, kvbm.TierId.G2]), seed=st.integers(0, 2**16))
def test_write_and_read_blocks_in_place_or_refuse(n, dtype, layout, tier, seed):
    with manager() as kv:
        bb = kv.block_bytes
        blocks = kv.allocate(n, tier)
        src = pages(n, bb, seed)
        kv.write(blocks, src)
        dst = shaped(n, bb, dtype, layout)
        if usable(dst, write=True):
            kv.read(blocks, dst)
            assert np.array_equal(memory_bytes(dst), src.reshape(-1))
        else:
            before = raw(dst).copy()
            with pytest.raises(kvbm.UsageError, match="read: dst"):
                kv.read(blocks, dst)
            assert np.array_equal(raw(dst), before)
        # The same layouts as a source of write().
        fresh = shaped(n, bb, dtype, layout, seed % 255 + 1)
        if usable(fresh, write=False):
            kv.write(blocks, fresh)
            out = np.zeros((n, bb), np.uint8)
            kv.read(blocks, out)
            assert np.array_equal(out.reshape(-1), memory_bytes(fresh))
        else:
            with pytest.raises(kvbm.UsageError, match="write: src"):
                kv.write(blocks, fresh)
        del blocks
        assert kv.audit() == ""


@SETTINGS
@given(rows=st.lists(st.integers(-3, 12), min_size=1, max_size=4),
       kind=st.sampled_from(["list", "int64", "int32", "uint16", "uint64", "strided", "float"]))
def test_rows_are_integers_checked_not_converted(rows, kind):
    with manager() as kv:
        bb = kv.block_bytes
        buf = pages(8, bb, 3)
        hashes = kvbm.hash_keys([b"r%d" % i for i in range(len(rows))])
        if kind == "list":
            arg = rows
        elif kind == "strided":
            arg = np.repeat(np.array(rows, np.int64), 2)[::2]
        elif kind == "float":
            arg = np.array(rows, np.float64)
        else:
            arg = np.array(rows).astype(kind)  # unsigned: negatives wrap here, in NumPy
        values = [int(v) for v in arg] if kind != "list" else rows
        fits = kind != "float" and all(0 <= v < 8 for v in values)
        if fits:
            assert kv.store(hashes, buf, rows=arg) == len(rows)
            out = np.zeros((len(rows), bb), np.uint8)
            kv.load(hashes, out)
            assert np.array_equal(out, buf[values])
        else:
            with pytest.raises(kvbm.UsageError, match="store: rows"):
                kv.store(hashes, buf, rows=arg)
        assert kv.audit() == ""


def test_too_small_and_wrong_count_are_refused():
    with manager() as kv:
        bb = kv.block_bytes
        h = kvbm.hash_keys([b"a", b"b"])
        kv.store(h, pages(2, bb, 1))
        with pytest.raises(kvbm.UsageError, match="only 1"):
            kv.load(h, np.zeros((1, bb), np.uint8))
        with pytest.raises(kvbm.UsageError, match="not a whole number of blocks"):
            kv.load(h, np.zeros(2 * bb - 1, np.uint8))
        with pytest.raises(kvbm.UsageError, match=r"dst\[1\]: holds"):
            kv.load(h, [np.zeros(bb, np.uint8), np.zeros(bb // 2, np.uint8)])
        with pytest.raises(kvbm.UsageError, match="1 buffers for 2"):
            kv.load(h, [np.zeros(bb, np.uint8)])
        with pytest.raises(kvbm.UsageError, match="rows= picks rows of one array"):
            kv.load(h, [np.zeros(bb, np.uint8)] * 2, rows=[0, 1])
        with pytest.raises(kvbm.UsageError, match="expected an array"):
            kv.load(h, "not an array")
        with pytest.raises(kvbm.UsageError, match="read-only"):
            kv.load(h, bytes(2 * bb))  # the buffer protocol, read-only
        out = bytearray(2 * bb)  # any writable buffer-protocol object is written in place
        assert kv.load(h, out) == 2
        assert bytes(out) == pages(2, bb, 1).tobytes()
        assert kv.audit() == ""


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DeviceArray:
    """A DLPack producer (the protocol as torch and CuPy speak it, unversioned) that says its
    bytes live on a CUDA device: what a GPU tensor looks like to kvbm."""

    def __init__(self, nbytes, device_type=2):
        self.host = np.zeros(nbytes, np.uint8)  # the pointer is never dereferenced by kvbm
        self.shape = (ctypes.c_int64 * 1)(nbytes)
        self.device_type = device_type
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.device_type, t.device_id, t.ndim = self.host.ctypes.data, device_type, 0, 1
        t.code, t.bits, t.lanes, t.shape = 1, 8, 1, self.shape

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_device_memory_is_refused():
    with manager() as kv:
        h = kvbm.hash_keys([b"a"])
        kv.store(h, pages(1, kv.block_bytes, 1))
        gpu = DeviceArray(kv.block_bytes)
        with pytest.raises(kvbm.UsageError, match="CUDA device memory, not host memory"):
            kv.load(h, gpu)
        with pytest.raises(kvbm.UsageError, match="CUDA device memory"):
            kv.store(kvbm.hash_keys([b"b"]), gpu)
        assert not gpu.host.any()
        assert kv.audit() == ""


@SETTINGS
@given(n=st.integers(1, 3), cuts=st.lists(st.integers(0, 512), min_size=0, max_size=3),
       seed=st.integers(0, 2**16))
def test_a_block_in_segments_is_read_and_written_in_place(n, cuts, seed):
    """A list item may be a tuple of arrays whose sizes add up to one block (a page whose K
    and V halves lie apart in the caller's pool): store reads them in order, load writes them
    in place, each segment under the same rules as a whole buffer."""
    with manager() as kv:
        bb = kv.block_bytes
        bounds = [0] + sorted(cuts) + [bb]
        src = pages(n, bb, seed)
        hashes = kvbm.hash_keys([b"seg-%d-%d" % (seed, i) for i in range(n)])
        src_parts = [tuple(src[i, a:b] for a, b in zip(bounds, bounds[1:])) for i in range(n)]
        assert kv.store(hashes, src_parts) == n
        dst = np.zeros((n, bb), np.uint8)
        dst_parts = [tuple(dst[i, a:b] for a, b in zip(bounds, bounds[1:])) for i in range(n)]
        assert kv.load(hashes, dst_parts) == n
        assert np.array_equal(dst, src)  # written through the views, into dst itself
        short = [tuple(p[:-1] if j == 0 else p for j, p in enumerate(parts))
                 for parts in dst_parts]
        if bb - 1 >= 0 and len(short[0][0]) != len(dst_parts[0][0]):
            with pytest.raises(kvbm.UsageError, match=r"load: dst\[0\]: holds"):
                kv.load(hashes, short)
        strided = np.zeros((n, 2 * bb), np.uint8)
        with pytest.raises(kvbm.UsageError, match=r"load: dst\[0\]\[0\]: the array is not C"):
            kv.load(hashes, [(strided[i, ::2],) for i in range(n)])
        assert kv.audit() == ""
