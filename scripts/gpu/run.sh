#!/usr/bin/env bash
# kvbm's GPU run as one prepared command (issue 28; docs/cuda.md, "Running on a GPU machine").
#
#   bash scripts/gpu/run.sh bundle   HERE (Debian bookworm, network): fetch the packages the build
#                                    and the tests need with `apt-get download`, unpack them with
#                                    `dpkg -x` into build/gpu-bundle and make that prefix
#                                    relocatable (no absolute symlinks, no /usr in the CMake and
#                                    pkg-config files); it is carried to the GPU machine
#   bash scripts/gpu/run.sh device   ON THE GPU MACHINE (bare: nvcc, CMake, ninja; no -dev packages,
#                                    no network), from the repository root: configure for sm_90
#                                    against the bundle, build, run the CUDA tests, cuda_bench,
#                                    compute-sanitizer (memcheck, racecheck), the replay with bytes
#                                    through the GPU, offload_bench and the whole ctest suite, each
#                                    step time-boxed; logs, JSON and summary.txt land in $OUT
#   bash scripts/gpu/run.sh check    HERE: the proof that the bundle is enough: in a private mount
#                                    namespace the files of the system's -dev packages (and its
#                                    redis binaries) are hidden under an overlay on /usr, then the
#                                    same configure + build as `device` (CUDA on, sm_90), the
#                                    bundle's runtime closure is checked with ldd, and the suite
#                                    runs (the GPU tests skip: no device here)
#
# Environment:
#   KVBM_GPU_BUNDLE    the bundle (default <repo>/build/gpu-bundle)
#   KVBM_GPU_DEBS      the .deb cache of `bundle` (default <repo>/build/gpu-debs; never carried)
#   KVBM_GPU_BUILD     the build tree (default <repo>/build/gpu-device, or build/gpu-check)
#   KVBM_JOBS          parallel jobs (default: the number of CPUs)
#   OUT                device: where results go (the device tool sets it; default
#                      <repo>/build/gpu-out)
#   KVBM_GPU_BUDGET_S  device: seconds for the whole run (default 480, under the tool's 600)
#   KVBM_GPU_STEPS     device/check: run only these steps (names as in summary.txt), e.g.
#                      "build ctest" to finish the suite in a second call on a warm machine
#   KVBM_GPU_CHECK_TARGETS  check: the targets to build ("all": everything; default: a binary
#                      for each dependency, CHECK_TARGETS below)
#   KVBM_CTEST_ARGS    check: extra ctest arguments, word-split (e.g. "-LE remote_cluster")
# Functions that `step` runs through a fresh copy of this script (bash run.sh fn <function>) look
# unreachable to shellcheck:
# shellcheck disable=SC2317
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly ROOT
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
readonly SELF
readonly BUNDLE="${KVBM_GPU_BUNDLE:-$ROOT/build/gpu-bundle}"
readonly DEBS="${KVBM_GPU_DEBS:-$ROOT/build/gpu-debs}"
readonly JOBS="${KVBM_JOBS:-$(nproc 2>/dev/null || echo 2)}"
readonly ARCH_TRIPLET=x86_64-linux-gnu
readonly LIBDIR="$BUNDLE/usr/lib/$ARCH_TRIPLET"

# What the build finds (CMakeLists.txt, tests/, benchmarks/, tools/; scripts/deps.sh's list):
# headers, CMake and pkg-config files, link-time .so names.
readonly DEV_PACKAGES=(
  libfmt-dev libspdlog-dev prometheus-cpp-dev libxxhash-dev libmsgpack-cxx-dev
  libzmq3-dev cppzmq-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libcurl4-openssl-dev libcivetweb-dev libhiredis-dev liburing-dev zlib1g-dev
)
# Programs: the tests start a real redis-server (tests/remote/redis_server.h; redis-cli builds
# the clusters); pkgconf finds liburing (the GPU machine may have no pkg-config); civetweb's
# CMake package (found through prometheus-cpp's) insists that its program exists.
readonly TOOL_PACKAGES=(redis-server redis-tools pkgconf-bin civetweb)
# Present on any glibc system with a C++ compiler, and never to be shadowed by older copies
# (a bookworm libstdc++ ahead of a newer one breaks what the newer g++ builds); plus packaging
# glue that holds no library; plus libsasl2-modules-db (and its libdb5.3): a SASL plugin that
# libsasl2 dlopens, which nothing here uses.
readonly BASE_PACKAGES=(
  libc6 libgcc-s1 libstdc++6 gcc-12-base libcrypt1 debconf adduser init-system-helpers
  lsb-base sysvinit-utils dpkg perl-base tzdata libsasl2-modules-db
)

