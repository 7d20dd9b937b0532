#!/usr/bin/env bash
# Style and static checks; scripts/test.sh runs them as its stage `lint`.
#
#   bash scripts/lint.sh             the checks below; non-zero on findings
#   bash scripts/lint.sh --fix       reformat every C++ file in place, then the other checks
#   bash scripts/lint.sh --format    clang-format check only
#   bash scripts/lint.sh --tidy      clang-tidy only
#   bash scripts/lint.sh --addresses loopback-only check (and its self-test) only
#   bash scripts/lint.sh --functions function-length check only
#
# Loopback only (scripts/check_addresses.py, Python only, no clang): no IP address literal other
# than loopback (127.0.0.0/8, ::1) in code that runs (tests, benchmarks, scripts, tools,
# examples, fuzz, src, include, python, cuda, cmake, .ci); where the code binds or listens,
# also 0.0.0.0. Its self-test plants addresses in a temporary copy of a test file and
# checks that each is reported.
#
# Function length (scripts/check_function_length.py, Python only, no clang): no function body
# longer than 80 lines in the library (include/, src/, cuda/) and 120 in tools/ (counted as
# clang-tidy's readability-function-size counts them: closing line minus opening line).
#
# clang-format (.clang-format) checks every tracked C++ file as a whole (tests/compile_fail/
# excepted: those sources must fail to compile and are kept as written), and every tracked C++,
# Python, CMake and shell line is at most 100 columns. --fix reformats those files in place.
#
# clang-tidy (.clang-tidy) runs on every library source, src/**/*.cpp, in parallel
# ($KVBM_JOBS); the public headers are checked through them (HeaderFilterRegex). A source whose
# tool, .clang-tidy, compile command and preprocessed text are those of an earlier clean run is
# not checked again (scripts/clang_tidy_cached.py; the cache is ~/.cache/kvbm-clang-tidy). It reads
# compile_commands.json from the clang tree of the preset `threadsafety` (configured here if
# needed, not built). Exit: 0 clean, 1 findings, 77 a tool is missing (the stage reports SKIP,
# and FAIL when CI is set: CI installs the tools, so a missing one is a broken setup).
set -uo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=lint
cd "$KVBM_ROOT" || exit 1

mode="${1:-check}"
case "$mode" in
  check | --fix | --format | --tidy | --addresses | --functions) ;;
  *) echo "usage: $0 [--fix|--format|--tidy|--addresses|--functions]" >&2; exit 2 ;;
esac

find_tool() {  # prefer the unversioned name, then the newest versioned one
  local name="$1" v
  command -v "$name" >/dev/null 2>&1 && { echo "$name"; return 0; }
  for v in 19 18 17 16 15 14; do
    command -v "$name-$v" >/dev/null 2>&1 && { echo "$name-$v"; return 0; }
  done
  return 1
}

status=0
# A missing tool skips (77) what is left, unless a check that ran has failed already.
missing_tool_exit() { if ((status != 0)); then echo 1; else echo 77; fi; }

python="$(command -v python3)" ||
  { kvbm_err "python3 not found (apt-get install python3)"; exit 77; }

# python_check <mode flag> <what> <script> <advice>: runs the script and its --self-test when
# the mode includes them (check, --fix, or the flag itself); the flag alone stops there.
python_check() {
  local flag="$1" what="$2" script="$3" advice="$4"
  [[ "$mode" == check || "$mode" == --fix || "$mode" == "$flag" ]] || return 0
  kvbm_log "$what ($script) and its self-test"
  if ! "$python" "$script"; then
    kvbm_err "$advice"
    status=1
  fi
  if ! "$python" "$script" --self-test; then
    kvbm_err "$script --self-test failed: the check no longer finds what it must"
    status=1
  fi
  if [[ "$mode" == "$flag" ]]; then exit "$status"; fi
}

python_check --addresses "loopback-only check" scripts/check_addresses.py \
  "non-loopback addresses above: talk to 127.0.0.1 or ::1; name hosts in docs"
python_check --functions "function-length check" scripts/check_function_length.py \
  "functions above are too long: split them (80 lines in the library, 120 in tools)"

if [[ "$mode" != --tidy ]]; then
  clang_format="$(find_tool clang-format)" || {
    kvbm_err "clang-format not found (apt-get install clang-format)"
    exit "$(missing_tool_exit)"
  }
  mapfile -t cxx < <(git ls-files -- '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' \
    ':!tests/compile_fail/**')
  if [[ "$mode" == --fix ]]; then
    kvbm_log "clang-format ${#cxx[@]} C++ files in place"
    "$clang_format" -i -- "${cxx[@]}"
  else
    kvbm_log "clang-format check of ${#cxx[@]} C++ files"
    if ! "$clang_format" --dry-run --Werror -- "${cxx[@]}"; then
      kvbm_err "clang-format: the files above are not formatted (bash scripts/lint.sh --fix)"
      status=1
    fi
  fi
  mapfile -t lined < <(git ls-files -- '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' '*.py' \
    '*.sh' '*CMakeLists.txt' '*.cmake' ':!tests/compile_fail/**')
  long="$(awk 'length($0) > 100 { printf "%s:%d: %d columns\n", FILENAME, FNR, length($0) }' \
    "${lined[@]}")"
  if [[ -n "$long" ]]; then
    printf '%s\n' "$long"
    kvbm_err "lines over 100 columns: $(wc -l <<<"$long") (wrap them)"
    status=1
  fi
  [[ "$mode" == --format ]] && exit "$status"
fi

clang_tidy="$(find_tool clang-tidy)" ||
  { kvbm_err "clang-tidy not found (apt-get install clang-tidy)"; exit "$(missing_tool_exit)"; }
command -v clang++ >/dev/null 2>&1 ||
  { kvbm_err "clang++ not found"; exit "$(missing_tool_exit)"; }
dir="$KVBM_BUILD_ROOT/threadsafety"
if [[ ! -f "$dir/compile_commands.json" ]]; then
  kvbm_log "configure preset threadsafety for compile_commands.json"
  kvbm_configure_preset threadsafety >/dev/null || { kvbm_err "configure failed"; exit 1; }
fi
# Generated headers (kvbm/config.h) come with the configure step; nothing needs building.
# src/python/ (the extension) is left out: its compile commands are scikit-build-core's, not the
# preset's.
mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- 'src/*.cpp' \
  ':!src/python/*')
kvbm_log "$clang_tidy on ${#sources[@]} library sources (-j$KVBM_JOBS)"
log="$dir/clang-tidy.log"
python3 scripts/clang_tidy_cached.py "$clang_tidy" "$dir" "$KVBM_JOBS" "${sources[@]}" >"$log" 2>&1
tidy_rc=$?
kvbm_log "$(tail -n 1 "$log")"
if ((tidy_rc != 0)) || grep -qE '(warning|error): ' "$log"; then
  grep -vE -e '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' \
    -e '^Suppressed [0-9]+ warnings' -e '^Use -header-filter' -e '^Use -system-headers' "$log"
  kvbm_err "clang-tidy: findings above"
  status=1
fi
if ((status == 0)); then kvbm_log "clean"; fi
exit "$status"
