"""What benchmarks/compare.py measures: each kvbm figure beside its baseline.

A Comparison pairs a kvbm Measure with a baseline Measure (or none, for a figure with an
absolute target) and a target on the ratio kvbm / baseline, both in the measure's own unit:
costs (ns per block) are compared with "<=", rates (tokens/s, bytes/s) with ">=", and an
optional absolute mark on kvbm's own median (kvbm_target, e.g. a recovery under 2000 ms).
Measures run one process each, so that a round is one run of each side; the Python benchmarks
alternate their two sides themselves, and a round is one run of the script
(script_measure.py). Servers (one redis-server, a 3-primary Redis Cluster: redis_cluster.py)
start on first use and stop when the Context ends.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from redis_cluster import RedisCluster
from script_measure import ScriptFigure, ScriptRuns


class Context:
    """The build directory, and the servers and scratch directories rounds share."""

    def __init__(self, build):
        self.build = build
        self.tmp = None
        self.redis = None
        self.redis_port = None
        self.disk_dir = None
        self.redis_cluster = None
        self.scripts = ScriptRuns()

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="kvbm-compare-")
        return self

    def __exit__(self, *exc):
        if self.redis:
            self.redis.terminate()
            self.redis.wait(timeout=10)
        if self.redis_cluster:
            self.redis_cluster.stop()
        for d in (self.tmp, self.disk_dir):
            if d:
                shutil.rmtree(d, ignore_errors=True)

    def bin(self, rel):
        return os.path.join(self.build, rel)

    def redis_url(self):
        """Starts one redis-server on a free loopback port (once) and returns its URL."""
        if self.redis is None:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.redis_port = s.getsockname()[1]
            s.close()
            self.redis = subprocess.Popen(
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.tmp,
                 "--protected-mode", "no"], stdout=subprocess.DEVNULL)
            for _ in range(200):
                r = subprocess.run(["redis-cli", "-p", str(self.redis_port), "ping"],
                                   capture_output=True, text=True)
                if r.stdout.strip() == "PONG":
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("redis-server did not answer PING")
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def cluster(self):
        """Starts a 3-primary Redis Cluster on loopback (once) and returns it."""
        if self.redis_cluster is None:
            self.redis_cluster = RedisCluster(os.path.join(self.tmp, "cluster")).start()
        return self.redis_cluster

    def disk(self):
        """A scratch directory on a real disk (KVBM_BENCH_DISK_DIR, default /var/tmp)."""
        if self.disk_dir is None:
            base = os.environ.get("KVBM_BENCH_DISK_DIR", "/var/tmp")
            self.disk_dir = tempfile.mkdtemp(prefix="kvbm-compare-", dir=base)
        return self.disk_dir


class GBench:
    """One Google Benchmark case of one binary, run alone; `field` says what is read."""

    def __init__(self, binary, case, field="ns_per_item", min_time=0.5, env=None, what=None):
        self.binary, self.case, self.field = binary, case, field
        self.min_time, self.env = min_time, env or {}
        self.what = what or case.split("/")[0].removeprefix("BM_").rstrip("$")
        self.unit = {"ns_per_item": "ns", "items_per_second": "M items/s",
                     "bytes_per_second": "MB/s", "real_time": "ms",
                     "k_items_per_second": "k items/s",
                     "p50_us": "us (p50)"}.get(field, field)

    def missing(self, ctx):
        path = ctx.bin(f"benchmarks/{self.binary}")
        return None if os.path.exists(path) else f"{path} not built"

    def measure(self, ctx):
        env = dict(os.environ)
        for k, v in self.env.items():
            env[k] = v(ctx) if callable(v) else v
        out = subprocess.run(
            [ctx.bin(f"benchmarks/{self.binary}"), f"--benchmark_filter=^{self.case}",
             "--benchmark_format=json", f"--benchmark_min_time={self.min_time}"],
            capture_output=True, text=True, env=env, check=True).stdout
        runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") != "aggregate"]
        if len(runs) != 1:
            raise RuntimeError(f"{self.binary} {self.case}: {len(runs)} cases matched, not 1")
        b = runs[0]
        if b.get("error_occurred"):
            raise RuntimeError(f"{self.binary} {self.case}: {b.get('error_message')}")
        if self.field == "ns_per_item":
            return 1e9 / b["items_per_second"]
        if self.field == "items_per_second":
            return b["items_per_second"] / 1e6
        if self.field == "k_items_per_second":
            return b["items_per_second"] / 1e3
        if self.field == "bytes_per_second":
            return b["bytes_per_second"] / 1e6
        if self.field == "real_time":
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            return b["real_time"] * scale
        return b[self.field]


class Fio:
    """fio on the disk directory, with the engine, queue depth and I/O size given.

    With `file` (reads only), fio reads that file of the disk directory instead of its own
    fio.dat: the pool file the kvbm side of the same round wrote and read (disk_bench,
    KVBM_BENCH_DISK_KEEP), so both sides read the same written extents in the same state.
    With `fixedbufs`, io_uring reads go into registered buffers, as kvbm's do. With `payload`,
    the bytes counted are the payload of each I/O (the 2 MiB block of each 2 MiB + 4 KiB
    slot), as kvbm counts them. With `replay` (a file of the disk directory: the slot order
    kvbm's side read, one index a line, disk_bench KVBM_BENCH_DISK_ORDER), fio reads those
    slots in that order again and again (an iolog) for its runtime instead of its own random
    order: the same reads as kvbm's iterations."""

    def __init__(self, rw, engine, depth, bs, size, runtime=4, fdatasync=0, file=None,
                 fixedbufs=False, payload=None, replay=None):
        self.rw, self.engine, self.depth, self.bs, self.size = rw, engine, depth, bs, size
        self.runtime, self.fdatasync, self.file = runtime, fdatasync, file
        self.fixedbufs, self.payload, self.replay = fixedbufs, payload, replay
        self.what = f"fio {engine} {rw} qd {depth}" + (
            f", fdatasync every {fdatasync} writes a job" if fdatasync else "") + (
            ", kvbm's pool file" if file else "") + (", fixedbufs" if fixedbufs else "") + (
            ", kvbm's slot order" if replay else "")
        self.unit = "MB/s"

    def missing(self, ctx):
        return None if shutil.which("fio") else "fio not installed (apt-get install -y fio)"

    def measure(self, ctx):
        # psync reaches a queue depth of N with N jobs; io_uring/libaio with one job N deep.
        sync = self.engine == "psync"
        path = os.path.join(ctx.disk(), self.file or "fio.dat")
        if self.file and os.path.getsize(path) < self.size:  # never let fio lay it out anew
            raise RuntimeError(f"{path} is smaller than {self.size} bytes")
        cmd = ["fio", "--name=cmp", f"--filename={path}", f"--bs={self.bs}", "--direct=1",
               f"--ioengine={self.engine}", f"--numjobs={self.depth if sync else 1}",
               f"--iodepth={1 if sync else self.depth}", "--group_reporting",
               f"--runtime={self.runtime}", f"--fdatasync={self.fdatasync}",
               "--output-format=json"]
        if self.replay:
            cmd += [f"--read_iolog={self.iolog(ctx, path)}", f"--replay_redirect={path}"]
        else:
            cmd += [f"--size={self.size}", f"--rw={self.rw}", "--time_based", "--randrepeat=0"]
        if not self.file:
            cmd.append("--fallocate=native")
        if self.fixedbufs:
            cmd.append("--fixedbufs")
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]
        bw = job["read" if "read" in self.rw else "write"]["bw_bytes"]
        return bw * (self.payload / self.bs if self.payload else 1) / 1e6

    def iolog(self, ctx, path):
        """Writes the replayed reads as an fio iolog: kvbm's slot order, more passes than fio
        reads in its runtime at 8 GB/s (--runtime ends the replay). Returns its path."""
        order = [int(line) for line in open(os.path.join(ctx.disk(), self.replay))]
        log = path + ".iolog"
        with open(log, "w") as f:
            f.write("fio version 2 iolog\npool add\npool open\n")
            for _ in range(math.ceil(self.runtime * 8e9 / self.size)):
                f.writelines(f"pool read {b * self.bs} {self.bs}\n" for b in order)
            f.write("pool close\n")
        return log


