#!/usr/bin/env bash
# Builds kvbm and runs every test; exits non-zero if anything fails.
#
#   bash scripts/test.sh
#
# Stages, in order (each one's output is shown as it runs; a summary comes last):
#   deps      scripts/deps.sh installs missing packages (apt-get)
#   layers    scripts/check_layers.py: no lower layer includes a higher one (a second, no build)
#   release   preset `release`: configure, build everything, run ctest
#   asan      preset `asan` (ASan + LSan + UBSan): the whole suite again
#   tsan      preset `tsan` (ThreadSanitizer): the whole suite again; run under
#             `setarch $(uname -m) -R` when the kernel's address-space randomisation stops
#             TSan from starting ("unexpected memory mapping")
#   package   scripts/package_test.sh: install, then build consumers with find_package()
#             and add_subdirectory()
#   python    the Python package (docs/python.md): a virtual environment $KVBM_BUILD_ROOT/venv,
#             nanobind, scikit-build-core, numpy, pytest and hypothesis installed with pip,
#             `pip install .` (the library and its extension built in build/python/, through
#             ccache), then pytest over tests/python/ (bindings, vLLM and SGLang integrations,
#             the example).
#             The hash vectors are compared with fresh ones from the release tree's C++ test
#             when it is built; KVBM_VLLM_SOURCE / KVBM_SGLANG_SOURCE (unpacked wheels) add the
#             signature checks against the engines' own interface files.
#   python-asan  the same pytest run against an extension built with ASan + UBSan: the asan
#             tree ($KVBM_BUILD_ROOT/asan, configured like the stage asan, plus -DKVBM_PYTHON=ON
#             with the venv's python) builds only the target _kvbm, reusing the library objects
#             the stage asan compiled; a copy of python/kvbm/ with that _kvbm*.so comes first on
#             PYTHONPATH, and the venv's own (uninstrumented) python runs pytest with libasan
#             and libubsan preloaded. Leak checks are off: CPython leaks at exit by design.
#             Runs alone too (KVBM_STAGES=python-asan): makes the venv, builds the library.
#   python-tsan  likewise with the tsan tree and libtsan preloaded (under setarch -R when the
#             tsan stage needs it); scripts/tsan-python.supp suppresses reports in glibc's
#             uninstrumented code. Both print the kvbm._kvbm the session imported (pytest's
#             header), and fail if it is not theirs; both set KVBM_SANITIZER for the tests.
#   engines   the integrations driven by vLLM's and SGLang's own classes (tests/engines/): the
#             pinned venv of scripts/engines_env.sh ($KVBM_BUILD_ROOT/engines-venv: vllm, sglang,
#             a CPU-importable torch, kvbm; wheels kept in $PIP_CACHE_DIR/kvbm-engines-wheels),
#             pytest tests/engines; then it names the newest vllm/sglang on PyPI when they
#             differ from the pins, and with KVBM_ENGINES_LATEST=1 tests them (report only:
#             engines_env.sh --latest, another venv of about 2 GB of wheels)
#   threadsafety  preset `threadsafety`: the library and its tests compiled (not linked) with
#             clang and -Werror=thread-safety, which checks every KVBM_GUARDED_BY / KVBM_REQUIRES
#             (kvbm/detail/thread_annotations.h); nothing is run. The sources with a CUDA-only
#             part are checked again (clang -fsyntax-only) against the CUDA toolkit's headers
#             when one is installed. SKIP when clang is missing (FAIL when CI=true).
#   lint      scripts/lint.sh: clang-format on every C++ file, no line over 100 columns,
#             clang-tidy on the library sources. SKIP (FAIL when CI=true) when
#             clang-format or clang-tidy is missing.
#   fuzz      preset `fuzz` (clang, libFuzzer + ASan + UBSan): builds the targets in fuzz/ and
#             runs each for KVBM_FUZZ_SECONDS from its seed corpus; any crash, leak, timeout
#             or broken invariant fails the stage (docs/fuzzing.md). SKIP when clang or its
#             libFuzzer runtime is missing (FAIL when CI=true).
#
# Under CI=true (.ci/run) nothing may be skipped for want of an install step (docs/building.md,
# "CI fails instead of skipping"): each stage first checks what it needs (scripts/ci_checks.sh:
# redis-server, redis-cli and a Redis Cluster node, libhiredis-dev, liburing-dev and a kernel that
# grants io_uring, the venv tools, the engine wheels and Dynamo's runtime, clang and libFuzzer)
# and fails naming each missing piece and its install step; scripts/deps.sh fails when it cannot
# install a package a stage needs. Every stage that runs tests ends its summary line with its
# skips by reason ("skipped: 12 (no GPU 12)", scripts/skip_report.py), and under CI=true fails
# on a skip whose reason is not one of tests/python/skips.py's ALLOWED_IN_CI (no GPU, ...).
#
# Environment:
#   KVBM_QUICK=1        only deps, layers, release and package (no sanitizer builds, no fuzzing)
#   KVBM_STAGES="..."   run exactly these stages, e.g. KVBM_STAGES="release tsan"
#   KVBM_FAIL_FAST=1    stop at the first failed stage
#   KVBM_STRESS_SCALE   scale of the randomized stress tests in the sanitizer stages, C++
#                       and Python (default 0.1; release and python run them at full size)
#   KVBM_CTEST_ARGS     extra ctest arguments, word-split, e.g. "-L pools" or "-R Lru"
#   KVBM_FUZZ_SECONDS   how long the fuzz stage runs each target (default 30)
#   KVBM_ENGINES_LATEST=1  the engines stage also tests the newest vllm/sglang (report only)
#   KVBM_TEST_SEED      the seed of every randomized test (printed by each; docs/building.md)
#   KVBM_BUILD_ROOT, KVBM_JOBS, CMAKE_GENERATOR: see scripts/common.sh
set -uo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/ci_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/ci_checks.sh"
KVBM_LOG_TAG="test"
cd "$KVBM_ROOT" || exit 1

