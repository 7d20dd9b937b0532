#!/usr/bin/env bash
# benchmarks/remote_vs_redis.sh: the remote tier (RemoteStore) beside
# redis-benchmark and a bare pipelined hiredis client, on one redis-server and
# on a Redis Cluster of 3 primaries, all started by this script on 127.0.0.1
# (free ports, no persistence) and stopped at the end.
#
#   benchmarks/remote_vs_redis.sh [BUILD_DIR]      (default build/release)
#
# Same value size, pipeline depth and connections per server for all:
#   ours          remote_bench BM_RemoteStore_{Put,Get}: batches of 32 blocks over
#                 2 worker connections per server (16 pipelined per connection on one
#                 server; on the cluster the batch splits by slot over 3 primaries);
#                 values carry the 64-byte header, so each is 64 bytes longer.
#   bare hiredis  remote_bench BM_Hiredis_{Set,Get}Pipelined: one connection, 32 deep
#                 (one server only).
#   redis-bench   redis-benchmark -t set,get -d SIZE -P 16, -c 2 on one server and
#                 --cluster -c 6 (2 per primary) on the cluster.
# Prints GB/s (10^9 bytes per second) for each, and, when the test binary
# remote_cluster_tests is built, the time from killing a primary to
# the first verified hit on its slots (its replica promoted; node timeout 1 s).
#
# Environment: KVBM_BENCH_REPS (default 3) repetitions of ours (median).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build/release}
bench=$build/benchmarks/remote_bench
reps=${KVBM_BENCH_REPS:-3}
for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null ||
    { echo "$tool not found: bash scripts/deps.sh installs it" >&2; exit 1; }
done
[[ -x $bench ]] ||
  { echo "$bench not built: cmake --build $build --target remote_bench" >&2; exit 1; }

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
start_server() {  # <port> <dir> [args...]: starts redis-server, waits for PING
  local port=$1 d=$2
  shift 2
  mkdir -p "$d"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
    --daemonize no --logfile "$d/redis.log" --protected-mode no "$@" &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $port did not start; see $d/redis.log" >&2
  exit 1
}

single=$(free_port)
start_server "$single" "$dir/single"
cluster_ports=()
for i in 0 1 2; do
  p=$(free_port)
  cluster_ports+=("$p")
  start_server "$p" "$dir/node$i" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 1000 --cluster-port "$(free_port)"
done
redis-cli --cluster create "${cluster_ports[@]/#/127.0.0.1:}" --cluster-replicas 0 \
  --cluster-yes >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
for _ in $(seq 200); do
  ok=1
  for p in "${cluster_ports[@]}"; do
    redis-cli -p "$p" cluster info | grep -q cluster_state:ok || ok=0
  done
  ((ok)) && break
  sleep 0.05
done
cluster_url="redis+cluster://127.0.0.1:${cluster_ports[0]},127.0.0.1:${cluster_ports[1]}"

echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'): one on" \
  "127.0.0.1:$single, a cluster of 3 primaries on ${cluster_ports[*]}; $(nproc) cores"
declare -A rb
for kib in 64 1024 2048; do
  bytes=$((kib * 1024))
  n=$((kib >= 1024 ? 2000 : 20000))
  for where in single cluster; do
    if [[ $where == single ]]; then
      args=(-h 127.0.0.1 -p "$single" -c 2)
    else
      args=(-h 127.0.0.1 -p "${cluster_ports[0]}" --cluster -c 6)
    fi
    while IFS=, read -r test rps _; do
      test=${test//\"/}; rps=${rps//\"/}
      [[ $test == SET || $test == GET ]] && rb[$where,$test,$kib]=$rps
    done < <(redis-benchmark "${args[@]}" -t set,get -d "$bytes" -n "$n" -P 16 --csv 2>/dev/null)
  done
  redis-cli -p "$single" flushall >/dev/null
  for p in "${cluster_ports[@]}"; do redis-cli -p "$p" flushall >/dev/null; done
done

for where in single cluster; do
  url="redis://127.0.0.1:$single/0"
  [[ $where == cluster ]] && url=$cluster_url
  KVBM_REDIS_URL="$url" "$bench" --benchmark_repetitions="$reps" \
    --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_min_time=1 \
    >"$dir/$where.json" 2>/dev/null
done

RB="$(for k in "${!rb[@]}"; do echo "$k=${rb[$k]}"; done)" python3 - "$dir" <<'PY'
import json, os, sys
rb = {}
for line in os.environ["RB"].split():
    k, v = line.split("=")
    where, op, kib = k.split(",")
    rb[(where, op, int(kib))] = float(v) * int(kib) * 1024 / 1e9
res = {}
for where in ("single", "cluster"):
    for b in json.load(open(f"{sys.argv[1]}/{where}.json"))["benchmarks"]:
        if b.get("aggregate_name") != "median" or b.get("error_occurred"):
            continue
        name = b["run_name"]
        kib = int(name.split("kib:")[1].split("/")[0])
        res[(where, name.split("/")[0], kib)] = b["bytes_per_second"] / 1e9
nan = float("nan")
print("GB/s (10^9 B/s); ours / redis-benchmark in brackets")
print(f"{'block':>8} {'op':>4} | {'one server: ours':>17} {'bare hiredis':>13} {'redis-bench':>12}"
      f" | {'3-primary cluster: ours':>24} {'redis-bench --cluster':>22}")
for kib in (64, 1024, 2048):
    for op, ours, bare in (("SET", "BM_RemoteStore_Put", "BM_Hiredis_SetPipelined"),
                           ("GET", "BM_RemoteStore_Get", "BM_Hiredis_GetPipelined")):
        o1 = res.get(("single", ours, kib), nan); h1 = res.get(("single", bare, kib), nan)
        r1 = rb.get(("single", op, kib), nan)
        oc = res.get(("cluster", ours, kib), nan); rc = rb.get(("cluster", op, kib), nan)
        print(f"{str(kib)+' KiB':>8} {op:>4} | {o1:10.2f} [{o1/r1:4.2f}] {h1:13.2f} {r1:12.2f}"
              f" | {oc:17.2f} [{oc/rc:4.2f}] {rc:22.2f}")
PY

test_bin=$build/tests/remote_cluster_tests
if [[ -x $test_bin ]]; then
  "$test_bin" \
    --gtest_filter='RemoteStoreClusterTest.*PrimaryKilled*:RemoteStoreClusterTest.*FrozenPrimary*' \
    2>/dev/null |
    grep -E 'first verified hit' || true
fi
