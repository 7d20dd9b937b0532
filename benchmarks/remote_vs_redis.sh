#!/usr/bin/env bash
# benchmarks/remote_vs_redis.sh: the remote tier (RemoteStore) beside
# redis-benchmark and a bare pipelined hiredis client, on one redis-server
# that this script starts on 127.0.0.1 (a free port, no persistence) and stops.
#
#   benchmarks/remote_vs_redis.sh [BUILD_DIR]      (default build/release)
#
# Same value size, pipeline depth and connections for all three:
#   ours          remote_bench BM_RemoteStore_{Put,Get}: batches of 32 blocks over
#                 2 worker connections (16 pipelined per connection); values carry
#                 the 64-byte header, so each is 64 bytes longer than the others'.
#   bare hiredis  remote_bench BM_Hiredis_{Set,Get}Pipelined: one connection, 32 deep.
#   redis-bench   redis-benchmark -t set,get -d SIZE -c 2 -P 16.
# Prints GB/s (10^9 bytes per second) and blocks/s, and ours / redis-benchmark.
#
# Environment: KVBM_BENCH_REPS (default 3) repetitions of ours (median).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build/release}
bench=$build/benchmarks/remote_bench
reps=${KVBM_BENCH_REPS:-3}
for tool in redis-server redis-benchmark python3; do
  command -v "$tool" >/dev/null ||
    { echo "$tool not found: bash scripts/deps.sh installs it" >&2; exit 1; }
done
[[ -x $bench ]] ||
  { echo "$bench not built: cmake --build $build --target remote_bench" >&2; exit 1; }

dir=$(mktemp -d)
port=$(python3 -c \
  'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize no --logfile "$dir/redis.log" --protected-mode no &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on" \
  "127.0.0.1:$port; $(nproc) cores"
declare -A rb
for kib in 64 1024 2048; do
  bytes=$((kib * 1024))
  n=$((kib >= 1024 ? 2000 : 20000))
  while IFS=, read -r test rps _; do
    test=${test//\"/}; rps=${rps//\"/}
    [[ $test == SET || $test == GET ]] && rb[$test,$kib]=$rps
  done < <(redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$bytes" -n "$n" -c 2 -P 16 \
    --csv 2>/dev/null)
  redis-cli -p "$port" flushall >/dev/null
done

KVBM_REDIS_URL="redis://127.0.0.1:$port/0" "$bench" --benchmark_repetitions="$reps" \
  --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_min_time=1 \
  >"$dir/ours.json"

RB="$(for k in "${!rb[@]}"; do echo "$k=${rb[$k]}"; done)" python3 - "$dir/ours.json" <<'PY'
import json, os, sys
rb = {}
for line in os.environ["RB"].split():
    k, v = line.split("=")
    op, kib = k.split(",")
    rb[(op, int(kib))] = float(v)
res = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"]
    kib = int(name.split("kib:")[1].split("/")[0])
    res[(name.split("/")[0], kib)] = (b["bytes_per_second"], b["items_per_second"])
print(f"{'block':>7} {'op':>4} {'ours GB/s':>10} {'blocks/s':>9} {'bare hiredis GB/s':>18}"
      f" {'redis-benchmark GB/s':>21} {'ours/redis-benchmark':>21}")
for kib in (64, 1024, 2048):
    for op, ours, bare in (("SET", "BM_RemoteStore_Put", "BM_Hiredis_SetPipelined"),
                           ("GET", "BM_RemoteStore_Get", "BM_Hiredis_GetPipelined")):
        o = res.get((ours, kib)); h = res.get((bare, kib)); r = rb.get((op, kib))
        if not o:
            continue
        rgb = r * kib * 1024 / 1e9 if r else float("nan")
        print(f"{str(kib)+' KiB':>7} {op:>4} {o[0]/1e9:10.2f} {o[1]:9.0f}"
              f" {h[0]/1e9 if h else float('nan'):18.2f} {rgb:21.2f} {o[0]/1e9/rgb:21.2f}")
PY