class RedisBenchmark:
    """redis-benchmark against the context's server: SET or GET of `size` bytes."""

    def __init__(self, op, size, pipeline=16, clients=2, requests=None, cluster=False):
        self.op, self.size, self.pipeline, self.clients = op, size, pipeline, clients
        self.requests = requests or (2000 if size >= 1 << 20 else 20000)
        self.cluster = cluster
        self.what = f"redis-benchmark {op} -P {pipeline} -c {clients}" + (
            " --cluster" if cluster else "")
        self.unit = "MB/s"

    def missing(self, ctx):
        return None if shutil.which("redis-benchmark") else "redis-benchmark not installed"

    def measure(self, ctx):
        if self.cluster:
            port, where = ctx.cluster().ports[0], ["--cluster"]
        else:
            ctx.redis_url()
            port, where = ctx.redis_port, []
        # -t set,get: the SET pass writes the key the GET pass then reads (a hit).
        out = subprocess.run(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), *where,
             "-c", str(self.clients), "-t", "set,get", "-d", str(self.size),
             "-n", str(self.requests), "-P", str(self.pipeline), "--csv"],
            capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if cells and cells[0] == self.op:
                return float(cells[1]) * self.size / 1e6
        raise RuntimeError(f"redis-benchmark printed no {self.op} line")


