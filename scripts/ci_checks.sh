# shellcheck shell=bash
# What each stage of scripts/test.sh needs, checked before the stage starts; source it, do not
# run it (scripts/test.sh does, after scripts/common.sh).
#
# ci_check_<stage> (the stage's name, '-' as '_') appends one line per missing piece to the
# array ci_missing, "<piece> not found: <install step>". scripts/test.sh runs it before the
# stage: under CI=true a stage with a missing piece fails at once, naming each line; outside CI
# the lines are warnings and the tests that need the piece skip, saying so. ci_check_tree and
# ci_check_engine_imports check what a stage has configured or installed, before its tests run.
#
# KVBM_CI_ABSENT="<piece> ...": these pieces count as missing whatever the machine has, so that
# each check can be shown to fail (docs/building.md, "CI fails instead of skipping"). Pieces:
# redis-server redis-cli redis-cluster libhiredis-dev liburing-dev io_uring python3-venv
# python3-dev clang++ libfuzzer.

ci_missing=()

ci_absent() { [[ " ${KVBM_CI_ABSENT:-} " == *" $1 "* ]]; }

# ci_need <piece> <install step> <command...>: the piece is missing when the command fails (its
# output is dropped) or KVBM_CI_ABSENT names it.
ci_need() {
  local piece="$1" step="$2"
  shift 2
  if ci_absent "$piece"; then
    ci_missing+=("$piece not found (KVBM_CI_ABSENT): $step")
  elif ! "$@" >/dev/null 2>&1; then
    ci_missing+=("$piece not found: $step")
  fi
}

ci_has_header() {  # <header>: the C++ compiler finds it
  printf '#include <%s>\n' "$1" | "${CXX:-c++}" -fsyntax-only -x c++ - 2>/dev/null
}

# Whether the kernel grants this process an io_uring (io_uring_setup, syscall 425 on every
# architecture kvbm builds for); prints the error when not. Containers often refuse it (seccomp,
# kernel.io_uring_disabled), and then the io_uring disk tests cannot run.
ci_io_uring_probe() {
  python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params
fd = libc.syscall(425, 2, params)
if fd < 0:
    print(os.strerror(ctypes.get_errno()))
    sys.exit(1)
os.close(fd)
EOF
}

# Starts one Redis Cluster node as tests/remote/redis_cluster.h does (cluster-enabled, 127.0.0.1,
# a free port whose bus port, +10000, is free too) and asks it INFO cluster; also that redis-cli
# has --cluster (redis-tools >= 5), with which the tests join their nodes.
ci_redis_cluster_probe() {
  local tmp port pid info ok=1 i
  # `--cluster help` exits 1 after printing the commands; an old redis-cli prints no "create".
  # (Outputs are read whole, not piped into grep -q: test.sh runs with pipefail.)
  [[ "$(redis-cli --cluster help 2>&1)" == *$'\n  create '* ]] || return 1
  port="$(python3 -c '
import socket
for _ in range(50):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
        if p + 10000 < 65536:
            b.bind(("127.0.0.1", p + 10000)); print(p); break
    except OSError:
        pass
    finally:
        a.close(); b.close()')" || return 1
  [[ -n "$port" ]] || return 1
  tmp="$(mktemp -d)"
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$tmp/nodes.conf" --save '' --appendonly no --dir "$tmp" \
    --logfile "$tmp/redis.log" --protected-mode no >/dev/null 2>&1 &
  pid=$!
  for ((i = 0; i < 50; i++)); do
    info="$(redis-cli -h 127.0.0.1 -p "$port" info cluster 2>/dev/null)"
    if [[ "$info" == *cluster_enabled:1* ]]; then
      ok=0
      break
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$tmp"
  return "$ok"
}

