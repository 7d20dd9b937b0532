"""Python's hashes equal C++'s: the shared vector file, and fresh random cases
from the C++ test binary when it is built (scripts/test.sh sets KVBM_HASH_VECTORS_BIN)."""

import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvbm

from conftest import HERE, small_config
from skips import skip_or_fail


def read_cases(path):
    cases = []
    with open(path) as f:
        lines = [line.split() for line in f if line.strip() and not line.startswith("#")]
    for i in range(0, len(lines), 4):
        head, toks, blocks, seq = lines[i:i + 4]
        assert (head[0] == "case" and toks[0] == "tokens" and blocks[0] == "block"
                and seq[0] == "sequence")
        k = int(head[4])
        mm = [(int(head[5 + 2 * j]), int(head[6 + 2 * j])) for j in range(k)]
        cases.append(dict(
            block_size=int(head[1]),
            lora=None if head[2] == "-" else head[2],
            cache_salt=None if head[3] == "-" else head[3],
            mm=mm,
            tokens=[int(t) for t in toks[2:]],
            block=[int(h) for h in blocks[2:]],
            sequence=[int(h) for h in seq[2:]],
        ))
    return cases


def check(cases):
    assert len(cases) >= 40
    for i, c in enumerate(cases):
        salt = kvbm.salt(lora=c["lora"], cache_salt=c["cache_salt"])
        # as a NumPy array (no copy for uint32) and as a list
        for tokens in (np.array(c["tokens"], dtype=np.uint32), c["tokens"]):
            b, s = kvbm.hash_tokens(tokens, c["block_size"], salt=salt, mm_keys=c["mm"])
            assert b.dtype == np.uint64 and s.dtype == np.uint64
            assert b.tolist() == c["block"], f"case {i}: block hashes"
            assert s.tolist() == c["sequence"], f"case {i}: sequence hashes"


def test_vectors_file_equals_python():
    check(read_cases(HERE / "data" / "hash_vectors.txt"))


def test_fresh_random_cases_from_cpp(tmp_path):
    binary = os.environ.get("KVBM_HASH_VECTORS_BIN")
    if not binary or not os.path.exists(binary):
        skip_or_fail("hash vectors binary missing: KVBM_HASH_VECTORS_BIN not set (the C++ test "
                     "python_tests; scripts/test.sh sets it after the release stage)")
    out = tmp_path / "vectors.txt"
    proc = subprocess.run([binary], env={**os.environ, "KVBM_WRITE_HASH_VECTORS": str(out)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout.splitlines()[0:3])  # the seed, for a replay
    check(read_cases(out))


def test_salt_domains_are_separate():
    assert kvbm.salt() == 0
    assert kvbm.salt(lora="x") != kvbm.salt(cache_salt="x")
    assert kvbm.salt(lora="a", cache_salt="b") != kvbm.salt(lora="b", cache_salt="a")


def test_tail_and_int64_tokens():
    tokens = np.arange(50, dtype=np.int64)  # converted; the tail of 2 is not a block
    b, s = kvbm.hash_tokens(tokens, 16)
    assert len(b) == 3 and len(s) == 3
    assert s[0] == b[0]  # the first block's sequence hash is its block hash
    b2, s2 = kvbm.hash_tokens(tokens[:48].astype(np.uint32), 16)
    assert (s == s2).all()


def test_hash_key_is_stable_and_typed():
    assert kvbm.hash_key(b"abc") == kvbm.hash_key("abc")
    assert kvbm.hash_key(b"abc") != kvbm.hash_key(b"abd")
    keys = [b"k%d" % i for i in range(100)]
    arr = kvbm.hash_keys(keys)
    assert arr.dtype == np.uint64 and len(set(arr.tolist())) == 100
    assert arr[7] == kvbm.hash_key(b"k7")
    with pytest.raises(TypeError):
        kvbm.hash_key(7)


@settings(max_examples=150, deadline=None)
@given(tokens=st.lists(st.integers(0, 2**32 - 1), min_size=16, max_size=64),
       dtype=st.sampled_from(["uint32", "int64", "uint64", "int32", "list", "tuple", "strided"]))
def test_token_ids_of_any_integer_form_hash_alike(tokens, dtype):
    want = kvbm.hash_tokens(np.array(tokens, np.uint32), 16)
    if dtype == "list":
        arg = tokens
    elif dtype == "tuple":
        arg = tuple(tokens)
    elif dtype == "strided":
        arg = np.repeat(np.array(tokens, np.uint32), 3)[::3]
    elif dtype == "int32" and max(tokens) >= 2**31:
        return  # not representable in int32
    else:
        arg = np.array(tokens, dtype)
    got = kvbm.hash_tokens(arg, 16)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("bad", [2**32 + 5, -1, 2**32])
@pytest.mark.parametrize("form", ["int64", "list"])
def test_token_ids_that_do_not_fit_32_bits_are_refused(bad, form):
    tokens = [1] * 15 + [bad]
    arg = tokens if form == "list" else np.array(tokens, np.int64)
    with pytest.raises(kvbm.UsageError, match=f"hash_tokens: tokens: value 15 is {bad}"):
        kvbm.hash_tokens(arg, 16)


@pytest.mark.parametrize("arg", [np.full(16, 5.7), np.full(16, 5.0), np.ones(16, bool),
                                 [5.0] * 16, [True] * 16, ["5"] * 16])
def test_token_ids_that_are_not_integers_are_refused(arg):
    with pytest.raises(kvbm.UsageError, match="hash_tokens: tokens"):
        kvbm.hash_tokens(arg, 16)


def test_hash_values_are_checked_not_wrapped():
    with kvbm.KvBlockManager(small_config(disk=0)) as kv:
        with pytest.raises(kvbm.UsageError, match="probe: hashes: value 1 is -1"):
            kv.probe(np.array([1, -1], np.int64))
        with pytest.raises(kvbm.UsageError, match="probe: hashes: value 0 is 2\\^64 or more"):
            kv.probe([2**64])
        with pytest.raises(kvbm.UsageError, match="probe: hashes: the array's dtype is float64"):
            kv.probe(np.array([1.0, 2.0]))
        with pytest.raises(kvbm.UsageError, match="probe: hashes: the array has 2 dimensions"):
            kv.probe(np.zeros((2, 2), np.uint64))
        # every integer form of the same values means the same blocks
        h = kvbm.hash_keys([b"x", b"y", b"z"])
        kv.store(h, np.zeros((3, kv.block_bytes), np.uint8), chained=True)
        for form in (h, list(h.tolist()), np.repeat(h, 2)[::2], tuple(int(v) for v in h)):
            assert kv.probe(form).total == 3