class Replay:
    """kvbm-replay on the shipped trace: M blocks per second, metadata only by default; with
    bytes (metadata_only=False), k blocks per second, and a round fails if any onboarded
    block fails its verification."""

    def __init__(self, args=(), metadata_only=True):
        self.args, self.metadata_only = list(args), metadata_only
        self.what = " ".join(["kvbm-replay"] + (["--metadata-only"] if metadata_only else [])
                             + self.args)
        self.unit = "M blocks/s" if metadata_only else "k blocks/s"

    def missing(self, ctx):
        path = ctx.bin("tools/replay/kvbm-replay")
        return None if os.path.exists(path) else f"{path} not built"

    def measure(self, ctx):
        mode = ["--metadata-only"] if self.metadata_only else []
        out = subprocess.run([ctx.bin("tools/replay/kvbm-replay"), *mode, "--json", *self.args],
                             capture_output=True, text=True, check=True).stdout
        result = json.loads(out)["result"]
        if not self.metadata_only and result["verification"]["failures"]:
            raise RuntimeError(f"{self.what}: {result['verification']['failures']} blocks "
                               "failed their verification")
        return result["blocks_per_second"] / (1e6 if self.metadata_only else 1e3)


class Comparison:
    """`target` is judged on the median ratio kvbm / baseline (on kvbm's median where there is
    no baseline); `kvbm_target`, where given, on kvbm's own median as well (an absolute mark,
    such as a recovery under 2 s, beside a ratio to a baseline)."""

    def __init__(self, name, what, kvbm, baseline, target=None, kvbm_target=None):
        self.name, self.what, self.kvbm, self.baseline = name, what, kvbm, baseline
        self.target, self.kvbm_target = target, kvbm_target

    def missing(self, ctx):
        for m in (self.kvbm, self.baseline):
            reason = m.missing(ctx) if m else None
            if reason:
                return reason
        return None


def gb_pair(name, what, binary, case, base_case, field="ns_per_item", target=None, **kw):
    return Comparison(name, what, GBench(binary, case, field, **kw),
                      GBench(binary, base_case, field, **kw), target)


# The disk benchmark's block: 32 layers x K,V x 16 tokens x 8 heads x 128 x 2 bytes = 2 MiB;
# its slot (each engine I/O) adds the footer and rounds up to 4 KiB.
DISK_BLOCK = 32 * 2 * 16 * 8 * 128 * 2
DISK_SLOT = (DISK_BLOCK + 64 + 4095) // 4096 * 4096
DISK_BLOCKS = int(os.environ.get("KVBM_BENCH_DISK_BLOCKS", "256"))
DISK_QD = int(os.environ.get("KVBM_BENCH_QD", "4"))