# The C++ suite's needs (stages release, asan, tsan): Redis for tests/remote/ and the G4 tests of
# tests/facade/ and tests/replay/, a Redis Cluster for the cluster tests, hiredis for the remote
# tier itself, liburing and a kernel that grants io_uring for the io_uring disk engine tests.
ci_check_cxx_suite() {
  local why
  ci_need redis-server "apt-get install redis-server (scripts/deps.sh)" command -v redis-server
  ci_need redis-cli "apt-get install redis-tools (scripts/deps.sh)" command -v redis-cli
  if ((${#ci_missing[@]} == 0)); then
    why="a Redis Cluster node did not start (redis-server --cluster-enabled yes on 127.0.0.1,"
    why+=" redis-cli --cluster): redis-server and redis-tools >= 5 (scripts/deps.sh)"
    ci_need redis-cluster "$why" ci_redis_cluster_probe
  fi
  ci_need libhiredis-dev "apt-get install libhiredis-dev (scripts/deps.sh)" \
    ci_has_header hiredis/hiredis.h
  ci_need liburing-dev "apt-get install liburing-dev (scripts/deps.sh)" \
    pkg-config --exists liburing
  if ci_absent io_uring; then
    ci_missing+=("io_uring not found (KVBM_CI_ABSENT): the kernel must grant io_uring_setup")
  elif ! why="$(ci_io_uring_probe)"; then
    why="io_uring not found: the kernel refuses io_uring_setup (${why:-?}): run where it is"
    why+=" allowed (sysctl kernel.io_uring_disabled=0; a container's seccomp profile must"
    ci_missing+=("$why permit io_uring_setup/enter/register)")
  fi
}
ci_check_release() { ci_check_cxx_suite; }
ci_check_asan() { ci_check_cxx_suite; }
ci_check_tsan() { ci_check_cxx_suite; }

# After configure: the build tree $1 has the remote tier and the io_uring engine (a tree
# configured with KVBM_ENABLE_REMOTE=OFF, or before libhiredis-dev was installed, has not).
ci_check_tree() {
  local dir="$1" msg
  if ! grep -q '^#define KVBM_HAVE_REDIS 1' "$dir/include/kvbm/config.h" 2>/dev/null; then
    msg="libhiredis-dev not found in $dir (KVBM_HAVE_REDIS 0: configured without it, or with"
    msg+=" KVBM_ENABLE_REMOTE=OFF): apt-get install libhiredis-dev (scripts/deps.sh), reconfigure"
    ci_missing+=("$msg")
  fi
  if ! grep -q '^KVBM_LIBURING_FOUND:INTERNAL=1' "$dir/CMakeCache.txt" 2>/dev/null ||
    grep -q '^KVBM_ENABLE_URING:STRING=OFF' "$dir/CMakeCache.txt"; then
    msg="liburing-dev not found in $dir (configured without it, or with KVBM_ENABLE_URING=OFF):"
    ci_missing+=("$msg apt-get install liburing-dev (scripts/deps.sh), reconfigure")
  fi
}

# The python stages: a venv with the headers to build the extension, and Redis with the remote
# tier for the G4 tests.
ci_check_python() {
  local py="${KVBM_PYTHON:-python3}"
  ci_need python3 "apt-get install python3 (>= 3.9), or set KVBM_PYTHON (scripts/deps.sh)" \
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))'
  ci_need python3-venv "apt-get install python3-venv (scripts/deps.sh)" \
    "$py" -c 'import ensurepip, venv'
  ci_need python3-dev "apt-get install python3-dev (scripts/deps.sh)" "$py" -c '
import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
  ci_need redis-server "apt-get install redis-server (scripts/deps.sh)" command -v redis-server
  ci_need libhiredis-dev "apt-get install libhiredis-dev (scripts/deps.sh)" \
    ci_has_header hiredis/hiredis.h
}
ci_check_python_asan() { ci_check_python; }
ci_check_python_tsan() { ci_check_python; }

# The engines stage, before scripts/engines_env.sh: the interpreter of its pins and Redis.
ci_check_engines() {
  ci_need python3.11 "Python 3.11 (the pins are cp311 wheels): set KVBM_PYTHON to one" \
    "${KVBM_PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'
  ci_need redis-server "apt-get install redis-server (scripts/deps.sh)" command -v redis-server
}

# After scripts/engines_env.sh: what tests/engines imports, in the venv $1 (the engine wheels,
# Dynamo's runtime for test_dynamo_indexer.py, and kvbm itself).
ci_check_engine_imports() {
  local venv="$1" pair module wheel step
  for pair in vllm:vllm sglang:sglang torch:torch dynamo._core:ai-dynamo-runtime kvbm:kvbm; do
    module="${pair%%:*}" wheel="${pair#*:}"
    step="$module not importable in $venv: bash scripts/engines_env.sh installs $wheel"
    if [[ "$wheel" == kvbm ]]; then
      step+=" (pip install . of this tree; not with KVBM_ENGINES_SKIP_KVBM=1)"
    else
      step+=" (tests/engines/requirements.txt)"
    fi
    ci_need "$wheel" "$step" "$venv/bin/python" -c \
      "import importlib.util as u, sys; sys.exit(u.find_spec('$module') is None)"
  done
}

# threadsafety and fuzz: clang, and for fuzz its libFuzzer runtime (compiler-rt, packaged apart).
ci_check_threadsafety() {
  ci_need clang++ "apt-get install clang (scripts/deps.sh)" command -v clang++
}
ci_libfuzzer_probe() {
  local dir
  dir="$(mktemp -d)"
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' \
    >"$dir/probe.cpp"
  clang++ -fsanitize=fuzzer,address,undefined "$dir/probe.cpp" -o "$dir/probe"
  local rc=$?
  rm -rf "$dir"
  return "$rc"
}
ci_check_fuzz() {
  ci_need clang++ "apt-get install clang (scripts/deps.sh)" command -v clang++
  if ! ci_absent clang++ && command -v clang++ >/dev/null 2>&1; then
    local step="clang++ cannot link a libFuzzer program: apt-get install libclang-rt-14-dev"
    ci_need libfuzzer "$step (scripts/deps.sh)" ci_libfuzzer_probe
  fi
}
