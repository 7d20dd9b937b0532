# shellcheck shell=bash disable=SC2034  # constants here are used by the scripts that source it
# Helpers shared by scripts/*.sh; source it, do not run it.
#
# Environment understood by every script:
#   KVBM_BUILD_ROOT   where the preset build trees go (default <repo>/build, as in
#                     CMakePresets.json); the preset <p> is built in $KVBM_BUILD_ROOT/<p>
#   KVBM_JOBS         parallel compile and test jobs (default: number of CPUs)
#   CMAKE_GENERATOR   honoured for new build trees; otherwise Ninja when installed

KVBM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVBM_BUILD_ROOT="${KVBM_BUILD_ROOT:-$KVBM_ROOT/build}"
KVBM_JOBS="${KVBM_JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Sanitizer runtime options (kept in step with the "environment" of the presets).
KVBM_ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1"
KVBM_ASAN_OPTIONS+=":check_initialization_order=1:strict_init_order=1"
KVBM_UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
KVBM_TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

if [[ -t 1 ]]; then
  kvbm_log() { printf '\033[1m[%s]\033[0m %s\n' "${KVBM_LOG_TAG:-kvbm}" "$*"; }
  kvbm_err() { printf '\033[1;31m[%s] %s\033[0m\n' "${KVBM_LOG_TAG:-kvbm}" "$*" >&2; }
else
  kvbm_log() { printf '[%s] %s\n' "${KVBM_LOG_TAG:-kvbm}" "$*"; }
  kvbm_err() { printf '[%s] %s\n' "${KVBM_LOG_TAG:-kvbm}" "$*" >&2; }
fi

# Prints the generator to use for build tree $1: the one it was configured with, else
# $CMAKE_GENERATOR, else Ninja if installed, else nothing (CMake's default).
kvbm_generator_for() {
  local dir="$1"
  if [[ -f "$dir/CMakeCache.txt" ]]; then
    sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt"
  elif [[ -n "${CMAKE_GENERATOR:-}" ]]; then
    printf '%s\n' "$CMAKE_GENERATOR"
  elif command -v ninja >/dev/null 2>&1; then
    printf 'Ninja\n'
  fi
}

# ccache's cache (~/.cache/ccache unless configured otherwise) is kept between runs, as pip's is:
# paths under the checkout are hashed relative to it (CCACHE_BASEDIR) and the working directory
# is left out (CCACHE_NOHASHDIR), so a fresh clone at another path reuses what an earlier clone
# compiled. Settings the caller made win.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$KVBM_ROOT/.." && pwd)}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

# kvbm_cmake_configure <build dir> <cmake args...>: configures with a generator that matches
# any existing cache, and ccache as the compiler launcher when installed.
kvbm_cmake_configure() {
  local dir="$1"
  shift
  local gen
  gen="$(kvbm_generator_for "$dir")"
  local -a extra=()
  if [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]] && command -v ccache >/dev/null 2>&1; then
    extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  if [[ -n "$gen" ]]; then
    CMAKE_GENERATOR="$gen" cmake -B "$dir" "$@" "${extra[@]}"
  else
    cmake -B "$dir" "$@" "${extra[@]}"
  fi
}

# kvbm_configure_preset <preset> [cmake args...]: configures $KVBM_BUILD_ROOT/<preset>.
kvbm_configure_preset() {
  local preset="$1"
  shift
  (cd "$KVBM_ROOT" && kvbm_cmake_configure "$KVBM_BUILD_ROOT/$preset" --preset "$preset" "$@")
}

# kvbm_build_preset <preset> [cmake --build args...]
kvbm_build_preset() {
  local preset="$1"
  shift
  cmake --build "$KVBM_BUILD_ROOT/$preset" --parallel "$KVBM_JOBS" "$@"
}

# Prints the C++ compiler configured in build tree $1.
kvbm_cxx_of() {
  sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt"
}
