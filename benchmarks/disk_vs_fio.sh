#!/usr/bin/env bash
# benchmarks/disk_vs_fio.sh: the disk engine beside fio on the same disk, with
# the same block size, file size and queue depth, and the ratio of the two.
#
#   benchmarks/disk_vs_fio.sh [BUILD_DIR]        (default: build-disk, then build/release)
#
# What runs:
#   ours  disk_bench BM_DiskWriteEngine_Write and BM_DiskReadEngine_Read at
#         queue depth QD: whole 2 MiB blocks (32 layers x K,V x 16 x 8 x 128 x
#         2 bytes, 64 page-aligned regions of 32 KiB each), random slot order,
#         O_DIRECT, median of REPS repetitions.
#   fio   --direct=1 --ioengine=psync --numjobs=QD (QD synchronous I/Os in
#         flight, as the engine's queue_depth), --bs = one slot (the block plus
#         its 4 KiB tail: the size of each engine I/O), --size = the pool file
#         (BLOCKS slots), randwrite then randread, time based.
#   With KVBM_FIO_LIBAIO=1 also fio --ioengine=libaio --iodepth=QD --numjobs=1.
#   With KVBM_BENCH_ENGINE=io_uring: ours is the io_uring engine (engine:1) and fio runs
#   --ioengine=io_uring --iodepth=QD --numjobs=1 (one ring, QD in flight, as ours), its reads
#   with --fixedbufs (ours read into registered buffers; as root or within RLIMIT_MEMLOCK).
#   fio's reads read the pool file ours wrote and read just before in the same round
#   (disk_bench KVBM_BENCH_DISK_KEEP), so both sides read the same extents in the same state;
#   fio's writes write its own file. With io_uring, fio's reads replay ours: the slot order
#   disk_bench read (KVBM_BENCH_DISK_ORDER) as an fio iolog, that order again and again as
#   each of our iterations reads it, for KVBM_FIO_RUNTIME seconds (so the same slots, in the
#   same order, QD whole-slot reads in flight, on both sides).
#
# Reads in flight: while each side reads, a sampler reads the disk's /sys/class/block/DEV/inflight
# every 2 ms; the table gives the mean reads at the device over the samples with one or more.
# On a virtio disk without indirect descriptors (a ring of 256 descriptors, 254 segments a
# request), that count, not the queue depth, sets the read speed, and it depends on how many
# physically contiguous pages each side's read buffers have (docs/benchmarks.md, "Disk engine
# beside fio"): compare the two sides' speeds where their counts agree. The summary's last
# read line is the median ratio of the rounds whose two counts agree within 25%.
#
# Rounds: ours and fio alternate (A B A B ...) ROUNDS times; each round gives a
# ratio per direction, and the summary is the median ratio with its min..max
# and the load average before and after.
#
# The ratio counts our payload bytes (2 MiB per I/O) against fio's I/O bytes
# (2 MiB + 4 KiB per I/O), so it understates us by 0.2%.
#
# Environment:
#   KVBM_BENCH_DISK_DIR     directory on the disk to test (default /var/tmp); tmpfs is refused
#   KVBM_BENCH_DISK_BLOCKS  blocks in the pool file (default 256: 513 MiB)
#   KVBM_BENCH_QD           queue depth (default 4)
#   KVBM_BENCH_REPS         repetitions of our benchmark (default 5)
#   KVBM_FIO_RUNTIME        seconds per fio job (default 10)
#   KVBM_BENCH_ROUNDS       interleaved rounds (default 5)
#   KVBM_BENCH_ENGINE       thread_pool (default: fio psync) or io_uring (fio io_uring)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-}
if [[ -z $build ]]; then
  for b in "$root/build-disk" "$root/build/release"; do
    if [[ -x $b/benchmarks/disk_bench ]]; then build=$b; break; fi
  done
fi
bench=${build:-$root/build-disk}/benchmarks/disk_bench
dir=${KVBM_BENCH_DISK_DIR:-/var/tmp}
blocks=${KVBM_BENCH_DISK_BLOCKS:-256}
qd=${KVBM_BENCH_QD:-4}
reps=${KVBM_BENCH_REPS:-5}
runtime=${KVBM_FIO_RUNTIME:-10}
rounds=${KVBM_BENCH_ROUNDS:-5}
engine=${KVBM_BENCH_ENGINE:-thread_pool}
case $engine in
  thread_pool) engine_arg=0; fio_engine=psync; fio_jobs=$qd; fio_depth=1 ;;
  io_uring) engine_arg=1; fio_engine=io_uring; fio_jobs=1; fio_depth=$qd ;;
  *) echo "disk_vs_fio: KVBM_BENCH_ENGINE is thread_pool or io_uring, not $engine" >&2; exit 2 ;;