log() { printf '[gpu] %s\n' "$*"; }
err() { printf '[gpu] %s\n' "$*" >&2; }

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

# ---------------------------------------------------------------------------------------------
# bundle
# ---------------------------------------------------------------------------------------------

# Prints the packages that package $1 depends on (first alternative, no versions), one a line.
pkg_depends() {
  local fields
  fields="$(dpkg-query -W -f='${Pre-Depends}, ${Depends}' "$1" 2>/dev/null)" ||
    fields="$(apt-cache show --no-all-versions "$1" 2>/dev/null |
      sed -n 's/^\(Pre-\)\{0,1\}Depends: //p' | paste -sd, -)"
  tr ',' '\n' <<<"$fields" | sed 's/|.*//; s/(.*)//; s/:any//; s/[[:space:]]//g' | grep -v '^$'
}

is_base() {
  local p
  for p in "${BASE_PACKAGES[@]}"; do [[ "$1" == "$p" ]] && return 0; done
  return 1
}

# Prints the closure of the packages: a -dev package brings its own runtime libraries (lib*,
# not -dev: not catch2, the other -dev packages or googletest's sources); any other package
# brings everything it depends on, recursively, less BASE_PACKAGES.
package_closure() {
  local -A seen=()
  local -a queue=("$@")
  local p d
  while ((${#queue[@]})); do
    p="${queue[0]}"
    queue=("${queue[@]:1}")
    [[ -n "${seen[$p]:-}" ]] && continue
    seen[$p]=1
    while read -r d; do
      is_base "$d" && continue
      if [[ "$p" == *-dev ]] && [[ "$d" != lib* || "$d" == *-dev ]]; then continue; fi
      [[ -z "${seen[$d]:-}" ]] && queue+=("$d")
    done < <(pkg_depends "$p")
  done
  printf '%s\n' "${!seen[@]}" | sort
}

# Downloads into $DEBS the packages not there yet.
fetch_debs() {
  mkdir -p "$DEBS"
  local -a missing=()
  local p
  for p in "$@"; do
    compgen -G "$DEBS/${p}_*.deb" >/dev/null || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "apt-get download ${#missing[@]} packages"
  if ! (cd "$DEBS" && apt-get download "${missing[@]}" 2>&1 |
    grep -v '^W: Download is performed unsandboxed'); then
    log "apt-get download failed; apt-get update, then again"
    apt-get update -q >/dev/null && (cd "$DEBS" && apt-get download "${missing[@]}") || return 1
  fi
  for p in "${missing[@]}"; do
    compgen -G "$DEBS/${p}_*.deb" >/dev/null || { err "not downloaded: $p"; return 1; }
  done
}

# Moves the usrmerge leftovers (/lib, /bin, /sbin) under usr/, then turns every absolute
# symlink into a relative one inside the bundle.
relocate_links() {
  local d f link target rel
  for d in lib bin sbin; do
    if [[ -d "$BUNDLE/$d" && ! -L "$BUNDLE/$d" ]]; then
      mkdir -p "$BUNDLE/usr/$d"
      cp -a "$BUNDLE/$d/." "$BUNDLE/usr/$d/" && rm -rf "${BUNDLE:?}/$d"
    fi
  done
  while IFS= read -r -d '' link; do
    target="$(readlink "$link")"
    [[ "$target" == /* ]] || continue
    f="${target#/}"
    case "$f" in lib/* | bin/* | sbin/*) f="usr/$f" ;; esac
    rel="$(realpath -m --relative-to="$(dirname "$link")" "$BUNDLE/$f")"
    ln -sfn "$rel" "$link"
  done < <(find "$BUNDLE" -type l -print0)
}

# Prints the way up from the directory of bundle file $1 to the bundle's usr/, e.g. ../../../..
# for usr/lib/x86_64-linux-gnu/cmake/fmt/fmt-config.cmake.
updirs() {
  local -a parts
  IFS=/ read -ra parts <<<"$(dirname "${1#"$BUNDLE"/usr/}")"
  local up=".." i
  for ((i = 1; i < ${#parts[@]}; i++)); do up+="/.."; done
  printf '%s\n' "$up"
}

# Rewrites /usr in the CMake package files (relative to the file: ${CMAKE_CURRENT_LIST_DIR}) and
# in the pkg-config files (relative to ${pcfiledir}), so the prefix works wherever it lands.
relocate_package_files() {
  local f up from to
  while IFS= read -r -d '' f; do
    grep -q '/usr' "$f" || continue
    up="$(updirs "$f")"
    # CMake's own guard for usrmerge (_realOrig, _IMPORT_PREFIX) compares with the original
    # location and is a no-op elsewhere: left as it is.
    from='(["; (=]|^)/usr/(include|lib|share|bin)'
    to="\\1\${CMAKE_CURRENT_LIST_DIR}/$up/\\2"
    sed -i -E "/_realOrig|_IMPORT_PREFIX/!s#$from#$to#g" "$f"
  done < <(find "$BUNDLE/usr/lib/$ARCH_TRIPLET/cmake" "$BUNDLE/usr/share/cmake" \
    -name '*.cmake' -print0 2>/dev/null)
  while IFS= read -r -d '' f; do
    up="$(updirs "$f")"
    sed -i -E "s#(=|=\"|-I|-L| )/usr(/|\$| |\")#\\1\${pcfiledir}/$up\\2#g" "$f"
  done < <(find "$BUNDLE/usr" -name '*.pc' -print0)
}

# Drops what neither the build nor the tests read: documentation, manuals, init scripts,
# configuration, the programs other than redis' and pkgconf, the static libraries that have a
# shared twin (the CMake files name the .so).
prune_bundle() {
  local f
  rm -rf "${BUNDLE:?}"/etc "${BUNDLE:?}"/var "${BUNDLE:?}"/usr/sbin "${BUNDLE:?}"/usr/src \
    "${BUNDLE:?}"/usr/lib/systemd \
    "${BUNDLE:?}"/usr/lib/tmpfiles.d "${BUNDLE:?}"/usr/lib/sysusers.d
  find "$BUNDLE/usr/share" -mindepth 1 -maxdepth 1 ! -name cmake ! -name pkgconfig \
    -exec rm -rf {} +
  find "$BUNDLE/usr/bin" -mindepth 1 ! -name 'redis-*' ! -name pkgconf ! -name civetweb \
    -exec rm -f {} +
  rm -f "$BUNDLE"/usr/bin/redis-benchmark "$BUNDLE"/usr/bin/redis-check-aof
  while IFS= read -r -d '' f; do
    [[ -e "${f%.a}.so" ]] && rm -f "$f"
  done < <(find "$LIBDIR" -maxdepth 1 -name '*.a' -print0)
}

# Small launchers in $BUNDLE/bin: each runs its program with the bundle's libraries. The tests
# find redis-server and redis-cli on PATH; CMake gets PKG_CONFIG_EXECUTABLE=$BUNDLE/bin/pkg-config.
write_launchers() {
  mkdir -p "$BUNDLE/bin"
  local name target
  for name in redis-server redis-cli pkg-config; do
    target="$name"
    [[ "$name" == pkg-config ]] && target=pkgconf
    cat >"$BUNDLE/bin/$name" <<EOF
#!/bin/sh
# Generated by scripts/gpu/run.sh bundle: $target with the bundle's libraries.
here=\$(cd "\$(dirname "\$0")/.." && pwd)
export LD_LIBRARY_PATH="\$here/usr/lib/$ARCH_TRIPLET\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
    if [[ "$name" == pkg-config ]]; then
      cat >>"$BUNDLE/bin/$name" <<EOF
export PKG_CONFIG_LIBDIR="\$here/usr/lib/$ARCH_TRIPLET/pkgconfig:\$here/usr/share/pkgconfig"
EOF
    fi
    # shellcheck disable=SC2016  # $here and $@ are the launcher's
    printf 'exec "$here/usr/bin/%s" "$@"\n' "$target" >>"$BUNDLE/bin/$name"
    chmod +x "$BUNDLE/bin/$name"
  done
}

cmd_bundle() {
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    err "bundle needs apt-get and dpkg (Debian bookworm)"
    return 1
  fi
  local -a pkgs
  mapfile -t pkgs < <(package_closure "${DEV_PACKAGES[@]}" "${TOOL_PACKAGES[@]}")
  log "${#pkgs[@]} packages: ${pkgs[*]}"
  fetch_debs "${pkgs[@]}" || return 1
  rm -rf "${BUNDLE:?}"
  mkdir -p "$BUNDLE"
  local p deb
  : >"$BUNDLE/.manifest"
  for p in "${pkgs[@]}"; do
    deb="$(compgen -G "$DEBS/${p}_*.deb" | sort -V | tail -1)"
    dpkg -x "$deb" "$BUNDLE" || { err "dpkg -x $deb failed"; return 1; }
    # shellcheck disable=SC2016  # dpkg-deb's own ${fields}
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$BUNDLE/.manifest"
  done
  relocate_links
  prune_bundle
  relocate_package_files
  write_launchers
  mv "$BUNDLE/.manifest" "$BUNDLE/MANIFEST"
  {
    printf '# Made by scripts/gpu/run.sh bundle on %s (%s, glibc %s)\n' "$(date -u +%F)" \
      "$(. /etc/os-release && echo "$PRETTY_NAME")" "$(ldd --version | head -1 | awk '{print $NF}')"
    cat "$BUNDLE/MANIFEST"
  } >"$BUNDLE/MANIFEST.tmp" && mv "$BUNDLE/MANIFEST.tmp" "$BUNDLE/MANIFEST"
  local abs
  abs="$(find "$BUNDLE" -type l -lname '/*' | wc -l)"
  ((abs == 0)) || { err "$abs absolute symlinks left"; return 1; }
  # The same, compressed: what is best carried to the GPU machine (`device` unpacks it).
  # gzip, not xz: any machine has it (and Python's tarfile, the fallback of require_bundle).
  rm -f "$BUNDLE.tar.gz"
  tar -C "$(dirname "$BUNDLE")" -czf "$BUNDLE.tar.gz" "$(basename "$BUNDLE")" ||
    { err "tar failed"; return 1; }
  log "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1), ${#pkgs[@]} packages; MANIFEST lists them)"
  log "        $BUNDLE.tar.gz ($(du -sh "$BUNDLE.tar.gz" | cut -f1)): carry this one"
}

# ---------------------------------------------------------------------------------------------
# configure + build, shared by device and check
# ---------------------------------------------------------------------------------------------

# configure <build dir> [extra cmake args...]: Release, CUDA on for sm_90, the dependencies from
# the bundle. The bundle's libraries are found at run time through the binaries' RPATH (DT_RPATH,
# not RUNPATH, so it reaches the libraries' own dependencies too): no LD_LIBRARY_PATH, which would
# also reach the compiler and CMake.
configure() {
  local dir="$1"
  shift
  local nvcc="${CUDACXX:-}"
  [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  [[ -z "$nvcc" ]] && nvcc="$(command -v nvcc || true)"
  [[ -n "$nvcc" ]] || { err "no nvcc (set CUDACXX)"; return 1; }
  local -a gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$dir" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DKVBM_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DKVBM_ENABLE_EVENTS_ZMQ=ON -DKVBM_ENABLE_REMOTE=ON -DKVBM_ENABLE_URING=ON \
    -DCMAKE_PREFIX_PATH="$BUNDLE/usr" \
    -DPKG_CONFIG_EXECUTABLE="$BUNDLE/bin/pkg-config" \
    -DCMAKE_BUILD_RPATH="$LIBDIR" \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags \
    "$@"
}

# The environment of every step that runs a built program: the bundle's redis-server,
# redis-cli and pkg-config first on PATH.
bundle_env() {
  export PATH="$BUNDLE/bin:$PATH"
}

require_bundle() {
  [[ -f "$BUNDLE/MANIFEST" ]] && return 0
  if [[ -f "$BUNDLE.tar.gz" ]]; then
    log "unpacking $BUNDLE.tar.gz"
    tar -C "$(dirname "$BUNDLE")" -xzf "$BUNDLE.tar.gz" ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$BUNDLE.tar.gz" "$(dirname "$BUNDLE")"
    [[ -f "$BUNDLE/MANIFEST" ]] && return 0
  fi
  err "no bundle at $BUNDLE: run \`bash scripts/gpu/run.sh bundle\` on the Debian machine and"
  err "carry it (the device tool's carry parameter: [\"build/gpu-bundle.tar.gz\"])"
  return 1
}

# ---------------------------------------------------------------------------------------------
# device (and the step runner it shares with check)
# ---------------------------------------------------------------------------------------------

DEADLINE=0
SUMMARY=""
FAILED=0

# Whether step $1 is to run: all of them, or those named in KVBM_GPU_STEPS.
wanted() {
  [[ -z "${KVBM_GPU_STEPS:-}" || " $KVBM_GPU_STEPS " == *" $1 "* ]]
}

# step <name> <seconds> <command...>: runs the command with its output in $LOGS/<name>.log, killed
# after <seconds> or at the run's deadline, whichever comes first; records the outcome in the
# summary and goes on whatever happens.
step() {
  local name="$1" budget="$2"
  shift 2
  wanted "$name" || return 0
  local left=$((DEADLINE - $(date +%s) - 20))
  if ((left < 10)); then
    printf '%-18s SKIPPED  (out of time)\n' "$name" >>"$SUMMARY"
    log "$name: skipped, out of time"
    FAILED=1
    return 1
  fi
  ((budget > left)) && budget=$left
  log "$name (at most ${budget}s): $*"
  local t0=$SECONDS rc
  # A function of this script runs in a fresh copy of it (timeout runs programs only).
  local -a cmd=("$@")
  declare -F "$1" >/dev/null && cmd=(bash "$SELF" fn "$@")
  timeout -k 10 "$budget" "${cmd[@]}" >"$LOGS/$name.log" 2>&1
  rc=$?
  local status=OK
  if ((rc == 124 || rc == 137)); then
    status=TIMEOUT
  elif ((rc != 0)); then
    status="FAIL"
  fi
  [[ "$status" == OK ]] || FAILED=1
  printf '%-18s %-8s rc=%-3d %4ds  %s\n' "$name" "$status" "$rc" $((SECONDS - t0)) "$*" \
    >>"$SUMMARY"
  log "$name: $status (rc $rc, $((SECONDS - t0)) s)"
  pack_logs
  [[ "$status" == OK ]]
}

# The device tool brings back at most 8 files from $OUT: the logs travel as one archive,
# refreshed after every step so that a run cut short still returns what it did.
pack_logs() {
  [[ "$LOGS" == "$OUT" ]] && return 0
  tar -C "$(dirname "$LOGS")" -czf "$OUT/logs.tar.gz" "$(basename "$LOGS")" 2>/dev/null
}

# The machine, the toolkit and the driver, for the record.
describe_machine() {
  echo "== date"; date -u
  echo "== os"; cat /etc/os-release 2>/dev/null
  echo "== kernel"; uname -a
  echo "== cpus"; nproc; free -g 2>/dev/null | head -2
  echo "== glibc"; ldd --version 2>&1 | head -1
  echo "== compilers"; g++ --version 2>&1 | head -1; nvcc --version 2>&1 | tail -2
  echo "== cmake"; cmake --version | head -1; echo "ninja $(ninja --version 2>&1)"
  echo "== python3"; command -v python3; python3 --version 2>&1
  echo "== gpu"; nvidia-smi 2>&1
  echo "== compute-sanitizer"; compute-sanitizer --version 2>&1 | head -2
  echo "== bundle"; head -1 "$BUNDLE/MANIFEST"
  echo "== git"; git -C "$ROOT" log -1 --oneline 2>/dev/null
  git -C "$ROOT" status --short 2>/dev/null | head -30
}

# The CUDA tests (they skip, saying so, without a device), and all the tests that need a device
# (G1 in device memory: the facade's), as "binary:gtest filter" (tests/<area>_tests holds an
# area's tests, tests/CMakeLists.txt).
readonly CUDA_TESTS=("transfer_tests:*CudaEngine*:*CudaRoundTrip*:*CudaInjectedError*"
  "offload_tests:*CudaEvent*")
readonly DEVICE_TESTS=("${CUDA_TESTS[@]}" "facade_tests:*KvBlockManager*" "storage_tests:*")
# What runs under compute-sanitizer (memcheck, racecheck): "binary:gtest filter". The CUDA
# engine's tests, and the facade's tests that move and compare every byte through G1 in device
# memory (CUDA engines both ways, the bounce buffer from G3). Not the CUDA event tests: their
# test holds a stream on a host function until the test thread opens a gate, and the sanitizer
# serializes the stream at the event record, so the test would wait on itself.
readonly SANITIZER_RUNS=(
  "transfer_tests:*CudaEngine*:*CudaRoundTrip*:*CudaInjectedError*:-*Death*"
  "facade_tests:KvBlockManagerTest.EndToEnd*:KvBlockManagerTest.OnboardsAPrefix*\
:KvBlockManagerTest.CorruptDisk*:KvBlockManagerTest.OnEviction*"
)

# The test binaries named by "binary:filter" entries $@, once each.
test_binaries() {
  local e
  for e in "$@"; do printf '%s\n' "${e%%:*}"; done | sort -u
}

# Runs the device tests (gtest's JSON beside the log); fails if any fails.
device_tests() {
  local dir="$1" e t rc=0 n=0
  for e in "${DEVICE_TESTS[@]}"; do
    t="${e%%:*}"
    echo "== $e"
    "$dir/tests/$t" --gtest_filter="${e#*:}" --gtest_output="json:$LOGS/${t}-$((++n)).json" ||
      rc=1
  done
  return "$rc"
}

# compute-sanitizer --tool <tool> on test binary <name> with a gtest filter; fails when it
# reports an error or a test fails.
sanitize() {
  local tool="$1" dir="$2" t="$3" filter="$4"
  compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 50 \
    "$dir/tests/$t" --gtest_filter="$filter" --gtest_brief=1
}

# bench <name> <binary> [args...]: a Google Benchmark binary with its JSON in $OUT/<name>.json
# and a short table (scripts/gpu/bench_table.py) at the end of the log.
bench() {
  local name="$1" bin="$2"
  shift 2
  "$bin" --benchmark_out="$OUT/$name.json" --benchmark_out_format=json "$@" || return 1
  python3 "$ROOT/scripts/gpu/bench_table.py" "$OUT/$name.json" 2>&1
}

# kvbm-replay with bytes moved (G1 in device memory when a GPU is present): JSON report in
# $OUT/replay.json, the log on stderr; fails when G1 was emulated in host memory.
replay() {
  local dir="$1"
  shift
  "$dir/tools/replay/kvbm-replay" --json "$@" >"$OUT/replay.json" || return 1
  python3 - "$OUT/replay.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
c = r.get("config", {})
print("device_emulated:", c.get("device_emulated"), " move_bytes:", c.get("move_bytes"))
print({k: r.get(k) for k in ("requests", "blocks", "wall_seconds", "blocks_per_second", "audit")})
if c.get("device_emulated"):
    sys.exit("G1 was emulated in host memory: no bytes went through a GPU")
PY
}

cmd_device() {
  OUT="${OUT:-$ROOT/build/gpu-out}"
  LOGS="${KVBM_GPU_LOGS:-$ROOT/build/gpu-device-logs}"
  export OUT LOGS
  mkdir -p "$OUT" "$LOGS"
  SUMMARY="$OUT/summary.txt"
  local budget="${KVBM_GPU_BUDGET_S:-480}"
  DEADLINE=$(($(date +%s) + budget))
  local dir="${KVBM_GPU_BUILD:-$ROOT/build/gpu-device}"
  printf 'kvbm GPU run (scripts/gpu/run.sh device), %s, budget %ss, %s jobs\n' \
    "$(date -u +%FT%TZ)" "$budget" "$JOBS" >"$SUMMARY"
  require_bundle || { echo "no bundle" >>"$SUMMARY"; cat "$SUMMARY"; return 1; }
  bundle_env
  [[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
  describe_machine >"$OUT/machine.txt" 2>&1
  local gpu
  gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  printf 'gpu: %s\n\n' "${gpu:-none found}" >>"$SUMMARY"

  # The CUDA targets first, so that their steps run even if the rest of the build is slow; the
  # most wanted figures (the tests on the device, cuda_bench) come first.
  step configure 120 configure "$dir"
  local -a device_binaries
  mapfile -t device_binaries < <(test_binaries "${DEVICE_TESTS[@]}")
  step build-cuda 240 cmake --build "$dir" --parallel "$JOBS" --target "${device_binaries[@]}" \
    cuda_bench offload_bench kvbm-replay
  step device-tests 90 device_tests "$dir"
  # Three rounds of every case in random order (the median and the spread of each ratio).
  step cuda-bench 150 bench cuda_bench "$dir/benchmarks/cuda_bench" --benchmark_min_time=0.2 \
    --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
  local run t
  for run in "${SANITIZER_RUNS[@]}"; do
    t="${run%%:*}"
    step "memcheck-${t%%_*}" 60 sanitize memcheck "$dir" "$t" "${run#*:}"
    step "racecheck-${t%%_*}" 60 sanitize racecheck "$dir" "$t" "${run#*:}"
  done
  # The shipped conversation trace (the first 3000 requests), bytes through G1, G2 and G3.
  step replay 60 replay "$dir" --limit 3000
  step offload-bench 80 bench offload_bench "$dir/benchmarks/offload_bench" \
    --benchmark_min_time=0.2
  # Then everything else, and the whole suite.
  step build 240 cmake --build "$dir" --parallel "$JOBS"
  step ctest 240 ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS" \
    --timeout 200
  finish_summary
}

finish_summary() {
  {
    # cuda_bench's figures in the summary too: the device tool's reply shows its end.
    if [[ -s "$OUT/cuda_bench.json" ]]; then
      echo
      python3 "$ROOT/scripts/gpu/bench_table.py" "$OUT/cuda_bench.json" 2>&1
    fi
    echo
    if ((FAILED)); then echo "result: something failed or was cut short (see the logs)"; else
      echo "result: every step passed"; fi
    echo "files: $(find "$OUT" -maxdepth 1 -type f -printf '%f\n' | sort | paste -sd' ' -)"
  } >>"$SUMMARY"
  cat "$SUMMARY"
  return "$FAILED"
}

# ---------------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------------

# Prints every file (not directory) of the installed packages $@ under /usr, for the overlay.
dev_files() {
  dpkg -L "$@" 2>/dev/null | while IFS= read -r f; do
    [[ "$f" == /usr/* ]] || continue
    [[ -d "$f" && ! -L "$f" ]] && continue
    [[ -e "$f" || -L "$f" ]] && printf '%s\n' "$f"
  done
}

# Hides /usr/<files> in this (private) mount namespace: an overlay on /usr whose upper layer
# holds a whiteout (a 0/0 character device) for each.
hide_system_files() {
  local tmp="$1"
  shift
  mount -t tmpfs tmpfs "$tmp" || return 1
  mkdir -p "$tmp/upper" "$tmp/work"
  local f n=0
  for f in "$@"; do
    mkdir -p "$tmp/upper/$(dirname "${f#/usr/}")"
    mknod "$tmp/upper/${f#/usr/}" c 0 0 && n=$((n + 1))
  done
  mount -t overlay overlay -o "lowerdir=/usr,upperdir=$tmp/upper,workdir=$tmp/work" /usr ||
    return 1
  log "hid $n files of the system's packages under /usr"
}

# Lists every shared library a built program or a bundled library needs that resolves outside
# the bundle and outside the base set (glibc, libstdc++, libgcc_s, the CUDA runtime); fails if any.
# The built programs are looked at as they are (their RPATH must do it), the bundle's own
# libraries and programs with LD_LIBRARY_PATH, as their launchers and the programs' RPATH load
# them.
check_runtime_closure() {
  local dir="$1" f lib path bad=0 n=0 ldpath
  local -a files=()
  mapfile -t files < <(find "$dir/tests" "$dir/benchmarks" "$dir/tools" -maxdepth 2 -type f \
    -perm -u+x ! -name '*.sh' ! -name '*.py' 2>/dev/null)
  mapfile -t -O "${#files[@]}" files < <(find "$LIBDIR" -maxdepth 1 -name '*.so.*' -type f)
  files+=("$BUNDLE/usr/bin/redis-check-rdb" "$BUNDLE/usr/bin/redis-cli" "$BUNDLE/usr/bin/pkgconf")
  local base='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil'
  base+='|libstdc\+\+|libgcc_s|libcudart|libcuda|libnvidia)[.-]'
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || continue
    file -b "$f" | grep -q ELF || continue
    n=$((n + 1))
    ldpath=""
    [[ "$f" == "$BUNDLE"/* ]] && ldpath="$LIBDIR"
    while read -r lib path; do
      [[ "$lib" =~ $base ]] && continue
      if [[ "$path" != "$BUNDLE"/* && "$path" != "$(realpath "$BUNDLE")"/* ]]; then
        echo "outside the bundle: $f -> $lib ($path)"
        bad=1
      fi
    done < <(LD_LIBRARY_PATH="$ldpath" ldd "$f" 2>/dev/null | awk '/=>/{print $1, $3}')
  done
  ((n > 20)) || { echo "only $n programs and libraries found"; return 1; }
  ((bad == 0)) &&
    echo "every library that $n programs and bundled libraries load resolves in the bundle" \
      "or the base set"
  return "$bad"
}

# What `check` builds by default (KVBM_GPU_CHECK_TARGETS=all: everything, as `device` does): the
# library with its CUDA kernel, and a binary that links each dependency: the CUDA tests (which must
# skip), Redis (hiredis, the bundle's redis-server), ZeroMQ/cppzmq/msgpack,
# kvbm-router (CivetWeb, nlohmann-json, libcurl), kvbm-replay (prometheus-cpp pull), the disk
# engine (liburing), Google Benchmark.
readonly CHECK_TARGETS=(
  kvbm transfer_tests offload_tests remote_tests events_tests router_process_tests replay_tests
  disk_tests cuda_bench kvbm-replay kvbm-router
)

# Inside the private mount namespace (run.sh re-runs itself under unshare -m).
check_inside() {
  local dir="$1" tmp="$2"
  mount --make-rprivate / || return 1
  local -a hide=()
  local -a installed=()
  local p
  for p in "${DEV_PACKAGES[@]}" "${TOOL_PACKAGES[@]}" pkgconf pkg-config; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -q '^installed' &&
      installed+=("$p")
  done
  mapfile -t hide < <(dev_files "${installed[@]}")
  hide_system_files "$tmp" "${hide[@]}" || { err "could not hide the system's files"; return 1; }
  # Proof that they are gone.
  local gone=1 f
  for f in /usr/include/fmt/core.h /usr/include/xxhash.h /usr/include/hiredis/hiredis.h \
    /usr/lib/$ARCH_TRIPLET/cmake/GTest/GTestConfig.cmake /usr/bin/redis-server \
    /usr/bin/pkg-config; do
    [[ -e "$f" ]] && { err "still visible: $f"; gone=0; }
  done
  ((gone)) || return 1
  bundle_env
  # -O0, no -g: the proof is about what is found and linked, and two shared cores compile it
  # several times faster than -O2 (`device` builds Release).
  step configure 600 configure "$dir" -DKVBM_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_CUDA_FLAGS_DEBUG=-O0
  local -a targets=()
  # shellcheck disable=SC2206  # a list of target names, word-split on purpose
  [[ "${KVBM_GPU_CHECK_TARGETS:-}" != all ]] &&
    targets=(--target ${KVBM_GPU_CHECK_TARGETS:-${CHECK_TARGETS[*]}})
  step build 7200 cmake --build "$dir" --parallel "$JOBS" "${targets[@]}"
  step runtime-closure 300 check_runtime_closure "$dir"
  step relocated 600 check_relocated
  # The tests of the binaries built (the others are registered as <name>_NOT_BUILT; the examples'
  # are not built); the replay model's 12000-request comparison is left to the release build.
  # shellcheck disable=SC2086  # KVBM_CTEST_ARGS is word-split on purpose
  step ctest 3600 ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS" \
    -E '_NOT_BUILT$|^tools[.]replay_model$|^examples[.]' ${KVBM_CTEST_ARGS:-}
  step gpu-skips 300 check_gpu_skips "$dir"
  # The overlay and the tmpfs go with the namespace when this process ends.
}

# The bundle moved elsewhere (the tarball unpacked in a temporary directory, as on the GPU machine)
# configures too, and nothing in that build tree names the original location.
check_relocated() {
  [[ -f "$BUNDLE.tar.gz" ]] || { echo "no $BUNDLE.tar.gz"; return 1; }
  local tmp rc=0
  tmp="$(mktemp -d /tmp/kvbm-gpu-relocated.XXXXXX)"
  tar -C "$tmp" -xzf "$BUNDLE.tar.gz" || return 1
  KVBM_GPU_BUNDLE="$tmp/$(basename "$BUNDLE")" bash "$SELF" fn configure "$tmp/build" || rc=1
  if grep -l "$BUNDLE" "$tmp/build/CMakeCache.txt" "$tmp/build/build.ninja" 2>/dev/null; then
    echo "the relocated build still names $BUNDLE"
    rc=1
  fi
  ((rc == 0)) && echo "the bundle unpacked at $tmp configures, and nothing names $BUNDLE"
  rm -rf "$tmp"
  return "$rc"
}

# Without a device the CUDA tests must skip with a message, and the benchmark exit 0 saying so.
check_gpu_skips() {
  local dir="$1" e t rc=0
  for e in "${CUDA_TESTS[@]}"; do
    t="${e%%:*}"
    echo "== $e"
    "$dir/tests/$t" --gtest_filter="${e#*:}" --gtest_brief=0 2>&1 | tee "$OUT/$t.txt" |
      grep -E 'SKIPPED|PASSED|FAILED' | head -20
    grep -Eq 'no (usable )?CUDA device' "$OUT/$t.txt" || { echo "$t: no skip message"; rc=1; }
    grep -q '\[  FAILED  \]' "$OUT/$t.txt" && rc=1
  done
  echo "== cuda_bench"
  "$dir/benchmarks/cuda_bench" 2>&1 | tail -3 || rc=1
  return "$rc"
}

cmd_check() {
  require_bundle || return 1
  ((EUID == 0)) || { err "check needs root (unshare -m, mount)"; return 1; }
  OUT="${OUT:-$ROOT/build/gpu-check-out}"
  LOGS="$OUT"
  export OUT LOGS
  mkdir -p "$OUT"
  SUMMARY="$OUT/summary.txt"
  DEADLINE=$(($(date +%s) + 4 * 3600))
  local dir="${KVBM_GPU_BUILD:-$ROOT/build/gpu-check}"
  printf 'kvbm GPU bundle check (scripts/gpu/run.sh check), %s\n' "$(date -u +%FT%TZ)" >"$SUMMARY"
  # Re-run this script in a private mount namespace, so the overlay is seen by nothing else; its
  # tmpfs is mounted on $tmp there, an empty directory here.
  local tmp
  tmp="$(mktemp -d /tmp/kvbm-gpu-check.XXXXXX)"
  OUT="$OUT" KVBM_GPU_BUILD="$dir" unshare -m --propagation private \
    bash "$SELF" check-inside "$dir" "$tmp"
  FAILED=$?
  rmdir "$tmp"
  grep -q 'FAIL\|TIMEOUT\|SKIPPED' "$SUMMARY" && FAILED=1
  finish_summary
}

main() {
  case "${1:-}" in
    bundle) cmd_bundle ;;
    device) cmd_device ;;
    check) cmd_check ;;
    check-inside)
      OUT="${OUT:?}"
      LOGS="$OUT"
      SUMMARY="$OUT/summary.txt"
      DEADLINE=$(($(date +%s) + 4 * 3600))
      check_inside "$2" "$3"
      ;;
    fn) shift; bundle_env; "$@" ;;  # step's way to time-box a function
    -h | --help | help) usage ;;
    *) usage >&2; return 2 ;;
  esac
}

main "$@"; exit  # one line: bash stops here even if the file is edited while it runs
