#!/usr/bin/env bash
# Proves for real that CI goes red when an install step fails (docs/building.md, "CI fails
# instead of skipping"): for one piece a stage needs at a time, it makes the piece truly absent
# from this machine, runs scripts/deps.sh and the stage that needs the piece under CI=true in a
# fresh clone, prints their red lines, and restores the machine exactly.
#
#   KVBM_PROVE_YES=1 bash scripts/prove_ci_red.sh [piece...]
#
# ONLY as root on a disposable Debian/Ubuntu machine: anything else on it that needs the piece
# fails while it is absent (seconds to three minutes each). Pieces (default: all, in this order):
#   libhiredis-dev liburing-dev clang        apt-get remove (the packages deps.sh installs)
#   libclang-rt-14-dev                       the same, with libclang-rt-dev (libFuzzer)
#   python3-venv  python3-dev                with python3.X-venv (ensurepip), and libpython3.X-dev
#                                            (Python.h) with the two -dev that depend on it
#   engines       the engine wheels: pip can fetch nothing (PIP_INDEX_URL=file:// an empty
#                 directory, no PIP_FIND_LINKS, no pip.conf, an empty PIP_CACHE_DIR: no wheelhouse)
#   redis-tools   dpkg -r --force-depends (redis-server depends on it, and stays)
#   redis-server  apt-get remove
#   io_uring      sysctl kernel.io_uring_disabled=2
# A package set goes with `apt-get remove` when apt would remove exactly that set, otherwise with
# `dpkg -r --force-depends`; each removed package is pinned (Pin-Priority: -1 in
# /etc/apt/preferences.d/kvbm-prove-<pkg>.pref: apt ignores a file whose name has another dot), so
# deps.sh's apt-get install finds no candidate.
# The installed .debs are saved first (apt-get download <pkg>=<version>, or dpkg-repack <pkg> when
# the archive has moved on, so dpkg-repack must be installed for such a one); afterwards, and on
# any exit, the pins go, those .debs are installed again (dpkg -i) with their auto/manual marks,
# the sysctl gets its old value, and all of that is checked (versions, marks, apt-get check).
#
# In a fresh clone of $KVBM_PROVE_REPO (default: this repository) beside a link `shared` to
# $KVBM_PROVE_SHARED (default: ../shared), each piece runs: CI=true bash scripts/deps.sh; CI=true
# KVBM_STAGES=<stage> bash scripts/test.sh (it stops at deps when deps.sh fails); and then, when
# deps.sh failed, the same with KVBM_SKIP_DEPS=1 (deps.sh's switch for a machine provisioned
# otherwise): the stage's check (scripts/ci_checks.sh) must fail it before it builds anything.
# The python pieces set KVBM_PYTHON=/usr/bin/python3, the interpreter those packages serve.
# Whole logs: $KVBM_PROVE_LOGS (default: a new directory under /tmp, kept). Exits 1 unless every
# piece went red as expected and the machine was restored. Only apt-get (and pip, in vain) use
# the network; the stages and their checks talk to loopback alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all=(libhiredis-dev liburing-dev python3-venv python3-dev clang libclang-rt-14-dev engines
  redis-tools redis-server io_uring)
