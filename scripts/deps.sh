#!/usr/bin/env bash
# Installs the build and test dependencies of kvbm on Debian/Ubuntu, only those missing.
#
#   bash scripts/deps.sh           install what is missing (apt-get; root, or sudo)
#   bash scripts/deps.sh --check   only report; exit 1 if a required package is missing
#
# `apt-get update` runs only when something has to be installed. Optional packages are
# installed one by one, and one that cannot be is only reported: without ninja-build CMake's
# Makefile generator is used, without ccache every build compiles from scratch; without clang
# and libclang-rt-14-dev (clang's libFuzzer runtime) the fuzz stage of scripts/test.sh is
# skipped, without clang the threadsafety stage, without clang-format and clang-tidy the lint
# stage; without libhiredis-dev kvbm builds without the remote tier (G4) and without
# redis-server (and redis-tools: redis-cli, for the cluster tests) its tests (tests/remote/)
# skip with a message; without
# python3-venv and python3-dev the python stage cannot build the extension (it fails, saying so).
# Under CI=true every optional package a stage of scripts/test.sh needs is required (ninja-build
# and ccache only make builds faster): one that cannot be installed fails this script, as a
# missing one would fail its stage
# (docs/building.md, "CI fails instead of skipping"). KVBM_CI_ABSENT="<package> ..." makes this
# script count those packages as not installed, to show that (with --check: no apt-get).
# Set KVBM_SKIP_DEPS=1 to skip this script entirely (e.g. on a machine provisioned some other way).
set -euo pipefail

REQUIRED=(
  cmake g++ make
  libfmt-dev libspdlog-dev prometheus-cpp-dev libxxhash-dev
  libmsgpack-cxx-dev libzmq3-dev cppzmq-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcurl4-openssl-dev libcivetweb-dev
  python3
)
# The optional packages the stages of scripts/test.sh need; required under CI=true.
readonly STAGE_NEEDS=(clang libclang-rt-14-dev clang-format clang-tidy libhiredis-dev
  redis-server redis-tools python3-venv python3-dev liburing-dev)
if [[ "${CI:-}" == true ]]; then
  REQUIRED+=("${STAGE_NEEDS[@]}")
  OPTIONAL=(ninja-build ccache)
else
  OPTIONAL=(ninja-build ccache "${STAGE_NEEDS[@]}")
fi
readonly REQUIRED OPTIONAL

log() { printf '[deps] %s\n' "$*"; }

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ "${KVBM_SKIP_DEPS:-0}" == 1 ]]; then
  log "KVBM_SKIP_DEPS=1: not checking dependencies"
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  log "not a Debian-like system (no dpkg-query/apt-get); install these yourself:"
  log "  ${REQUIRED[*]} (optional: ${OPTIONAL[*]})"
  log "continuing; CMake will report anything that is missing"
  exit 0
fi

is_installed() {
  [[ " ${KVBM_CI_ABSENT:-} " != *" $1 "* ]] || return 1
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]
}

missing=()
for pkg in "${REQUIRED[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
missing_optional=()
for pkg in "${OPTIONAL[@]}"; do
  is_installed "$pkg" || missing_optional+=("$pkg")
done

if ((${#missing[@]} == 0 && ${#missing_optional[@]} == 0)); then
  log "all dependencies present"
  exit 0
fi
if ((check_only)); then
  ((${#missing[@]})) && log "missing: ${missing[*]}"
  ((${#missing_optional[@]})) && log "missing (optional): ${missing_optional[*]}"
  if ((${#missing[@]})); then exit 1; fi
  exit 0
fi

# Run apt-get as root: directly, or through sudo.
as_root=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
    if ! sudo -n true 2>/dev/null; then
      as_root=(sudo)  # may prompt for a password on an interactive terminal
    fi
  else
    log "not root and no sudo; please install: ${missing[*]} ${missing_optional[*]}"
    if ((${#missing[@]})); then exit 1; fi
    exit 0  # only optional packages are missing
  fi
fi
apt() {
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get \
    -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

log "installing: ${missing[*]} ${missing_optional[*]}"
apt update
if ((${#missing[@]})); then
  apt install --no-install-recommends "${missing[@]}"
fi
for pkg in "${missing_optional[@]}"; do
  apt install --no-install-recommends "$pkg" ||
    log "optional package $pkg not installed; continuing without it"
done

still_missing=()
for pkg in "${missing[@]}"; do
  is_installed "$pkg" || still_missing+=("$pkg")
done
if ((${#still_missing[@]})); then
  log "failed to install: ${still_missing[*]}"
  [[ "${CI:-}" == true ]] && log "(CI=true: the stages of scripts/test.sh need each of them)"
  exit 1
fi
log "dependencies installed"
