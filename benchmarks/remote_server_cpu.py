#!/usr/bin/env python3
"""redis-server's CPU per byte on kvbm's traffic beside redis-benchmark's, in interleaved rounds.

    python3 benchmarks/remote_server_cpu.py --op set --rounds 5 \\
        build/release/benchmarks/remote_bench [OTHER_REMOTE_BENCH ...]

Starts one redis-server on a free loopback port (no persistence) and, each round, runs every
remote_bench given (BM_RemoteStore_Put or _Get of 64 KiB blocks, batches of 32 over 2
connections) and then `redis-benchmark -c 2 -P 16 -d 65536` of the same command. For each run it
reads the server's CPU time (/proc/PID/stat) and its bytes in (SET) or out (GET) (INFO stats,
after CONFIG RESETSTAT), and prints the side's MB/s (Google Benchmark's, or redis-benchmark's
requests/s x 65536), the server's seconds of CPU per GB and the client's (the child's rusage,
the whole process), then each side's medians and its ratios to redis-benchmark in the same round
(median, min..max). Two remote_bench builds (before and after a change) compare in one sitting.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

from redis_cluster import free_port  # this directory: the one free-port helper


class Server:
    def __init__(self, tmp):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--protected-mode", "no"],
            stdout=subprocess.DEVNULL)
        for _ in range(200):
            if self.cli("ping").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING")

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True).stdout

    def cpu(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def stat(self, key):
        for line in self.cli("info", "stats").splitlines():
            if line.startswith(key + ":"):
                return int(line.split(":")[1])
        raise RuntimeError(f"INFO stats has no {key}")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(server, op, side):
    server.cli("config", "resetstat")
    c0, k0 = server.cpu(), children_cpu()
    if side == "redis-benchmark":
        out = subprocess.run(
            ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-c", "2", "-t", op,
             "-d", "65536", "-n", "20000", "-P", "16", "--csv"],
            capture_output=True, text=True, check=True).stdout
        line = next(x for x in out.splitlines() if x.startswith(f'"{op.upper()}"'))
        mbs = float(line.split(",")[1].strip('"')) * 65536 / 1e6
    else:
        case = "Put" if op == "set" else "Get"
        env = dict(os.environ, KVBM_REDIS_URL=f"redis://127.0.0.1:{server.port}/0")
        out = subprocess.run(
            [side, f"--benchmark_filter=^BM_RemoteStore_{case}/kib:64/",
             "--benchmark_format=json", "--benchmark_min_time=1"],
            capture_output=True, text=True, env=env, check=True).stdout
        mbs = json.loads(out)["benchmarks"][0]["bytes_per_second"] / 1e6
    gb = server.stat("total_net_input_bytes" if op == "set" else "total_net_output_bytes") / 1e9
    return {"mbs": mbs, "server": (server.cpu() - c0) / gb, "client": (children_cpu() - k0) / gb}


def spread(v, fmt="{:.3f}"):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}..{fmt.format(max(v))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("benches", nargs="+", help="remote_bench binaries")
    ap.add_argument("--op", choices=("set", "get"), default="set")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for tool in ("redis-server", "redis-cli", "redis-benchmark"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found: bash scripts/deps.sh installs it")
    sides = [os.path.abspath(b) for b in args.benches] + ["redis-benchmark"]
    tmp = tempfile.mkdtemp(prefix="kvbm-server-cpu-")
    server = Server(tmp)
    try:
        if args.op == "get":  # redis-benchmark's GET reads the key its SET writes
            run(server, "set", "redis-benchmark")
        res = {s: [] for s in sides}
        for r in range(args.rounds):
            load = open("/proc/loadavg").read().split()[0]
            for s in sides:
                res[s].append(run(server, args.op, s))
                x = res[s][-1]
                print(f"round {r + 1} (load {load}) {s}: {x['mbs']:.0f} MB/s, server "
                      f"{x['server']:.3f} s/GB, client {x['client']:.3f} s/GB", flush=True)
        base = res["redis-benchmark"]
        for s in sides:
            v = res[s]
            print(f"{s}: {spread([x['mbs'] for x in v], '{:.0f}')} MB/s, server "
                  f"{spread([x['server'] for x in v])} s/GB, client "
                  f"{spread([x['client'] for x in v])} s/GB")
            if s != "redis-benchmark":
                mb = [a["mbs"] / b["mbs"] for a, b in zip(v, base)]
                cpu = [a["server"] / b["server"] for a, b in zip(v, base)]
                print(f"  / redis-benchmark: MB/s {spread(mb, '{:.2f}')}, server CPU per byte "
                      f"{spread(cpu, '{:.2f}')}")
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
