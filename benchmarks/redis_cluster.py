"""A Redis Cluster on loopback for benchmarks/compare.py, started as
benchmarks/remote_vs_redis.sh starts it: 3 primaries, no replicas, no persistence,
`--cluster-node-timeout 1000`, each server and its cluster bus on a free port of 127.0.0.1.
"""
import os
import socket
import subprocess
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout


class RedisCluster:
    """start() brings the cluster up (every slot served, state ok on every node); stop()
    ends the servers it started, and only those."""

    def __init__(self, directory, primaries=3):
        self.directory, self.primaries = directory, primaries
        self.ports, self.servers = [], []

    def start(self):
        for i in range(self.primaries):
            port, d = free_port(), os.path.join(self.directory, f"node{i}")
            os.makedirs(d, exist_ok=True)
            self.servers.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", d, "--logfile", os.path.join(d, "redis.log"),
                 "--protected-mode", "no", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
                 "--cluster-port", str(free_port())], stdout=subprocess.DEVNULL))
            self.ports.append(port)
            self._wait(lambda p=port: cli(p, "ping").strip() == "PONG", f"redis-server on {port}")
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-500:]}")
        self._wait(lambda: all("cluster_state:ok" in cli(p, "cluster", "info")
                               for p in self.ports), "cluster_state:ok on every primary")
        return self

    def _wait(self, ready, what):
        for _ in range(200):
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Redis Cluster: no {what} after 10 s (logs in {self.directory})")

    def url(self):
        """The store's URL: two seed nodes; the client learns the slot map from them."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:2])

    def flush(self):
        for p in self.ports:
            cli(p, "flushall")

    def stop(self):
        for s in self.servers:
            s.terminate()
        for s in self.servers:
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()
        self.servers, self.ports = [], []