def registers_buffers(slots):
    """Whether io_uring_register_buffers of `slots` slots succeeds here (as root, or within
    RLIMIT_MEMLOCK): kvbm's io_uring engine then reads with READ_FIXED, so fio gets --fixedbufs."""
    import resource
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= slots * DISK_SLOT


# The file a kvbm read round leaves in the disk directory (disk_bench, KVBM_BENCH_DISK_KEEP),
# which the fio read of the same round reads.
DISK_KEPT = "kvbm-pool.slots"
# The slot order that read round read (disk_bench, KVBM_BENCH_DISK_ORDER), which fio's io_uring
# read of the same round replays.
DISK_ORDER = "kvbm-pool.order"


def disk_comparisons():
    """Each engine beside fio with the same engine: psync (N jobs, one I/O each) against the
    thread pool, io_uring (one job, N deep) against kvbm's io_uring engine. Reads: fio reads the
    pool file kvbm's side wrote and read just before in the same round (the same extents, both
    O_DIRECT), with registered buffers where kvbm's ring has them, counting payload bytes."""
    env = {"KVBM_BENCH_DISK_DIR": lambda ctx: ctx.disk(),
           "KVBM_BENCH_DISK_BLOCKS": str(DISK_BLOCKS)}
    size = DISK_BLOCKS * DISK_SLOT
    out = []
    for engine, fio_engine, label in ((0, "psync", "thread pool"), (1, "io_uring", "io_uring")):
        for op, case, rw in (("write", "BM_DiskWriteEngine_Write", "randwrite"),
                             ("read", "BM_DiskReadEngine_Read", "randread")):
            kvbm_env = dict(env, KVBM_BENCH_DISK_KEEP=DISK_KEPT,
                            KVBM_BENCH_DISK_ORDER=DISK_ORDER) if op == "read" else env
            kvbm = GBench("disk_bench", f"{case}/qd:{DISK_QD}/engine:{engine}/",
                          "bytes_per_second", min_time=1.0, env=kvbm_env,
                          what=f"kvbm {label} {op}")
            if op == "read":
                fio = Fio(rw, fio_engine, DISK_QD, DISK_SLOT, size, file=DISK_KEPT,
                          fixedbufs=engine == 1 and registers_buffers(2 * DISK_QD),
                          payload=DISK_BLOCK, replay=DISK_ORDER if engine == 1 else None)
            else:
                fio = Fio(rw, fio_engine, DISK_QD, DISK_SLOT, size)
            target = {(1, "read"): ">= 0.95", (1, "write"): ">= 0.95",
                      (0, "read"): ">= 0.9"}.get((engine, op))
            out.append(Comparison(f"disk-{op}-{fio_engine.replace('_', '')}",
                                  f"G3 {op} (checksums included), {label}, qd {DISK_QD}"
                                  + (", one file" if op == "read" else ""), kvbm, fio, target))
    return out


def remote_comparisons():
    out = []
    for kib in (64, 1024):
        for op, case in (("SET", "BM_RemoteStore_Put"), ("GET", "BM_RemoteStore_Get")):
            kvbm = GBench("remote_bench", f"{case}/kib:{kib}/", "bytes_per_second", min_time=1.0,
                          env={"KVBM_REDIS_URL": lambda ctx: ctx.redis_url()},
                          what=f"RemoteStore {op}")
            base = RedisBenchmark(op, kib * 1024)
            out.append(Comparison(f"remote-{op.lower()}-{kib}k",
                                  f"G4 {op} of {kib} KiB blocks, one redis-server", kvbm, base,
                                  ">= 0.8"))
    return out