if [[ -n "${KVBM_STAGES:-}" ]]; then
  read -r -a stages <<<"$KVBM_STAGES"
elif [[ "${KVBM_QUICK:-0}" == 1 ]]; then
  stages=(layers release package)
else
  stages=(layers release asan tsan package python python-asan python-tsan engines threadsafety lint
    fuzz)
fi
stress_scale="${KVBM_STRESS_SCALE:-0.1}"

summary=()
failed_stages=()
detail=""
readonly KVBM_SKIPPED=77  # a stage returns this to be recorded as SKIP (not FAIL)

record() {  # <stage> <PASS|FAIL|SKIP> <seconds> <detail>
  summary+=("$(printf '%-12s %-4s %6ss  %s' "$1" "$2" "$3" "$4")")
  # Printed at once too, with the time since the start, so that a run cut short by a time
  # limit still shows where its time went.
  kvbm_log "stage $1: $2 in $3 s ($SECONDS s since the start) $4"
  if [[ "$2" == FAIL ]]; then failed_stages+=("$1"); fi
}

# Prints the slowest test cases of a JUnit file ($1), so that the log shows what a stage's
# time was spent on.
# The summary's tail repeats the 4 slowest of each stage (a CI log keeps only its tail).
time_notes=()
slowest_tests() {  # <JUnit file> <stage>
  [[ -f "$1" ]] || return 0
  local out
  out="$(python3 - "$1" <<'PY' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time") or 0), c.get("name")) for c in ET.parse(sys.argv[1]).iter("testcase")]
cases.sort(reverse=True)
total = sum(t for t, _ in cases)
print(f"[test] slowest of {len(cases)} tests ({total:.0f} s in all, before parallelism):")
for t, name in cases[:12]:
    print(f"[test]   {t:8.1f} s  {name}")
print(f"{total:.0f} s of tests; slowest " + ", ".join(f"{n} {t:.0f} s" for t, n in cases[:4]))
PY
)"
  [[ -n "$out" ]] || return 0
  sed '$d' <<<"$out"
  time_notes+=("$(printf '%-12s %s' "$2" "$(tail -n 1 <<<"$out")")")
}

# What failed, in a few lines under the summary (a CI log keeps only its tail): the names of the
# failed ctest cases, pytest's FAILED/ERROR lines, and each sanitizer report's summary line and
# first kvbm frames. <stage> <log file>
failure_notes=()
note_failures() {
  local stage="$1" log="$2" lines
  [[ -f "$log" ]] || return 0
  lines="$({
    sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' | head -n 8
    grep -E '^(FAILED|ERROR) ' "$log" | head -n 8
    grep -E -A14 '^WARNING: (ThreadSanitizer|AddressSanitizer)|^==[0-9]+==ERROR: ' "$log" |
      grep -E 'WARNING: |ERROR: |#[0-9]+ .*(kvbm|/src/|/include/|/tests/)' | head -n 12
    grep -E 'SUMMARY: (Thread|Address|UndefinedBehavior)Sanitizer' "$log" | sort -u | head -n 4
  } | cut -c1-160)"
  [[ -n "$lines" ]] || return 0
  failure_notes+=("[$stage] $log")
  while IFS= read -r line; do failure_notes+=("  $line"); done <<<"$lines"
}

