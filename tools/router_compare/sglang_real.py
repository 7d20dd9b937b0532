#!/usr/bin/env python3
"""SGLang's real router (sglang-router 0.3.2, `--policy cache_aware`, its
defaults) in front of the cluster model of router_compare.py (cluster_model.py).

Starts N tiny HTTP workers in this process, the router binary in front of
them (`python -m sglang_router.launch_router`, from a venv that has the
wheel), and replays the trace through cluster_model.simulate: each request
goes to the router's /generate, the worker that receives it is the choice,
and the worker holds its answer until the request's simulated prefill ends
(in simulated time: the driver releases it when the next arrival passes its
end), so the router sees the same requests in flight, per worker, as the
Python routers do. A request's text is one character per token: each block
is the character U+10000 + block id repeated for the block's tokens, so that
requests share text exactly as far as they share blocks.

    build/rcmp-peers/venv/bin/python tools/router_compare/sglang_real.py \\
        --replay build/rcmp/tools/replay/kvbm-replay
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_model  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Shared:
    """What the workers and the driver share: who received which request, and
    the events that release each answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.received = {}   # rid -> worker
        self.arrived = {}    # rid -> Event: a worker has it
        self.release = {}    # rid -> Event: answer it

    def events(self, rid):
        with self.lock:
            if rid not in self.arrived:
                self.arrived[rid] = threading.Event()
                self.release[rid] = threading.Event()
            return self.arrived[rid], self.release[rid]


def worker(index, shared):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (health, model and server info probes)
            self._reply({"model_path": "dummy", "tokenizer_path": "dummy",
                         "is_generation": True, "worker": index})

        def do_POST(self):  # noqa: N802
            n = int(self.headers.get("Content-Length", 0))
            rid = json.loads(self.rfile.read(n)).get("rid")
            if rid is not None:
                arrived, release = shared.events(rid)
                with shared.lock:
                    shared.received[rid] = index
                arrived.set()
                release.wait()
            self._reply({"text": "", "worker": index,
                         "meta_info": {"id": str(rid), "finish_reason": {"type": "length"},
                                       "prompt_tokens": 1, "completion_tokens": 1}})

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class SglangReal:
    """A router for cluster_model.simulate: the real SGLang router over HTTP."""

    def __init__(self, base, shared):
        self.base = base
        self.shared = shared
        self.rid = 0
        self.done = {}

    def attach(self, cl):
        self.n = cl.n

    def _send(self, rid, body, done):
        req = urllib.request.Request(self.base + "/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
        finally:
            done.set()

    def route(self, arrival, length, hashes):
        rid = f"r{self.rid}"
        self.rid += 1
        body = json.dumps({"text": text_of(length, hashes), "rid": rid,
                           "sampling_params": {"max_new_tokens": 1}},
                          ensure_ascii=False).encode()
        arrived, _ = self.shared.events(rid)
        done = self.done[rid] = threading.Event()
        threading.Thread(target=self._send, args=(rid, body, done), daemon=True).start()
        if not arrived.wait(60):
            raise RuntimeError(f"sglang_real: request {rid} reached no worker")
        with self.shared.lock:
            return self.shared.received[rid], rid

    def started(self, k, rid, prefix):
        pass

    def finished(self, k, rid):
        _, release = self.shared.events(rid)
        release.set()
        if not self.done.pop(rid).wait(60):
            raise RuntimeError(f"sglang_real: request {rid} was not answered")

    def release_all(self):
        for rid in list(self.done):
            self.finished(None, rid)

    def extra(self):
        return ""


def text_of(length, hashes):
    return "".join(chr(0x10000 + h) * cluster_model.tokens_in_block(length, i)
                   for i, h in enumerate(hashes))


def start_router(n, shared, log_path):
    workers = [worker(k, shared) for k in range(n)]
    urls = [f"http://127.0.0.1:{w.server_address[1]}" for w in workers]
    port = free_port()
    log = open(log_path, "w")
    router = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
         "--port", str(port), "--policy", "cache_aware", "--worker-urls", *urls,
         "--disable-retries", "--disable-circuit-breaker"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    # Workers register in the background: wait until every one is healthy.
    for _ in range(300):
        try:
            ws = json.loads(urllib.request.urlopen(base + "/workers", timeout=1).read())
            ws = ws.get("workers", ws) if isinstance(ws, dict) else ws
            if sum(1 for w in ws if w.get("is_healthy", True)) >= n:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    else:
        router.terminate()
        sys.exit("sglang_real: the router did not register every worker")
    time.sleep(1)
    return router, workers, base


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", default=os.path.join(cluster_model.ROOT, "build", "release",
                                                    "tools", "replay", "kvbm-replay"))
    p.add_argument("--trace", default=None)
    p.add_argument("--instances", default="2,4,8")
    p.add_argument("--requests", type=int, default=0, help="the trace's first N (0: all)")
    p.add_argument("--log", default="/tmp/sglang-router.log", help="the router's output")
    p.add_argument("--json", help="the figures, as JSON")
    args = p.parse_args(argv)
    trace_path = args.trace or cluster_model.default_trace()
    trace = cluster_model.load_trace(trace_path)
    if args.requests:
        trace = trace[:args.requests]
    assert max(h for _, _, hs in trace for h in hs) < 0x10FFFF - 0x10000
    out = []
    for n in map(int, args.instances.split(",")):
        for tiers, g2 in cluster_model.TIERS.items():
            rate = cluster_model.run_replay(args.replay, trace_path, n, g2,
                                            "round_robin")["cluster"]["prefill_tokens_per_s"]
            shared = Shared()
            router, workers, base = start_router(n, shared, args.log)
            real = SglangReal(base, shared)
            try:
                t0 = time.time()
                result = cluster_model.simulate(trace, n, g2, rate, real)
                hits, p99 = result.hit_ratio, result.p99
                real.release_all()
            finally:
                router.terminate()
                router.wait(timeout=30)
                for w in workers:
                    w.shutdown()
            counts = [0] * n
            for k in shared.received.values():
                counts[k] += 1
            print(f"{n} x {tiers}: sglang cache_aware (real router): {100 * hits:.2f}% / "
                  f"{p99:.2f} s; requests per worker {counts}; {time.time() - t0:.0f} s",
                  flush=True)
            out.append({"instances": n, "tiers": tiers, "router": "sglang cache_aware (real)",
                        "hit_ratio": hits, "ttft_p99_s": p99, "requests": counts})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