def remote_cluster_comparisons():
    """The remote tier on a 3-primary Redis Cluster (batches of 32 split by slot, 2 worker
    connections per primary) beside redis-benchmark --cluster, 2 clients per primary."""
    out = []
    for kib in (64, 1024, 2048):
        for op, case in (("SET", "BM_RemoteStore_Put"), ("GET", "BM_RemoteStore_Get")):
            kvbm = GBench("remote_bench", f"{case}/kib:{kib}/", "bytes_per_second", min_time=1.0,
                          env={"KVBM_REDIS_URL": lambda ctx: ctx.cluster().url()},
                          what=f"RemoteStore {op}, cluster")
            base = RedisBenchmark(op, kib * 1024, clients=6, cluster=True)
            out.append(Comparison(f"remote-cluster-{op.lower()}-{kib}k",
                                  f"G4 {op} of {kib} KiB blocks, 3-primary Redis Cluster", kvbm,
                                  base, ">= 0.8"))
    return out


def host_engine_comparisons():
    """The host engine beside memcpy of the same bytes (contiguous to contiguous) at equal
    threads, for batches of 16, 32 and 64 blocks of 2 MiB: one engine worker beside one memcpy
    thread (-1), and the engine's default worker count N beside N memcpy threads, each copying
    1/N of the bytes (-n); both baselines run on worker threads the caller starts and waits for,
    as the engine's. Paths: offload (G1 layer-separated -> G2 contiguous), onboard (G2 -> G1),
    separated -> separated."""
    out = []
    for label, case, what, target in (
            ("offload", "SeparatedToContiguous", "G1 layer-separated -> G2 contiguous", ">= 0.9"),
            ("onboard", "ContiguousToSeparated", "G2 contiguous -> G1 layer-separated", ">= 0.9"),
            ("separated", "SeparatedToSeparated", "layer-separated -> layer-separated", None)):
        for blocks in (16, 32, 64):
            for threads, tag, says in ((1, "1", "1 thread"), (0, "n", "N threads")):
                args = f"blocks:{blocks}/threads:{threads}/"
                out.append(gb_pair(f"host-{label}-{blocks}-{tag}",
                                   f"host engine, {what}, {blocks} blocks ({2 * blocks} MiB), "
                                   f"{says}", "host_engine_bench", f"BM_HostEngine_{case}/{args}",
                                   f"BM_Memcpy_Threads/{args}", "bytes_per_second", target))
    return out


def recovery_comparisons():
    """The persistent disk pool: recover() of 100,000 slots of 4 KiB blocks beside the same
    file read whole in 4 MiB preads by 8 threads (times: the ratio is recover / bare); the
    price of durability (persistent / scratch writes, batches of 8 and 64 2 MiB blocks); fio's
    random writes with an fdatasync every 16 writes a job beside none."""
    rb = "disk_recovery_bench"
    env = {"KVBM_BENCH_DISK_DIR": lambda ctx: ctx.disk()}
    bare = GBench(rb, "BM_BarePread_WholeFile/8/", "real_time", env=env,
                  what="bare pread of the file, 8 threads")
    out = []
    for mode, case, threads in (("runs", "Recover", 1), ("runs", "Recover", 8),
                                ("headers", "RecoverHeaders", 8),
                                ("headers", "RecoverHeaders", 32)):
        kvbm = GBench(rb, f"BM_DiskRecovery_{case}/{threads}/", "real_time", env=env,
                      what=f"recover(), {mode}, {threads} threads")
        how = "runs of whole slots" if mode == "runs" else "a 4 KiB header pread per slot"
        out.append(Comparison(f"recovery-{mode}-{threads}",
                              f"recover() of 100,000 slots, {how}, {threads} thread"
                              + ("s" if threads > 1 else ""), kvbm, bare,
                              kvbm_target="<= 2000" if mode == "runs" else None))
    # The write cases need no large pool to recover: a small one keeps each process short.
    wenv = dict(env, KVBM_BENCH_RECOVERY_SLOTS="4096")
    for batch in (8, 64):
        out.append(Comparison(
            f"durability-{batch}", f"persistent pool writes beside scratch, batches of {batch}",
            GBench(rb, f"BM_DiskWriteEngine_WritePersistent/{batch}/", "bytes_per_second",
                   env=wenv, what="persistent (3 stages, 3 fdatasyncs)"),
            GBench(rb, f"BM_DiskWriteEngine_WriteScratch/{batch}/", "bytes_per_second",
                   env=wenv, what="scratch (no sync)")))
    out.append(Comparison(
        "durability-fio", "fio psync random writes, 4 jobs, fdatasync every 16 beside none",
        Fio("randwrite", "psync", 4, DISK_SLOT, 64 * DISK_SLOT, fdatasync=16),
        Fio("randwrite", "psync", 4, DISK_SLOT, 64 * DISK_SLOT)))
    return out