# Reports the pieces in ci_missing (scripts/ci_checks.sh) for stage $1 and empties the list:
# under CI=true it sets $detail to the first and returns 1; outside CI they are warnings.
ci_report() {
  local stage="$1" line
  ((${#ci_missing[@]})) || return 0
  for line in "${ci_missing[@]}"; do kvbm_err "$stage: $line"; done
  if [[ "${CI:-}" != true ]]; then
    kvbm_err "$stage: outside CI the tests that need it skip, saying so"
    ci_missing=()
    return 0
  fi
  detail="${ci_missing[0]}"
  ((${#ci_missing[@]} > 1)) && detail+=" (and $((${#ci_missing[@]} - 1)) more, below)"
  failure_notes+=("[$stage] missing before the stage could start:")
  for line in "${ci_missing[@]}"; do failure_notes+=("  $line"); done
  ci_missing=()
  return 1
}

# Appends the skips of stage $1 by reason to $detail ("; skipped: N (...)"), read from a ctest
# JUnit file or a pytest -rs log ($2: ctest or pytest, $3: the file); under CI=true returns 1
# when one of them is not allowed there, and lists them under the summary.
skip_summary() {
  local stage="$1" out rc line
  out="$(python3 "$KVBM_ROOT/scripts/skip_report.py" "$2" "$3")"
  rc=$?
  detail+="; $(head -n 1 <<<"$out")"
  ((rc == 0)) && return 0
  detail+=" [CI=true: only GPU (and stage-chosen) skips are allowed]"
  failure_notes+=("[$stage] skips CI=true does not allow:")
  while IFS= read -r line; do
    failure_notes+=("  $line")
  done < <(tail -n +2 <<<"$out" | head -n 12 | cut -c1-160)
  return 1
}

print_summary() {
  local line
  echo
  echo "==================================== kvbm test summary ===================================="
  for line in "${summary[@]}"; do echo "$line"; done
  echo "==========================================================================================="
  if ((${#time_notes[@]})); then
    echo "where the ctest time went:"
    for line in "${time_notes[@]}"; do echo "$line"; done
  fi
  if ((${#failure_notes[@]})); then
    echo "what failed:"
    for line in "${failure_notes[@]}"; do echo "$line"; done
  fi
  if ((${#failed_stages[@]})); then
    echo "RESULT: FAIL (${failed_stages[*]})"
  else
    echo "RESULT: PASS (${#summary[@]} stages)"
  fi
}

# Builds preset $1 (already configured) and runs its suite. Arguments after $1 are a command
# prefix for ctest (env settings, setarch). Sets $detail.
build_and_test() {
  local preset="$1"
  shift
  local dir="$KVBM_BUILD_ROOT/$preset"
  ci_check_tree "$dir"
  ci_report "$preset" || return 1
  kvbm_log "$preset: build (-j$KVBM_JOBS)"
  local started="$SECONDS"
  if ! kvbm_build_preset "$preset"; then
    detail="build failed"
    return 1
  fi
  local built="$SECONDS"
  kvbm_log "$preset: ctest"
  local log="$dir/ctest.log" junit="$dir/ctest-junit.xml"
  rm -f "$junit"
  # shellcheck disable=SC2086  # KVBM_CTEST_ARGS is meant to be word-split
  "$@" ctest --test-dir "$dir" --output-on-failure --no-tests=error --output-junit "$junit" \
    --parallel "$KVBM_JOBS" ${KVBM_CTEST_ARGS:-} 2>&1 | tee "$log"
  local rc="${PIPESTATUS[0]}"
  detail="$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1)"
  [[ -n "$detail" ]] || detail="ctest exited with $rc"
  detail+=" (build $((built - started)) s, ctest $((SECONDS - built)) s)"
  ((rc == 0)) || note_failures "$preset" "$log"
  slowest_tests "$junit" "$preset"
  skip_summary "$preset" ctest "$junit" || rc=1
  return "$rc"
}

configure() {  # <preset> [cmake args...]
  kvbm_log "$1: configure"
  if ! kvbm_configure_preset "$@"; then
    detail="configure failed"
    return 1
  fi
}

# Compiles a tiny threaded program with the sanitizer flags $2 using the compiler of build tree
# $1 and prints the path of the binary.
build_probe() {
  local dir="$1" flags="$2" cxx
  cxx="$(kvbm_cxx_of "$dir")"
  local probe="$dir/kvbm_sanitizer_probe"
  cat >"$probe.cpp" <<'EOF'
#include <cstdlib>
#include <thread>
int main() {
  int x = 0;
  std::thread t([&] { x = 1; });
  t.join();
  void* p = std::malloc(16);
  std::free(p);
  return x - 1;
}
EOF
  # shellcheck disable=SC2086  # $flags holds several flags
  "$cxx" -std=c++20 -g $flags -pthread "$probe.cpp" -o "$probe" >&2 || return 1
  printf '%s\n' "$probe"
}

# "N GB free under <build root>": printed at each stage, so that a full disk shows in the log.
free_space() {
  local d="$KVBM_BUILD_ROOT"
  [[ -d "$d" ]] || d="$KVBM_ROOT"  # before the first build
  df -Ph "$d" 2>/dev/null | awk 'NR == 2 { print $4 " free under " $6 }'
}

# In CI (CI=true; KVBM_KEEP_BUILDS=1 keeps them), removes the sanitizer build trees once the
# last stage that uses them is over: build/asan and build/tsan hold 5-6 GB and 2-3 GB (debug
# info in every test binary), which the engines stage's 6 GB of wheels and environment need.
# A tree is used by its stage and by its python- stage (which links the extension in it).
prune_build_trees() {
  local done_stage="$1" tree later s seen=0
  [[ "${CI:-}" == true && "${KVBM_KEEP_BUILDS:-0}" != 1 ]] || return 0
  for tree in asan tsan; do
    [[ "$done_stage" == "$tree" || "$done_stage" == "python-$tree" ]] || continue
    later=0 seen=0
    for s in "${stages[@]}"; do
      if ((seen)) && [[ "$s" == "$tree" || "$s" == "python-$tree" ]]; then later=1; fi
      [[ "$s" == "$done_stage" ]] && seen=1
    done
    ((later)) && continue
    [[ -d "$KVBM_BUILD_ROOT/$tree" ]] || continue
    rm -rf "${KVBM_BUILD_ROOT:?}/$tree"
    kvbm_log "CI: removed $KVBM_BUILD_ROOT/$tree (no later stage uses it; $(free_space))"
  done
}

stage_layers() {
  if python3 "$KVBM_ROOT/scripts/check_layers.py"; then
    detail="every #include of include/kvbm/ and src/ keeps the layers (docs/architecture.md)"
  else
    detail="a lower layer includes a higher one; see above"
    return 1
  fi
}

stage_release() {
  configure release && build_and_test release
}

stage_asan() {
  # KVBM_PYTHON=OFF: the stage python-asan turns the extension on in this tree; the C++ suite
  # neither needs it nor should depend on the venv that builds it.
  configure asan -DKVBM_PYTHON=OFF || return 1
  local dir="$KVBM_BUILD_ROOT/asan" probe out asan_options="$KVBM_ASAN_OPTIONS"
  local note=""
  if probe="$(build_probe "$dir" "-fsanitize=address,undefined")"; then
    # LeakSanitizer stops the world with ptrace; some containers forbid that.
    if ! out="$(ASAN_OPTIONS=detect_leaks=1 "$probe" 2>&1)" &&
      grep -qE -e 'LeakSanitizer has encountered a fatal error' -e 'LeakSanitizer does not work' \
        <<<"$out"; then
      kvbm_err "asan: LeakSanitizer cannot run here (ptrace restricted?); leak checks disabled"
      asan_options="${asan_options/detect_leaks=1/detect_leaks=0}"
      note=" [leak checks off: LSan cannot run here]"
    fi
  else
    kvbm_err "asan: cannot build an ASan+UBSan probe program (libasan/libubsan missing?)"
    detail="sanitizer runtime unavailable"
    return 1
  fi
  build_and_test asan env \
    "ASAN_OPTIONS=$asan_options${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    "UBSAN_OPTIONS=$KVBM_UBSAN_OPTIONS${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "KVBM_STRESS_SCALE=$stress_scale"
  local rc=$?
  detail+="$note"
  return "$rc"
}

# Finds how TSan programs built in tree $1 can start here: sets tsan_launcher to () or to
# (setarch <arch> -R), and tsan_note. Sets $detail and fails when none can.
tsan_launcher=()
tsan_note=""
find_tsan_launcher() {
  local dir="$1" probe out
  tsan_launcher=()
  tsan_note=""
  if ! probe="$(build_probe "$dir" "-fsanitize=thread")"; then
    kvbm_err "tsan: cannot build a TSan probe program (libtsan missing?)"
    detail="sanitizer runtime unavailable"
    return 1
  fi
  if ! out="$("$probe" 2>&1)"; then
    # Newer kernels randomise mmap addresses more widely than older TSan runtimes expect;
    # running with randomisation off (setarch -R, inherited by ctest's children) fixes it.
    if setarch "$(uname -m)" -R "$probe" >/dev/null 2>&1; then
      tsan_launcher=(setarch "$(uname -m)" -R)
      tsan_note=" [run under setarch -R]"
      kvbm_log "tsan: TSan needs address-space randomisation off here; using setarch -R"
    else
      kvbm_err "tsan: a TSan program cannot start on this machine, even under setarch -R:"
      printf '%s\n' "$out" | head -n 5 >&2
      kvbm_err "tsan: try 'sysctl vm.mmap_rnd_bits=28' (as root)," \
        "or run with KVBM_STAGES without tsan"
      detail="TSan cannot run on this machine"
      return 1
    fi
  fi
}

stage_tsan() {
  # KVBM_PYTHON=OFF: as in stage_asan (the stage python-tsan turns it on in this tree).
  configure tsan -DKVBM_PYTHON=OFF || return 1
  find_tsan_launcher "$KVBM_BUILD_ROOT/tsan" || return 1
  # scripts/tsan.supp: uninstrumented libraries only (libzmq), each with its reason.
  local tsan_env="$KVBM_TSAN_OPTIONS:suppressions=$KVBM_ROOT/scripts/tsan.supp"
  build_and_test tsan "${tsan_launcher[@]}" env \
    "TSAN_OPTIONS=$tsan_env${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
    "KVBM_STRESS_SCALE=$stress_scale"
  local rc=$?
  detail+="$tsan_note"
  return "$rc"
}

stage_package() {
  if bash "$KVBM_ROOT/scripts/package_test.sh"; then
    detail="find_package() and add_subdirectory() consumers build and run"
  else
    detail="see the package_test output above"
    return 1
  fi
}

# Makes the virtual environment $KVBM_BUILD_ROOT/venv (once) and installs the build and test
# tools into it with pip (not into the system). Used by the stages python, python-asan and
# python-tsan, so that each can run alone. Sets $detail on failure.
python_venv() {
  local venv="$KVBM_BUILD_ROOT/venv" py="${KVBM_PYTHON:-python3}"
  if [[ ! -x "$venv/bin/python" ]]; then
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
      detail="$py >= 3.9 not found (set KVBM_PYTHON to one)"
      return 1
    fi
    if ! "$py" -m venv "$venv"; then
      detail="cannot create $venv (python3-venv missing? bash scripts/deps.sh)"
      return 1
    fi
  fi
  kvbm_log "python: tools into $venv"
  if ! "$venv/bin/python" -m pip install -q nanobind scikit-build-core numpy pytest hypothesis; then
    detail="pip could not install nanobind, scikit-build-core, numpy, pytest, hypothesis"
    return 1
  fi
}

# The C++ hash-vector writer for tests/python/test_hashing.py: the release tree's, when built.
hash_vectors_bin() {
  local vectors="$KVBM_BUILD_ROOT/release/tests/python_tests"
  if [[ -x "$vectors" ]]; then printf '%s\n' "$vectors"; fi
}

# The signature checks of tests/python/test_{vllm,sglang}.py need the engines' sources
# (KVBM_VLLM_SOURCE, KVBM_SGLANG_SOURCE); the engines stage runs them against its venv. Without
# both, the python stages deselect them (-k) rather than skip them. Sets signature_args.
signature_args=()
signature_selection() {
  signature_args=()
  if [[ -z "${KVBM_VLLM_SOURCE:-}" || -z "${KVBM_SGLANG_SOURCE:-}" ]]; then
    signature_args=(-k "not test_signatures_match")
  fi
}

# The release tree's kvbm-replay, when built (tests/python/test_router_model.py runs it).
replay_bin() {
  local replay="$KVBM_BUILD_ROOT/release/tools/replay/kvbm-replay"
  if [[ -x "$replay" ]]; then printf '%s\n' "$replay"; fi
}

# Sets $detail to pytest's summary line in log $1, or to "pytest exited with $2".
pytest_detail() {
  detail="$(grep -E '[0-9]+ (passed|failed|errors?)' "$1" | tail -n 1 | tr -d '=' | sed 's/^ *//')"
  [[ -n "$detail" ]] || detail="pytest exited with $2"
}

# Builds and installs the Python package into $KVBM_BUILD_ROOT/venv and runs pytest over
# tests/python/. The C++ build goes through ccache when it is installed and keeps its tree in
# build/python/ (pyproject.toml), so a second run recompiles only what changed.
stage_python() {
  python_venv || return 1
  local venv="$KVBM_BUILD_ROOT/venv"
  local cmake_args="${CMAKE_ARGS:-}"
  if command -v ccache >/dev/null 2>&1; then cmake_args+=" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; fi
  kvbm_log "python: pip install . (-j$KVBM_JOBS)"
  if ! CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$KVBM_JOBS" \
    "$venv/bin/python" -m pip install -q --no-build-isolation "$KVBM_ROOT"; then
    detail="pip install . failed: see the build output above"
    return 1
  fi
  local log="$venv/pytest.log"
  kvbm_log "python: pytest tests/python"
  signature_selection
  (cd "$KVBM_ROOT" && KVBM_HASH_VECTORS_BIN="$(hash_vectors_bin)" KVBM_REPLAY="$(replay_bin)" \
    "$venv/bin/python" -m pytest -q -rfEs --durations=8 "${signature_args[@]}" tests/python) \
    2>&1 | tee "$log"
  local rc="${PIPESTATUS[0]}"
  pytest_detail "$log" "$rc"
  ((rc == 0)) || note_failures python "$log"
  skip_summary python pytest "$log" || rc=1
  return "$rc"
}

# python_sanitized <preset> <runtime libs> [command prefix...]: pytest over tests/python/
# against the extension built in the sanitizer tree of <preset>. The caller has configured that
# tree as the stage <preset> does, plus KVBM_PYTHON=ON and the venv's python; only the target
# _kvbm is built here, so the library objects the stage <preset> compiled are reused (their
# command lines do not change). <runtime libs> (e.g. "libasan.so libubsan.so") are found with
# the tree's compiler (-print-file-name) and preloaded: the venv's python is not instrumented,
# and a sanitized shared object needs its runtime loaded before anything else. The words after
# them prefix the pytest command (setarch, env settings); the child processes the tests start
# (python, redis-server) inherit all of it. The callers also set KVBM_SANITIZER there, so that
# a test can tell it runs instrumented (e.g. to skip a bound on the process's RSS, which the
# sanitizer's own bookkeeping grows). Sets $detail.
python_sanitized() {
  local preset="$1" libs="$2"
  shift 2
  local stage="python-$preset" dir="$KVBM_BUILD_ROOT/$preset" venv="$KVBM_BUILD_ROOT/venv"
  kvbm_log "$stage: build _kvbm (-j$KVBM_JOBS)"
  if ! kvbm_build_preset "$preset" --target _kvbm; then
    detail="build of _kvbm failed"
    return 1
  fi
  local so
  so="$(find "$dir/src/python" -maxdepth 1 -name '_kvbm*.so' | head -n 1)"
  if [[ -z "$so" ]]; then
    detail="no _kvbm*.so in $dir/src/python after the build"
    return 1
  fi
  if ! grep -qE ' U __(asan|tsan|ubsan)_' < <(nm -D "$so"); then
    detail="$so calls no sanitizer runtime: the tree is not instrumented"
    return 1
  fi
  local cxx lib path preload=""
  cxx="$(kvbm_cxx_of "$dir")"
  for lib in $libs; do
    path="$("$cxx" -print-file-name="$lib")"
    if [[ "$path" != /* || ! -e "$path" ]]; then
      detail="$cxx does not know $lib (is the sanitizer runtime installed?)"
      return 1
    fi
    preload+="${preload:+:}$(realpath "$path")"
  done
  # A copy of the package with the instrumented extension, put first on PYTHONPATH: the venv
  # also has the uninstrumented kvbm that the stage python installs.
  local site="$dir/python-site"
  rm -rf "$site"
  mkdir -p "$site"
  cp -r "$KVBM_ROOT/python/kvbm" "$site/kvbm"
  find "$site/kvbm" -name '__pycache__' -prune -exec rm -rf {} +
  cp "$so" "$site/kvbm/"
  # A plugin (pytest -p) that fails the session unless kvbm._kvbm is that copy, and prints it.
  cat >"$site/kvbm_sanitized_check.py" <<'EOF'
import os

import kvbm._kvbm

EXPECTED = os.path.realpath(os.environ["KVBM_EXPECTED_EXTENSION"])
ACTUAL = os.path.realpath(kvbm._kvbm.__file__)


def pytest_configure(config):
    if ACTUAL != EXPECTED:
        raise RuntimeError(f"kvbm._kvbm is {ACTUAL}, not the instrumented {EXPECTED}")


def pytest_report_header(config):
    return f"kvbm._kvbm (instrumented): {ACTUAL}"
EOF
  local expected log="$dir/pytest.log"
  expected="$(realpath "$site/kvbm/$(basename "$so")")"
  kvbm_log "$stage: pytest tests/python, LD_PRELOAD=$preload"
  signature_selection
  (cd "$KVBM_ROOT" && "$@" env LD_PRELOAD="$preload" \
    PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" KVBM_EXPECTED_EXTENSION="$expected" \
    KVBM_HASH_VECTORS_BIN="$(hash_vectors_bin)" KVBM_REPLAY="$(replay_bin)" \
    KVBM_STRESS_SCALE="$stress_scale" "$venv/bin/python" -m pytest -p kvbm_sanitized_check \
    --capture=sys -rfEs --durations=8 "${signature_args[@]}" tests/python) 2>&1 | tee "$log"
  local rc="${PIPESTATUS[0]}"
  pytest_detail "$log" "$rc"
  ((rc == 0)) || note_failures "$stage" "$log"
  skip_summary "$stage" pytest "$log" || rc=1
  if ! grep -qF "kvbm._kvbm (instrumented): $expected" "$log"; then
    detail+=" [the session did not report importing $expected]"
    ((rc)) || rc=1
  fi
  return "$rc"
}

# pytest over tests/python/ with the extension built with ASan + UBSan in the asan tree.
stage_python_asan() {
  python_venv || return 1
  configure asan -DKVBM_PYTHON=ON -DPython_EXECUTABLE="$KVBM_BUILD_ROOT/venv/bin/python" || return 1
  # The venv's python is the uninstrumented interpreter, and CPython does not free everything at
  # exit (interned strings, static types, modules) by design: LeakSanitizer would report that,
  # so leak checks are off. ASan's memory errors and UBSan's checks stay on and halt the run.
  # PYTHONMALLOC=malloc takes Python objects' memory from malloc, not from pymalloc's arenas, so
  # that ASan also sees the extension use a freed Python buffer.
  local asan_env="${KVBM_ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}:halt_on_error=1"
  python_sanitized asan "libasan.so libubsan.so" env \
    "ASAN_OPTIONS=$asan_env${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    "UBSAN_OPTIONS=$KVBM_UBSAN_OPTIONS${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    PYTHONMALLOC=malloc KVBM_SANITIZER=address,undefined
}

# pytest over tests/python/ with the extension built with TSan in the tsan tree.
stage_python_tsan() {
  python_venv || return 1
  configure tsan -DKVBM_PYTHON=ON -DPython_EXECUTABLE="$KVBM_BUILD_ROOT/venv/bin/python" || return 1
  find_tsan_launcher "$KVBM_BUILD_ROOT/tsan" || return 1
  # The suppressions are for glibc's and CPython's own uninstrumented code (each with its reason
  # in the file), never for kvbm's frames.
  local tsan_env="$KVBM_TSAN_OPTIONS:suppressions=$KVBM_ROOT/scripts/tsan-python.supp"
  python_sanitized tsan "libtsan.so" "${tsan_launcher[@]}" env \
    "TSAN_OPTIONS=$tsan_env${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
    KVBM_SANITIZER=thread
  local rc=$?
  detail+="$tsan_note"
  return "$rc"
}

# The integrations under the engines' own classes (tests/engines/, docs/python.md): the pinned
# venv of scripts/engines_env.sh (vLLM, SGLang, a CPU-importable torch, kvbm itself), then pytest
# over tests/engines. Then the newest vllm and sglang on PyPI, when they differ from the pins, in
# a second venv (engines_env.sh --latest): reported in the output and the detail, never failing
# the stage (a failure there is a finding to fix or document).
stage_engines() {
  local venv="$KVBM_BUILD_ROOT/engines-venv" log="$KVBM_BUILD_ROOT/engines-pytest.log"
  kvbm_log "engines: the pinned environment (scripts/engines_env.sh)"
  if ! bash "$KVBM_ROOT/scripts/engines_env.sh"; then
    detail="scripts/engines_env.sh failed: see above"
    return 1
  fi
  ci_check_engine_imports "$venv"
  ci_report engines || return 1
  kvbm_log "engines: pytest tests/engines" \
    "(vllm, sglang as pinned in tests/engines/requirements.txt)"
  (cd "$KVBM_ROOT" && PYTHONWARNINGS=ignore::DeprecationWarning \
    KVBM_STRESS_SCALE="${KVBM_STRESS_SCALE:-1}" "$venv/bin/python" -m pytest -q -rfEs \
    --durations=8 -p no:cacheprovider tests/engines) 2>&1 | tee "$log"
  local rc="${PIPESTATUS[0]}"
  detail="$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -n 1 | tr -d '=' | sed 's/^ *//')"
  [[ -n "$detail" ]] || detail="pytest exited with $rc"
  ((rc == 0)) || note_failures engines "$log"
  skip_summary engines pytest "$log" || rc=1
  # The signature checks of tests/python against the engines' installed interface files.
  local site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  kvbm_log "engines: method signatures against $site"
  if ! (cd "$KVBM_ROOT" && PYTHONWARNINGS=ignore::DeprecationWarning KVBM_VLLM_SOURCE="$site" \
    KVBM_SGLANG_SOURCE="$site" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    tests/python/test_vllm.py tests/python/test_sglang.py -k signatures); then
    detail+="; signature checks FAILED"
    rc=1
  fi
  local pinned newest name report=""
  for name in vllm sglang; do
    pinned="$(sed -n "s/^$name==\([^ ]*\).*/\1/p" "$KVBM_ROOT/tests/engines/requirements.txt")"
    newest="$("$venv/bin/python" -m pip index versions "$name" 2>/dev/null |
      sed -n "s/^$name (\(.*\))$/\1/p")"
    if [[ -z "$newest" ]]; then
      report+=" $name: newest unknown (index not reachable);"
    elif [[ "$newest" != "$pinned" ]]; then
      report+=" $name $newest;"
    fi
  done
  if [[ -z "$report" ]]; then
    detail+=" [newest on PyPI = the pins]"
  elif [[ "$report" == *"unknown"* ]]; then
    detail+=" [$report ]"
  elif [[ "${KVBM_ENGINES_LATEST:-0}" != 1 ]]; then
    # The newest releases' venv is another 2 GB of wheels and a build of the extension: only on
    # request, since its result is a report and never the stage's.
    detail+=" [newer on PyPI:$report not tested; KVBM_ENGINES_LATEST=1 tests them, report only]"
  else
    kvbm_log "engines: newer releases on PyPI:$report testing them (report only)"
    local latest_log="$KVBM_BUILD_ROOT/engines-latest-pytest.log" lrc=1
    if bash "$KVBM_ROOT/scripts/engines_env.sh" --latest; then
      (cd "$KVBM_ROOT" && PYTHONWARNINGS=ignore::DeprecationWarning \
        "$KVBM_BUILD_ROOT/engines-venv-latest/bin/python" -m pytest -q -rfEs --durations=8 \
        -p no:cacheprovider tests/engines) 2>&1 | tee "$latest_log"
      lrc="${PIPESTATUS[0]}"
    fi
    if ((lrc == 0)); then
      detail+=" [newest:$report pass]"
    else
      detail+=" [newest:$report FAIL (report only: $latest_log)]"
    fi
  fi
  return "$rc"
}

# Builds the preset threadsafety: clang with -Wthread-safety as an error, library and tests.
# The sources with a CUDA-only part (#if KVBM_HAVE_CUDA): the preset builds without CUDA, so
# they are checked again with clang -fsyntax-only against the CUDA toolkit's headers, with a
# kvbm/config.h that says KVBM_HAVE_CUDA 1. Returns 77 when no toolkit is found.
check_cuda_sources() {
  local cuda_inc="" d f rc=0
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n "$d" && -f "$d/include/cuda_runtime_api.h" ]]; then
      cuda_inc="$d/include"
      break
    fi
  done
  [[ -n "$cuda_inc" ]] || return "$KVBM_SKIPPED"
  local tree="$KVBM_BUILD_ROOT/threadsafety" tmp
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/kvbm"
  sed 's/^#define KVBM_HAVE_CUDA 0$/#define KVBM_HAVE_CUDA 1/' "$tree/include/kvbm/config.h" \
    >"$tmp/kvbm/config.h"
  while IFS= read -r f; do
    kvbm_log "threadsafety: $f with CUDA ($cuda_inc)"
    clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety \
      -DKVBM_HAVE_CUDA=1 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DMSGPACK_NO_BOOST \
      -I"$tmp" -I"$KVBM_ROOT/include" -I"$tree/include" -I"$KVBM_ROOT/src" -I"$KVBM_ROOT/cuda" \
      -isystem "$cuda_inc" "$KVBM_ROOT/$f" || rc=1
  done < <(cd "$KVBM_ROOT" &&
    git ls-files --cached --others --exclude-standard -- 'src/*.cpp' ':!src/python/*' |
    xargs grep -l '^#if KVBM_HAVE_CUDA')
  rm -rf "$tmp"
  return "$rc"
}

stage_threadsafety() {
  if ! command -v clang++ >/dev/null 2>&1; then
    kvbm_err "threadsafety: clang++ not found; scripts/deps.sh installs clang"
    detail="clang++ not found"
    return "$KVBM_SKIPPED"
  fi
  configure threadsafety || return 1
  # Only the object files when the tree is Ninja's: the checks are compile errors and nothing
  # built here runs, so linking the library and the test binaries would be time for nothing.
  local dir="$KVBM_BUILD_ROOT/threadsafety"
  local -a objects=()
  if [[ "$(kvbm_generator_for "$dir")" == Ninja ]]; then
    mapfile -t objects < <(ninja -C "$dir" -t targets all | sed -n 's/^\(.*\.o\): .*/\1/p')
  fi
  kvbm_log "threadsafety: build ${#objects[@]} objects (-j$KVBM_JOBS)"
  if ! kvbm_build_preset threadsafety ${objects[@]:+--target "${objects[@]}"}; then
    detail="build failed: see the -Wthread-safety errors above"
    return 1
  fi
  check_cuda_sources
  case $? in
    0) detail="library and tests compile with clang -Werror=thread-safety; CUDA sources checked" ;;
    77)
      detail="library and tests compile with clang -Werror=thread-safety"
      detail+=" (no CUDA toolkit: CUDA parts unchecked)"
      ;;
    *)
      detail="the CUDA sources fail -Wthread-safety: see the errors above"
      return 1
      ;;
  esac
}

stage_lint() {
  bash "$KVBM_ROOT/scripts/lint.sh"
  local rc=$?
  case $rc in
    0) detail="clang-format (every file), 100 columns and clang-tidy (library sources) clean" ;;
    77)
      detail="clang-format or clang-tidy not installed"
      # CI installs them (scripts/deps.sh): there, a missing tool is a broken setup.
      [[ "${CI:-}" == true ]] && { detail="$detail (required in CI)"; return 1; }
      return "$KVBM_SKIPPED"
      ;;
    *)
      detail="findings: see the lint output above (bash scripts/lint.sh)"
      return 1
      ;;
  esac
}

# Runs the libFuzzer targets of fuzz/ (preset `fuzz`), each for $KVBM_FUZZ_SECONDS, one after
# the other. A target's new inputs go to build/fuzz/corpus/<target> (kept between runs), the
# committed seeds in fuzz/corpus/<target> are only read; a crashing input is written to
# build/fuzz/artifacts/<target>/ and its path printed.
stage_fuzz() {
  local seconds="${KVBM_FUZZ_SECONDS:-30}"
  if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    detail="KVBM_FUZZ_SECONDS must be a positive number of seconds, not '$seconds'"
    return 1
  fi
  if ! command -v clang++ >/dev/null 2>&1; then
    kvbm_err "fuzz: clang++ not found; scripts/deps.sh installs clang and libclang-rt-14-dev"
    detail="clang++ not found"
    return "$KVBM_SKIPPED"
  fi
  local dir="$KVBM_BUILD_ROOT/fuzz"
  mkdir -p "$dir"
  # libFuzzer's runtime comes with clang's compiler-rt, packaged apart on Debian.
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' \
    >"$dir/kvbm_fuzzer_probe.cpp"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$dir/kvbm_fuzzer_probe.cpp" \
    -o "$dir/kvbm_fuzzer_probe" 2>"$dir/kvbm_fuzzer_probe.log"; then
    kvbm_err "fuzz: clang++ cannot link a libFuzzer program (libclang-rt-*-dev missing?):"
    head -n 3 "$dir/kvbm_fuzzer_probe.log" >&2
    detail="libFuzzer runtime not installed"
    return "$KVBM_SKIPPED"
  fi
  configure fuzz || return 1
  kvbm_log "fuzz: build (-j$KVBM_JOBS)"
  if ! kvbm_build_preset fuzz --target fuzzers; then
    detail="build failed"
    return 1
  fi

  local src target bin log runs failed=() ran=()
  for src in "$KVBM_ROOT"/fuzz/*_fuzz.cpp; do
    target="$(basename "$src" .cpp)"
    bin="$dir/fuzz/$target"
    log="$dir/$target.log"
    mkdir -p "$dir/corpus/$target" "$dir/artifacts/$target"
    local -a args=(-max_total_time="$seconds" -timeout=25 -print_final_stats=1
      -artifact_prefix="$dir/artifacts/$target/")
    [[ -f "$KVBM_ROOT/fuzz/$target.dict" ]] && args+=(-dict="$KVBM_ROOT/fuzz/$target.dict")
    kvbm_log "fuzz: $target for ${seconds} s"
    UBSAN_OPTIONS="$KVBM_UBSAN_OPTIONS${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
      "$bin" "${args[@]}" "$dir/corpus/$target" "$KVBM_ROOT/fuzz/corpus/$target" >"$log" 2>&1
    local rc=$?
    runs="$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)"
    if ((rc != 0)); then
      kvbm_err "fuzz: $target failed (exit $rc); the end of $log:"
      tail -n 40 "$log" >&2
      grep -h 'Test unit written to' "$log" >&2
      failed+=("$target")
    else
      kvbm_log "fuzz: $target: ${runs:-?} runs, no failure"
      ran+=("$target ${runs:-?} runs")
    fi
  done
  if ((${#failed[@]})); then
    detail="failed: ${failed[*]} (inputs in $dir/artifacts/)"
    return 1
  fi
  detail="${seconds} s each: $(printf '%s, ' "${ran[@]}")"
  detail="${detail%, }"
}

if [[ "${CI:-}" == true ]]; then
  kvbm_log "CI: $(uname -srm), $(nproc) CPUs, bash $BASH_VERSION"
fi
kvbm_log "stages: ${stages[*]} (build root $KVBM_BUILD_ROOT, -j$KVBM_JOBS)"

# ccache's counters (hits misses files KiB), for the log: whether the cache was kept from an
# earlier run (files before the first stage) and what each stage took from it.
ccache_counts() {
  command -v ccache >/dev/null 2>&1 || return 0
  ccache --print-stats 2>/dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m = $2 } $1 == "files_in_cache" { f = $2 }
    $1 == "cache_size_kibibyte" { k = $2 }
    END { if (f != "") print h + 0, m + 0, f + 0, k + 0 }'
}
ccache_before=""
ccache_note() {  # logs the hits and misses since the last call
  local now h0 m0 h1 m1 f k
  now="$(ccache_counts)"
  [[ -n "$now" ]] || return 0
  if [[ -n "$ccache_before" ]]; then
    read -r h0 m0 _ _ <<<"$ccache_before"
    read -r h1 m1 f k <<<"$now"
    kvbm_log "ccache: $((h1 - h0)) hits, $((m1 - m0)) misses in this stage" \
      "($f files, $((k / 1024)) MiB in the cache)"
  fi
  ccache_before="$now"
}

start=$SECONDS
if bash "$KVBM_ROOT/scripts/deps.sh"; then
  record deps PASS $((SECONDS - start)) ""
else
  record deps FAIL $((SECONDS - start)) "could not install dependencies"
  print_summary
  exit 1
fi
kvbm_log "$(cmake --version | head -n 1); $("${CXX:-c++}" --version 2>/dev/null | head -n 1)"
if command -v ccache >/dev/null 2>&1; then
  read -r _ _ files kib <<<"$(ccache_counts)"
  if ((${files:-0} > 0)); then
    kvbm_log "ccache: ${files} files, $((${kib:-0} / 1024)) MiB in $(ccache -k cache_dir) before" \
      "the first stage: kept from an earlier run, it serves this one's unchanged compiles"
  else
    kvbm_log "ccache: $(ccache -k cache_dir) is empty: every compile of this run is cold"
  fi
  ccache_note
fi

for stage in "${stages[@]}"; do
  if ! declare -F "stage_${stage//-/_}" >/dev/null; then
    known_stages="layers release asan tsan package python python-asan python-tsan engines"
    known_stages+=" threadsafety lint fuzz"
    record "$stage" FAIL 0 "unknown stage (known: $known_stages)"
    continue
  fi
  if ((${#failed_stages[@]})) && [[ "${KVBM_FAIL_FAST:-0}" == 1 ]]; then
    record "$stage" SKIP 0 "KVBM_FAIL_FAST=1 after an earlier failure"
    continue
  fi
  kvbm_log "===== stage: $stage ===== ($(free_space); $SECONDS s since the start)"
  start=$SECONDS
  detail=""
  ci_missing=()
  if declare -F "ci_check_${stage//-/_}" >/dev/null; then "ci_check_${stage//-/_}"; fi
  if ! ci_report "$stage"; then
    record "$stage" FAIL $((SECONDS - start)) "$detail"
    continue
  fi
  "stage_${stage//-/_}"
  case $? in
    0) record "$stage" PASS $((SECONDS - start)) "$detail" ;;
    "$KVBM_SKIPPED") record "$stage" SKIP $((SECONDS - start)) "$detail" ;;
    *) record "$stage" FAIL $((SECONDS - start)) "$detail" ;;
  esac
  ccache_note
  prune_build_trees "$stage"
done

print_summary
((${#failed_stages[@]} == 0))