esac

if [[ ! -x $bench ]]; then
  echo "disk_vs_fio: $bench not found; build it first:" >&2
  echo "  cmake -S . -B build-disk -DCMAKE_BUILD_TYPE=Release &&" \
    "cmake --build build-disk --target disk_bench" >&2
  exit 2
fi
fstype=$(stat -f -c %T "$dir")
if [[ $fstype == tmpfs ]]; then
  echo "disk_vs_fio: $dir is tmpfs; point KVBM_BENCH_DISK_DIR at a directory on a real disk" >&2
  exit 2
fi
if ! command -v fio > /dev/null; then
  echo "disk_vs_fio: installing fio (apt-get install -y fio)"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get install -y fio ||
    { "${sudo_cmd[@]}" apt-get update && "${sudo_cmd[@]}" apt-get install -y fio; }
fi

block=$((32 * 2 * 16 * 8 * 128 * 2))       # 2 MiB
slot=$(( (block + 64 + 4095) / 4096 * 4096 )) # data + 64-byte footer, rounded up to 4 KiB
size=$((blocks * slot))
work=$(mktemp -d "$dir/kvbm-fio-XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== disk: $dir ($fstype)"
df -h "$dir" | tail -1
echo "== block $block bytes, slot/bs $slot bytes, file $size bytes ($blocks slots), queue depth $qd"
echo "== fio $(fio --version)"

echo "== engine $engine: fio --ioengine=$fio_engine --numjobs=$fio_jobs --iodepth=$fio_depth"
echo "== load before: $(cat /proc/loadavg)"
cat /proc/loadavg > "$work/load_before"

fixedbufs=()
if [[ $engine == io_uring ]] &&
  { [[ $(id -u) -eq 0 ]] || [[ $(ulimit -l) == unlimited ]] ||
    (($(ulimit -l) * 1024 >= 2 * qd * slot)); }; then
  fixedbufs=(--fixedbufs)
fi
# fio_iolog: an fio iolog of the slot order ours read (kvbm-pool.order), repeated more times
# than fio can read in KVBM_FIO_RUNTIME seconds at 8 GB/s; --runtime ends the replay.
fio_iolog() {
  python3 - "$work/kvbm-pool.order" "$slot" "$size" "$runtime" > "$work/kvbm-pool.iolog" <<'EOF'
import math, sys
order = [int(line) for line in open(sys.argv[1])]
slot, size, runtime = map(int, sys.argv[2:5])
print("fio version 2 iolog\npool add\npool open")
for _ in range(math.ceil(runtime * 8e9 / size)):
    for b in order:
        print(f"pool read {b * slot} {slot}")
print("pool close")
EOF
}
dev=$(basename "$(df --output=source "$dir" | tail -1)")
inflight=/sys/class/block/$dev/inflight
# sampled NAME CMD...: runs CMD, writing to $work/NAME.inflight the mean reads in flight at the
# device over the 2 ms samples with any (empty where the disk has no inflight file).
sampled() {
  local name=$1 pid
  shift
  if [[ ! -r $inflight ]]; then "$@"; return; fi
  python3 -c '
import signal, sys, time
n = s = 0
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    r = int(open(sys.argv[1]).read().split()[0])
    if r:
        n, s = n + 1, s + r
    time.sleep(0.002)
print(f"{s / n:.2f}" if n else "")
' "$inflight" > "$work/$name.inflight" &
  pid=$!
  "$@"
  kill -TERM "$pid"
  wait "$pid" || true
}
fio_run() {  # name rw ioengine numjobs iodepth
  local file=$work/fio.dat extra=(--fallocate=native) what
  what=(--size="$size" --rw="$2" --time_based --runtime="$runtime" --randrepeat=0)
  if [[ $2 == randread ]]; then
    file=$work/kvbm-pool.slots
    extra=()
    if [[ $3 == io_uring ]]; then
      extra=("${fixedbufs[@]}")
      fio_iolog
      what=(--read_iolog="$work/kvbm-pool.iolog" --replay_redirect="$file" --runtime="$runtime")
    fi
  fi
  sampled "$1" fio --name="$1" --filename="$file" --bs="$slot" --direct=1 "${what[@]}" \
    --ioengine="$3" --numjobs="$4" --iodepth="$5" --group_reporting \
    "${extra[@]}" --output-format=json > "$work/$1.json"
}
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds: ours ($bench), then fio"
  KVBM_BENCH_DISK_DIR=$work KVBM_BENCH_DISK_BLOCKS=$blocks KVBM_BENCH_DISK_KEEP=kvbm-pool.slots \
    KVBM_BENCH_DISK_ORDER=kvbm-pool.order sampled "ours-$r" "$bench" \
    --benchmark_filter="^BM_Disk(WriteEngine_Write|ReadEngine_Read)/qd:$qd/engine:$engine_arg/" \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_out="$work/ours-$r.json" --benchmark_out_format=json > /dev/null
  fio_run "write-$fio_engine-$r" randwrite "$fio_engine" "$fio_jobs" "$fio_depth"
  fio_run "read-$fio_engine-$r" randread "$fio_engine" "$fio_jobs" "$fio_depth"
  if [[ ${KVBM_FIO_LIBAIO:-0} == 1 ]]; then
    fio_run "write-libaio-$r" randwrite libaio 1 "$qd"
    fio_run "read-libaio-$r" randread libaio 1 "$qd"
  fi
done
echo "== load after: $(cat /proc/loadavg)"
cat /proc/loadavg > "$work/load_after"

python3 - "$work" "$qd" "$block" "$slot" "$rounds" "$fio_engine" <<'EOF'
import json, os, statistics, sys
work, qd, block, slot = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rounds, fio_engine = int(sys.argv[5]), sys.argv[6]
def ours(r):
    out = {}
    for b in json.load(open(os.path.join(work, f"ours-{r}.json")))["benchmarks"]:
        if b.get("aggregate_name", "median") == "median":
            out["write" if "Write" in b["name"] else "read"] = b["bytes_per_second"]
    return out
def inflight(name):
    path = os.path.join(work, name + ".inflight")
    return open(path).read().strip() if os.path.exists(path) else ""
def fio(name, rw):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path):
        return None
    return json.load(open(path))["jobs"][0][rw]["bw_bytes"]