def offload_comparisons():
    """offload_bench (512 KiB blocks, G1 emulated in host memory): the pipeline beside the host
    engine alone on the same batches, onboarding a 1,000-block prefix beside the raw engines."""
    ob = "offload_bench"
    env = {"KVBM_BENCH_DIR": lambda ctx: ctx.disk()}

    def gb(case, what):
        return GBench(ob, f"{case}/", "k_items_per_second", env=env, what=what)
    return [
        Comparison("offload-pipeline", "pipeline G1 -> G2 (blocks/s), host engine",
                   gb("BM_Pipeline_HostEngine", "pipeline"),
                   gb("BM_Engine_HostEngine_Alone", "host engine alone"), ">= 0.9"),
        Comparison("offload-pipeline-null", "pipeline G1 -> G2 (blocks/s), engine copying nothing",
                   gb("BM_Pipeline_NullEngine", "pipeline, null engine"), None),
        Comparison("onboard-g2", "onboard a 1,000-block prefix from G2 (blocks/s)",
                   gb("BM_Onboard_FromHost", "onboard from G2"),
                   gb("BM_Engine_HostToDevice_Raw", "G2 -> G1 host engine, one batch")),
        Comparison("onboard-g3", "onboard a 1,000-block prefix from G3 (blocks/s)",
                   gb("BM_Onboard_FromDisk", "onboard from G3"),
                   gb("BM_Engine_DiskRead_Raw", "disk read engine, 1,000 slots")),
    ]


def replay_comparisons():
    wt = ["--offload-mode", "write_through"]
    return [
        Comparison("replay-metadata", "replay of the shipped trace, metadata only",
                   Replay(), None, ">= 5"),
        Comparison("replay-write-through", "replay, metadata only, write-through / on-eviction",
                   Replay(wt), Replay()),
        Comparison("replay-bytes", "replay of the shipped trace, bytes moved and verified",
                   Replay(metadata_only=False), None),
        Comparison("replay-bytes-write-through",
                   "replay, bytes moved and verified, write-through / on-eviction",
                   Replay(wt, metadata_only=False), Replay(metadata_only=False)),
    ]


def router_comparisons():
    rb = "router_bench"
    out = [gb_pair("router-apply", "KvIndexer::apply, 64 instances (per block)", rb,
                   "BM_KvIndexer_Apply$", "BM_Baseline_HashMapInsert$")]
    for instances in (64, 8, 1):
        for blocks in (256, 16):
            arg = f"instances:{instances}/blocks:{blocks}$"
            out.append(gb_pair(f"router-overlaps-{instances}-{blocks}",
                               f"KvIndexer::overlaps, {instances} instance"
                               f"{'s' if instances > 1 else ''}, {blocks} blocks "
                               "(per block)", rb, f"BM_KvIndexer_Overlaps/{arg}",
                               f"BM_Baseline_HashMapFind/{arg}"))
    out.append(gb_pair("router-route", "KvRouter route + finish, 64 instances, 256 blocks "
                       "(per block)", rb, "BM_KvRouter_Route/instances:64/blocks:256$",
                       "BM_Baseline_HashMapFind/instances:64/blocks:256$"))
    out.append(Comparison(
        "router-process", "kvbm-router POST /route, 32 blocks over 8 instances (p50)",
        GBench("router_process_bench", "BM_RouterProcess_Route/", "p50_us"),
        GBench("router_process_bench", "BM_Baseline_HttpRoundTrip/", "p50_us",
               what="bare HTTP round trip")))
    return out


