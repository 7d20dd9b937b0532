#!/usr/bin/env python3
"""An engine without a GPU, restarted: its KV cache comes back warm from kvbm's G3.

    python examples/python/engine_restart.py                 # the whole story, no arguments
    python examples/python/engine_restart.py --redis URL     # G4 on that Redis (else one is
                                                             # started when redis-server exists)

What it plays (each step a separate process, as a real restart is):

  1. engine A "computes" a prompt's KV cache: one NumPy page per block of 16
     tokens (random bytes standing in for attention keys and values), and
     stores the prefix in kvbm: G2, written through to the persistent G3 file;
  2. engine A exits; engine A' starts on the same directory, hashes the same
     prompt, finds every block in G3 (recovered and checksummed at start) and
     loads them back, comparing every byte with what A computed;
  3. two engines B and C with their own G3 files share a Redis (G4): C loads
     the prefix B stored, without ever having seen it, bytes compared.

Exit status 0 when every byte matched.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import kvbm

LAYERS, HEADS, HEAD_DIM, PAGE = 4, 8, 64, 16  # a small model: 4 layers, K and V


def config(directory, remote_url=None):
    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=LAYERS, outer_dim=2, page_size=PAGE,
                                 inner_dim=HEADS * HEAD_DIM, dtype_bytes=2),
        device=kvbm.TierConfig(blocks=64),      # G1: host memory standing in for the GPU
        host=kvbm.TierConfig(blocks=128),       # G2
        disk=kvbm.TierConfig(blocks=1024),      # G3: one preallocated, checksummed file
        disk_directory=directory,
        disk_persistent=True,                   # kept at exit, recovered at start
        disk_namespace="example-model@rev1",    # blocks of another model are never served
    )
    if remote_url:
        cfg.remote.urls = [remote_url]
        cfg.remote.model = "example-model@rev1"
    return cfg


def prompt():
    """A prompt of 200 tokens: 12 full blocks and a tail the cache does not hold."""
    return np.random.default_rng(7).integers(0, 32_000, size=200, dtype=np.uint32)


def kv_pages(n_blocks, block_bytes):
    """What the forward pass would write: the same bytes for the same prompt, every run."""
    return np.random.default_rng(1234).integers(0, 256, size=(n_blocks, block_bytes),
                                                dtype=np.uint8)


def compute_and_store(directory, remote_url=None):
    with kvbm.KvBlockManager(config(directory, remote_url)) as kv:
        _, hashes = kvbm.hash_tokens(prompt(), kv.block_size, salt=kvbm.salt(cache_salt="tenant-a"))
        pages = kv_pages(len(hashes), kv.block_bytes)  # (12, block_bytes) uint8, "the KV cache"
        held = kv.store(hashes, pages, chained=True)   # into G2; written through to G3 (and G4)
        kv.drain()                                     # every write has landed
        print(f"  stored {held} blocks of {kv.block_bytes} bytes; G3 holds "
              f"{kv.stats()['tiers']['G3']['registrations']}")
    return 0


def load_and_verify(directory, remote_url=None):
    with kvbm.KvBlockManager(config(directory, remote_url)) as kv:
        rec = kv.disk_recovery()
        print(f"  G3 recovered at start: {rec['recovered']} blocks in "
              f"{rec['elapsed_s'] * 1e3:.1f} ms")
        _, hashes = kvbm.hash_tokens(prompt(), kv.block_size, salt=kvbm.salt(cache_salt="tenant-a"))
        found = kv.probe(hashes)
        print(f"  probe: {found.disk} in G3, {found.remote} in G4, {found.device} in G1")
        out = np.zeros((len(hashes), kv.block_bytes), dtype=np.uint8)
        n = kv.load(hashes, out, chained=True)      # onboarded, verified, copied into `out`
        same = bool((out[:n] == kv_pages(len(hashes), kv.block_bytes)[:n]).all())
        print(f"  loaded {n} of {len(hashes)} blocks warm; bytes equal: {same}")
    return 0 if n == len(hashes) and same else 1


def step(*args):
    """Runs one step of the story in a fresh process."""
    return subprocess.run([sys.executable, __file__, *args]).returncode


def start_redis(directory):
    server = shutil.which("redis-server")
    if server is None:
        return None, None
    sock = os.path.join(directory, "redis.sock")
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", sock, "--save", "",
                             "--dir", directory], stdout=subprocess.DEVNULL)
    for _ in range(250):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            return proc, f"unix://{sock}"
        except OSError:
            time.sleep(0.02)
    proc.terminate()
    return None, None


def main():
    kvbm.set_log_level("error")  # kvbm's info and warning lines would interleave with the story
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis", help="a Redis URL for G4 (default: start a private redis-server)")
    p.add_argument("--step", choices=["store", "load"], help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.step == "store":
        return compute_and_store(args.dir, args.redis)
    if args.step == "load":
        return load_and_verify(args.dir, args.redis)

    rc = 0
    with tempfile.TemporaryDirectory(prefix="kvbm-example-") as tmp:
        a = os.path.join(tmp, "a")
        os.mkdir(a)
        print("1. engine A computes a prompt and stores its KV cache (process 1)")
        rc |= step("--step", "store", "--dir", a)
        print("2. engine A restarts and loads it warm from G3 (process 2)")
        rc |= step("--step", "load", "--dir", a)

        proc, url = (None, args.redis) if args.redis else start_redis(tmp)
        if url is None:
            print("3. skipped: no redis-server (give --redis URL, or install redis-server)")
        else:
            b, c = os.path.join(tmp, "b"), os.path.join(tmp, "c")
            os.mkdir(b)
            os.mkdir(c)
            try:
                print("3. engine B stores the prompt; engine C, sharing only G4, loads it")
                rc |= step("--step", "store", "--dir", b, "--redis", url)
                rc |= step("--step", "load", "--dir", c, "--redis", url)
            finally:
                if proc is not None:
                    proc.terminate()
                    proc.wait()
    print("every byte matched" if rc == 0 else "MISMATCH")
    return rc


if __name__ == "__main__":
    sys.exit(main())