print()
print(f"{'':6} {'round':>5} {'kvbm MB/s':>10} {'fio ' + fio_engine + ' MB/s':>18} {'ratio':>6}"
      f"   {'reads in flight kvbm/fio':>24}   {'fio libaio MB/s':>15} {'ratio':>6}")
ratios = {"write": [], "read": []}
alike = []  # read ratios of the rounds whose reads in flight at the device agree within 25%
for rw in ("write", "read"):
    for r in range(1, rounds + 1):
        o, p, a = ours(r).get(rw), fio(f"{rw}-{fio_engine}-{r}", rw), fio(f"{rw}-libaio-{r}", rw)
        ratios[rw].append(o / p)
        line = f"{rw:6} {r:5} {o / 1e6:10.0f} {p / 1e6:18.0f} {o / p:6.2f}"
        ours_depth, fio_depth = inflight(f"ours-{r}"), inflight(f"read-{fio_engine}-{r}")
        depth = f"{ours_depth}/{fio_depth}"
        if rw == "read" and ours_depth and fio_depth:
            d = sorted((float(ours_depth), float(fio_depth)))
            if d[1] <= 1.25 * d[0]:
                alike.append(o / p)
        line += f"   {depth if rw == 'read' else '':>24}"
        if a:
            line += f"   {a / 1e6:15.0f} {o / a:6.2f}"
        print(line)
print()
for rw in ("write", "read"):
    v = ratios[rw]
    print(f"{rw:6} median ratio {statistics.median(v):.2f} (range {min(v):.2f}..{max(v):.2f},"
          f" {len(v)} rounds)")
if alike:
    lo, hi = min(alike), max(alike)
    print(f"read   median ratio {statistics.median(alike):.2f} (range {lo:.2f}..{hi:.2f},"
          f" {len(alike)} rounds whose reads in flight at the device agree within 25%)")
load = [open(os.path.join(work, f)).read().split()[:3] for f in ("load_before", "load_after")]
print(f"load average before {' '.join(load[0])}, after {' '.join(load[1])}")
print(f"(queue depth {qd}, fio {fio_engine}; "
      f"ours counts {block}-byte blocks, fio {slot}-byte I/Os)")
EOF