if [[ "${KVBM_PROVE_YES:-}" != 1 || $EUID -ne 0 ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
pieces=("${all[@]}")
if (($#)); then pieces=("$@"); fi
for piece in "${pieces[@]}"; do
  if [[ " ${all[*]} " != *" $piece "* ]]; then
    echo "unknown piece $piece (known: ${all[*]})" >&2
    exit 2
  fi
done
repo="${KVBM_PROVE_REPO:-$root}"
shared="${KVBM_PROVE_SHARED:-$root/../shared}"
work="$(mktemp -d /tmp/kvbm-prove.XXXXXX)"
logs="${KVBM_PROVE_LOGS:-$(mktemp -d /tmp/kvbm-prove-logs.XXXXXX)}"
mkdir -p "$logs"
pyver="$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
pins=/etc/apt/preferences.d/kvbm-prove-
how=""  # how the current piece was made absent

die() { echo "[prove] $*" >&2; exit 1; }
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300 \
    -o Dpkg::Options::=--force-confold "$@"
}
dpkg_retry() {  # dpkg "$@", waiting while another apt or dpkg holds its lock
  local i out
  for ((i = 0; i < 150; i++)); do
    out="$(dpkg "$@" 2>&1)" && return 0
    [[ "$out" == *lock* ]] || { echo "$out" >&2; return 1; }
    sleep 2
  done
  return 1
}
status_of() { dpkg-query -W -f='${db:Status-Status} ${Version}' "$1" 2>/dev/null || true; }

# What the current piece changed, for restore(): "<pkg> <version> <auto|manual>" lines, the
# io_uring sysctl's old value.
removed=()
sysctl_old=""

restore() {
  local line p ver mark bad=0
  rm -f "$pins"*
  if ((${#removed[@]})); then
    # dpkg -i, not apt-get install: apt refuses to resolve around a dependent left broken by
    # dpkg -r --force-depends (redis-server without redis-tools)
    (cd "$work/debs" && dpkg_retry -i ./*.deb) >>"$logs/restore.log" 2>&1 || bad=1
    for line in "${removed[@]}"; do
      read -r p ver mark <<<"$line"
      apt-mark -q "$mark" "$p" >/dev/null
      if [[ "$(status_of "$p")" != "installed $ver" ]]; then
        echo "[prove] $p $ver not back" >&2
        bad=1
      fi
      if [[ "$mark" == auto ]] && [[ -z "$(apt-mark showauto "$p")" ]]; then bad=1; fi
    done
  fi
  if [[ -n "$sysctl_old" ]]; then
    sysctl -q -w kernel.io_uring_disabled="$sysctl_old"
    [[ "$(cat /proc/sys/kernel/io_uring_disabled)" == "$sysctl_old" ]] || bad=1
  fi
  compgen -G "$pins*" >/dev/null && bad=1
  apt-get check >>"$logs/restore.log" 2>&1 || bad=1
  removed=() sysctl_old=""
  rm -rf "$work/debs"
  return "$bad"
}
trap 'restore || echo "[prove] RESTORE FAILED: see $logs/restore.log" >&2; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# fetch_deb <pkg> <version>: the .deb of the installed version into $work/debs, from the archive,
# else rebuilt from the installed files by dpkg-repack (an archive may have dropped the version).
fetch_deb() {
  (cd "$work/debs" && apt-get -q -o APT::Sandbox::User=root download "$1=$2") && return 0
  command -v dpkg-repack >/dev/null && (cd "$work/debs" && dpkg-repack "$1")
}

# remove_packages <pkg>...: the installed ones among them become absent and uninstallable.
remove_packages() {
  local pkgs=() p ver sim policy
  for p in "$@"; do [[ "$(status_of "$p")" == installed* ]] && pkgs+=("$p"); done
  ((${#pkgs[@]})) || die "none of $* is installed"
  mkdir -p "$work/debs"
  for p in "${pkgs[@]}"; do
    ver="$(status_of "$p")" ver="${ver#installed }"
    fetch_deb "$p" "$ver" >>"$logs/restore.log" 2>&1 ||
      die "no .deb of $p=$ver (not in the archive, no dpkg-repack): it could not be put back"
    removed+=("$p $ver $([[ -n "$(apt-mark showauto "$p")" ]] && echo auto || echo manual)")
    printf "Package: %s\nPin: release *\nPin-Priority: -1\n" "$p" >"$pins$p.pref"
  done
  sim="$(apt-get -s remove "${pkgs[@]}" 2>/dev/null | awk '/^Remv/ { print $2 }' | sort)"
  if [[ "$sim" == "$(printf '%s\n' "${pkgs[@]}" | sort)" ]]; then
    how="apt-get remove ${pkgs[*]}"
    apt_get remove "${pkgs[@]}" >>"$logs/restore.log" 2>&1
  else
    how="dpkg -r --force-depends ${pkgs[*]}"
    dpkg_retry -r --force-depends "${pkgs[@]}" >>"$logs/restore.log" 2>&1
  fi
  how+="; pinned -1"
  for p in "${pkgs[@]}"; do
    [[ "$(status_of "$p")" != installed* ]] || die "$p is still installed"
    policy="$(apt-cache policy "$p")"
    [[ "$policy" == *"Candidate: (none)"* ]] || die "$p is still installable: $policy"
  done
}

# red_lines <log>: the lines that say what went red.
red_lines() {
  {
    grep -E '^\[deps\] (installing|failed|missing|all)|^E: |^ERROR: (Could|No)' "$1" | head -n 4
    sed -n '/kvbm test summary/,/^RESULT/p' "$1" | grep -E '^[a-z-]+ +(PASS|FAIL|SKIP) |^  '
  } | cut -c1-240 | sed 's/^/    /' || true
}

failed=()
prove() {
  local piece="$1" stages=release expect extra=() pkgs=() clone="$work/$1/kvbm" t0 rc s alt ok=1
  case "$piece" in
    libhiredis-dev | liburing-dev | redis-server) pkgs=("$piece") expect="$piece" ;;
    redis-tools) pkgs=(redis-tools) expect=redis-cli ;;
    python3-venv) pkgs=(python3-venv "python$pyver-venv") stages=python expect="$piece" ;;
    python3-dev)
      pkgs=(python3-dev libpython3-dev "python$pyver-dev" "libpython$pyver-dev")
      stages=python expect="$piece" ;;
    clang) pkgs=(clang) stages="threadsafety fuzz" expect=clang++ ;;
    libclang-rt-14-dev) pkgs=(libclang-rt-14-dev libclang-rt-dev) stages=fuzz expect=libfuzzer ;;
    engines) stages=engines expect="" ;;
    io_uring) expect=io_uring ;;
  esac
  [[ "$stages" == python ]] && extra=(KVBM_PYTHON=/usr/bin/python3)
  if [[ "$piece" == engines ]]; then
    mkdir -p "$work/empty-index" "$work/pip-cache"
    extra=(PIP_INDEX_URL="file://$work/empty-index" PIP_CACHE_DIR="$work/pip-cache"
      PIP_CONFIG_FILE=/dev/null)
  fi
  git clone -q "$repo" "$clone"
  ln -s "$(cd "$shared" && pwd)" "$work/$piece/shared"
  in_clone() {  # <log name> <env assignments and command...>
    local name="$1"
    shift
    (cd "$clone" && env -u KVBM_CI_ABSENT -u KVBM_SKIP_DEPS -u KVBM_STAGES -u KVBM_QUICK \
      -u KVBM_BUILD_ROOT -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL CI=true "${extra[@]}" "$@") \
      >"$logs/$piece.$name.log" 2>&1
  }
  t0=$SECONDS how=""
  case "$piece" in
    io_uring)
      sysctl_old="$(cat /proc/sys/kernel/io_uring_disabled)"
      sysctl -q -w kernel.io_uring_disabled=2
      how="sysctl -w kernel.io_uring_disabled=2 (was $sysctl_old)" ;;
    engines) how="pip fetches nothing: ${extra[*]}, PIP_FIND_LINKS unset" ;;
    *) remove_packages "${pkgs[@]}" ;;
  esac
  echo "== $piece: $how"
  rc=0 && in_clone deps bash scripts/deps.sh || rc=$?
  echo "deps.sh exit $rc:"
  red_lines "$logs/$piece.deps.log"
  in_clone test KVBM_STAGES="$stages" timeout 600 bash scripts/test.sh || true
  echo "test.sh KVBM_STAGES=\"$stages\":"
  red_lines "$logs/$piece.test.log"
  local stage_log="$logs/$piece.test.log"
  if ((rc)); then
    grep -qE '^deps +FAIL ' "$stage_log" || ok=0
    in_clone stage KVBM_SKIP_DEPS=1 KVBM_STAGES="$stages" timeout 600 bash scripts/test.sh || true
    echo "test.sh KVBM_SKIP_DEPS=1 KVBM_STAGES=\"$stages\":"
    stage_log="$logs/$piece.stage.log"
    red_lines "$stage_log"
  fi
  if [[ "$piece" == engines ]]; then
    echo "ci_check_engine_imports on the venv engines_env.sh left:"
    (cd "$clone" && bash -c 'source scripts/ci_checks.sh; ci_check_engine_imports "$1"
      printf "    %s\n" "${ci_missing[@]}"' _ build/engines-venv | cut -c1-160) || true
  fi
  restore || die "RESTORE FAILED for $piece: see $logs/restore.log"
  echo "restored after $((SECONDS - t0)) s absent"
  # Red as expected: deps.sh fails exactly for the package pieces, naming one of them; each stage
  # fails on its check, naming the piece, before any configure or build.
  if ((${#pkgs[@]})); then
    alt="$(IFS='|' && echo "${pkgs[*]}")"
    ((rc)) && grep -qE "^\[deps\] installing: .*\b($alt)\b" "$logs/$piece.deps.log" || ok=0
  else
    ((rc == 0)) || ok=0
  fi
  for s in $stages; do grep -qE "^$s +FAIL " "$stage_log" || ok=0; done
  if [[ -n "$expect" ]]; then
    grep -qF "$expect not found" "$stage_log" || ok=0
    ! grep -qE '^\[test\] [a-z-]+: (configure|build)' "$stage_log" || ok=0
  else
    grep -qE '^ERROR: No matching distribution' "$stage_log" || ok=0
  fi
  if ((ok)); then
    echo "RED as expected: $piece"
  else
    echo "NOT RED as expected: $piece"
    failed+=("$piece")
  fi
}

for piece in "${pieces[@]}"; do prove "$piece"; done
(cd "$root" && CI=true bash scripts/deps.sh --check) || failed+=("deps.sh --check after")
echo "logs: $logs"
((${#failed[@]} == 0)) || die "not proved: ${failed[*]}"
echo "[prove] every piece went red, and the machine is restored"