# The Python benchmarks' figures (benchmarks/python/): key in their --json, unit, target.
SGLANG_FIGURES = (("set", "GB/s", None), ("get", "GB/s", ">= 1.0"), ("exists", "us", None))
VLLM_FIGURES = tuple((k, "GB/s") for k in ("store", "store_disk", "promote", "promote_old")) + \
    tuple((f"{w}_{p}", "us") for w in ("present", "present_key", "absent", "absent_key")
          for p in ("p50", "p99")) + (("present_steps", "steps"), ("absent_steps", "steps"))


def engine_comparisons():
    """SGLang's HiCacheFile beside KvbmStorage (32 pages of 2 MiB), vLLM's fs tier beside
    KvbmTier (64 chunks of 2 MiB); each round is one run of the script (script_measure.py)."""
    out = []
    sg, vl = "sglang_storage_bench.py", "vllm_tier_bench.py"
    for key, unit, target in SGLANG_FIGURES:
        out.append(Comparison(f"sglang-{key}", f"SGLang storage backend, batch_{key} ({unit})",
                              ScriptFigure(sg, "kvbm", key, unit, "KvbmStorage", ["--pages", "32"]),
                              ScriptFigure(sg, "file", key, unit, "HiCacheFile", ["--pages", "32"]),
                              target))
    for key, unit in VLLM_FIGURES:
        args = ["--chunks", "64"]
        out.append(Comparison(f"vllm-{key.replace('_', '-')}",
                              f"vLLM secondary tier, {key} ({unit})",
                              ScriptFigure(vl, "kvbm", key, unit, "KvbmTier", args),
                              ScriptFigure(vl, "fs", key, unit, "vLLM fs tier", args)))
    return out


def all_comparisons():
    bm, hb = "block_manager_bench", "hashing_bench"
    base = "BM_Baseline_UnorderedMapLookup$"
    comps = [
        gb_pair("match-inactive", "match_blocks, hits on inactive blocks (per block)", bm,
                "BM_BlockManager_MatchInactive$", base, target="<= 1.2"),
        gb_pair("match-active", "match_blocks, hits on blocks in use (per block)", bm,
                "BM_BlockManager_MatchActive$", base, target="<= 3"),
        gb_pair("match-miss", "match_blocks whose first hash misses (per call)", bm,
                "BM_BlockManager_MatchMiss$", base, target="<= 3"),
        gb_pair("lifecycle-single", "one block per call, from the reset pool", bm,
                "BM_BlockManager_LifecycleSingle/evicting:0$", base, target="<= 8"),
        gb_pair("lifecycle-single-evicting", "one block per call, each evicting", bm,
                "BM_BlockManager_LifecycleSingle/evicting:1$", base),
        Comparison("build-1m", "build a 1,000,000-block manager",
                   GBench(bm, "BM_BlockManager_Build1M", "real_time", min_time=0.1), None,
                   "<= 200"),
        gb_pair("lifecycle-batch", "32-block batches, from the reset pool (per block)", bm,
                "BM_BlockManager_LifecycleFromReset/32$", base),
        gb_pair("lifecycle-batch-evicting", "32-block batches, each evicting (per block)", bm,
                "BM_BlockManager_LifecycleEvicting/32$", base),
    ]
    for tokens in (16, 32, 64):
        comps.append(gb_pair(f"hashing-{tokens}", f"hash_blocks, {tokens}-token blocks", hb,
                             f"BM_HashBlocks_Batch/tokens:4096/block:{tokens}$",
                             f"BM_Xxh3_RawBlocks/tokens:4096/block:{tokens}$",
                             "items_per_second", ">= 0.9" if tokens == 16 else None))
    comps += replay_comparisons()
    comps += disk_comparisons()
    comps += remote_comparisons()
    comps += remote_cluster_comparisons()
    comps += host_engine_comparisons()
    comps += recovery_comparisons()
    comps += offload_comparisons()
    comps += router_comparisons()
    comps += engine_comparisons()
    return comps


def check_names():
    """Names are unique and usable with --only."""
    names = [c.name for c in all_comparisons()]
    assert len(names) == len(set(names)), names
    assert all(re.fullmatch(r"[a-z0-9-]+", n) for n in names), names
