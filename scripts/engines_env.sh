#!/usr/bin/env bash
# Creates the virtual environment in which the real vLLM and SGLang classes import and run on
# the CPU (tests/engines/), with kvbm installed into it.
#
#   bash scripts/engines_env.sh            $KVBM_BUILD_ROOT/engines-venv from the pins in
#                                          tests/engines/requirements.txt, then kvbm (pip install .)
#   bash scripts/engines_env.sh --latest   $KVBM_BUILD_ROOT/engines-venv-latest: the same pins, but
#                                          the newest vllm and sglang on PyPI (report-only: a later
#                                          release may need a dependency the pins do not have)
#   KVBM_ENGINES_LATEST=1                  the same as --latest
#   bash scripts/engines_env.sh --check    print what a run would do and exit (0: nothing to do)
#
# Then: PYTHONWARNINGS=ignore::DeprecationWarning \
#         "$KVBM_BUILD_ROOT/engines-venv/bin/python" -m pytest -q tests/engines/smoke_test.py
# (tests/engines/README.md: what the tests build, timings, sizes)
#
# Every package is installed with --no-deps and --only-binary: vLLM and SGLang declare GPU stacks
# (flashinfer, cutlass, deep-gemm, ...) that neither imports for the classes the tests use, so the
# requirements file lists exactly what their imports need, each at ==version. torch is PyPI's
# default Linux wheel, built for CUDA 13.0; it takes its CUDA runtime (cudart, cuBLAS, cuDNN, cuFFT,
# cuRAND, cuSOLVER, cuSPARSE, NVRTC, CUPTI, nvJitLink) from the toolkit in /usr/local/cuda (on the
# loader's path through /etc/ld.so.conf.d on this machine kind) and only the four libraries that
# toolkit lacks, or has too old, from nvidia-* wheels. No GPU is needed: the tests run on the CPU.
#
# Idempotent: a stamp in the venv records the sha256 of the requirements file (and the vllm/sglang
# versions in --latest mode); when it matches, pip is not run again. kvbm is reinstalled only when
# its sources changed (a second stamp: a hash of git's view of CMakeLists.txt, cmake/, include/,
# src/, python/ and pyproject.toml), through ccache and pyproject.toml's fixed build tree.
#
# The wheels are downloaded once into a wheelhouse and installed from there with --no-index, so a
# new venv (or a changed pin) downloads only what the wheelhouse lacks: pip's own HTTP cache is not
# enough (behind some proxies it stores nothing), and these wheels are ~1.7 GB. --no-compile: the
# engines ship tens of thousands of modules, and compiling all of them at install time took longer
# than the rest of the install; Python writes the .pyc of the few the tests import on first use.
#
# Environment: KVBM_BUILD_ROOT (scripts/common.sh), PIP_CACHE_DIR (default ~/.cache/pip, kept),
# KVBM_ENGINES_WHEELS (the wheelhouse, default $PIP_CACHE_DIR/kvbm-engines-wheels), KVBM_PYTHON
# (the interpreter for the venv, default python3, which must be 3.11: the pins are cp311 wheels),
# KVBM_ENGINES_SKIP_KVBM=1 (do not install kvbm), KVBM_JOBS (compile jobs for kvbm).
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=engines

latest="${KVBM_ENGINES_LATEST:-0}"
check_only=0
for arg in "$@"; do
  case "$arg" in
    --latest) latest=1 ;;
    --check) check_only=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "usage: $0 [--latest] [--check]" >&2
      exit 2
      ;;
  esac
done

req="$KVBM_ROOT/tests/engines/requirements.txt"
py="${KVBM_PYTHON:-python3}"
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}"
wheels="${KVBM_ENGINES_WHEELS:-$PIP_CACHE_DIR/kvbm-engines-wheels}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [[ "$latest" == 1 ]]; then
  venv="$KVBM_BUILD_ROOT/engines-venv-latest"
else
  venv="$KVBM_BUILD_ROOT/engines-venv"
fi
stamp="$venv/.kvbm-engines-requirements.sha256"
kvbm_stamp="$venv/.kvbm-engines-kvbm.sha256"

sha256_of() { sha256sum | cut -d' ' -f1; }

# The newest version of a package on the index, by pip's own resolution.
newest_version() {
  "$venv/bin/python" -m pip index versions "$1" 2>/dev/null | sed -n "s/^$1 (\(.*\))$/\1/p"
}

# What the requirements stamp must say: the file's hash, and in --latest mode the versions of
# vllm and sglang that are newest now (a new release invalidates the stamp).
wanted_stamp() {
  local h
  h="$(sha256_of <"$req")"
  if [[ "$latest" == 1 ]]; then
    printf '%s vllm=%s sglang=%s\n' "$h" "$latest_vllm" "$latest_sglang"
  else
    printf '%s\n' "$h"
  fi
}

# A hash of the kvbm sources as git sees them: tracked trees at HEAD, uncommitted changes and
# untracked files. Empty when this is not a git work tree (kvbm is then always reinstalled).
kvbm_source_hash() {
  local paths=(CMakeLists.txt cmake include src python pyproject.toml)
  (
    cd "$KVBM_ROOT"
    git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 0
    {
      git rev-parse HEAD 2>/dev/null || true
      git diff HEAD --binary -- "${paths[@]}" 2>/dev/null || true
      git ls-files -o --exclude-standard -z -- "${paths[@]}" | xargs -0 -r sha256sum
    } | sha256_of
  )
}

if [[ ! -x "$venv/bin/python" ]]; then
  if [[ "$check_only" == 1 ]]; then
    kvbm_log "would create $venv and install $req"
    exit 1
  fi
  if ! "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    kvbm_err "$py is not Python 3.11 (the pins in $req are cp311 wheels); set KVBM_PYTHON"
    exit 1
  fi
  kvbm_log "creating $venv"
  "$py" -m venv "$venv"
fi

latest_vllm="" latest_sglang=""
if [[ "$latest" == 1 ]]; then
  latest_vllm="$(newest_version vllm)"
  latest_sglang="$(newest_version sglang)"
  if [[ -z "$latest_vllm" || -z "$latest_sglang" ]]; then
    kvbm_err "could not ask the index for the newest vllm and sglang"
    exit 1
  fi
fi

want="$(wanted_stamp)"
have="$(cat "$stamp" 2>/dev/null || true)"
kvbm_want="" kvbm_have=""
if [[ "${KVBM_ENGINES_SKIP_KVBM:-0}" != 1 ]]; then
  kvbm_want="$(kvbm_source_hash)"
  kvbm_have="$(cat "$kvbm_stamp" 2>/dev/null || true)"
fi

if [[ "$check_only" == 1 ]]; then
  todo=0
  if [[ "$want" != "$have" ]]; then
    kvbm_log "would install $req into $venv"
    todo=1
  fi
  if [[ "${KVBM_ENGINES_SKIP_KVBM:-0}" != 1 &&
    (-z "$kvbm_want" || "$kvbm_want" != "$kvbm_have") ]]; then
    kvbm_log "would install kvbm into $venv"
    todo=1
  fi
  [[ "$todo" == 0 ]] && kvbm_log "$venv is up to date"
  exit "$todo"
fi

# pip_install <requirements file>: from the wheelhouse alone when it has every wheel; otherwise
# the missing ones are downloaded into it first (files already there are not fetched again).
pip_install() {
  local pip=("$venv/bin/python" -m pip)
  local opts=(--no-deps --only-binary=:all: -q)
  local install=(install "${opts[@]}" --no-compile --no-index --find-links "$wheels" -r "$1")
  if "${pip[@]}" "${install[@]}" 2>/dev/null; then
    kvbm_log "installed from the wheelhouse $wheels"
    return 0
  fi
  kvbm_log "downloading the missing wheels into $wheels"
  mkdir -p "$wheels"
  # About 1.7 GB of wheels (torch and triton are most of it): the wheelhouse is the cache, so
  # pip's own HTTP cache would only hold a second copy (--no-cache-dir). Too little room fails
  # here, saying so, rather than in the middle of a download.
  local need_mb=9000 free_mb
  free_mb="$(df -Pm "$wheels" | awk 'NR == 2 { print $4 }')"
  if [[ -n "$free_mb" ]] && ((free_mb < need_mb)); then
    kvbm_err "only ${free_mb} MB free under $wheels; the wheels and the environment need about" \
      "${need_mb} MB (df -h $wheels); free some, or point KVBM_ENGINES_WHEELS elsewhere"
    return 1
  fi
  "${pip[@]}" download "${opts[@]}" --no-cache-dir -d "$wheels" -r "$1"
  "${pip[@]}" "${install[@]}"
}

if [[ "$want" == "$have" ]]; then
  kvbm_log "requirements unchanged (stamp $stamp): pip not run"
else
  start=$SECONDS
  rm -f "$stamp"
  if [[ "$latest" == 1 ]]; then
    # The pins, less vllm and sglang, which come at their newest versions instead.
    kvbm_log "installing the pins of $req with vllm==$latest_vllm sglang==$latest_sglang into $venv"
    latest_req="$venv/requirements-latest.txt"
    {
      grep -v -E '^(vllm|sglang)==' "$req"
      printf 'vllm==%s\nsglang==%s\n' "$latest_vllm" "$latest_sglang"
    } >"$latest_req"
    pip_install "$latest_req"
  else
    kvbm_log "installing $req into $venv"
    pip_install "$req"
  fi
  # Anything installed that the file does not name is left over from an older file: remove it,
  # so that the venv holds exactly the pins (pip, the venv's own, is kept; kvbm is reinstalled).
  leftover="$("$venv/bin/python" - "$req" <<'EOF'
import re, sys
from importlib import metadata
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pinned = {norm(l.split("==")[0]) for l in open(sys.argv[1])
          if "==" in l and not l.lstrip().startswith("#")}
keep = pinned | {"pip", "kvbm"}
print(" ".join(sorted({norm(d.metadata["Name"]) for d in metadata.distributions()} - keep)))
EOF
)"
  if [[ -n "$leftover" ]]; then
    kvbm_log "removing packages no longer pinned: $leftover"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip uninstall -y -q $leftover
  fi
  printf '%s\n' "$want" >"$stamp"
  kvbm_log "requirements installed in $((SECONDS - start)) s"
fi

# A CUDA-built torch must load on a machine without a GPU: it needs the CUDA libraries, not a
# device. When this fails, the message names the library the loader did not find.
torch_ok() {
  "$venv/bin/python" -c 'import torch; assert float(torch.ones(4).sum()) == 4.0' \
    2>"$venv/torch-import.log"
}
if ! torch_ok && ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13 '; then
  # No CUDA 13 toolkit on the loader's path: torch's own CUDA runtime wheels from PyPI.
  cuda_req="$KVBM_ROOT/tests/engines/requirements-cuda-runtime.txt"
  kvbm_log "no CUDA 13 toolkit found: installing torch's CUDA runtime wheels ($cuda_req)"
  "$venv/bin/python" -m pip install -q --no-compile --only-binary=:all: -r "$cuda_req" || true
fi
if ! torch_ok; then
  kvbm_err "import torch failed in $venv:"
  tail -n 5 "$venv/torch-import.log" >&2
  kvbm_err "torch $(
    "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null
  ) takes libcudart/libcublas/libcudnn/... from the system: is the CUDA 13 toolkit in" \
    "/usr/local/cuda and on the loader's path (ldconfig -p | grep libcublas.so.13)?"
  exit 1
fi

if [[ "${KVBM_ENGINES_SKIP_KVBM:-0}" == 1 ]]; then
  kvbm_log "KVBM_ENGINES_SKIP_KVBM=1: kvbm not installed"
elif [[ -n "$kvbm_want" && "$kvbm_want" == "$kvbm_have" ]] &&
  "$venv/bin/python" -c 'import kvbm' 2>/dev/null; then
  kvbm_log "kvbm sources unchanged (stamp $kvbm_stamp): not reinstalled"
else
  start=$SECONDS
  rm -f "$kvbm_stamp"
  cmake_args="${CMAKE_ARGS:-}"
  if command -v ccache >/dev/null 2>&1; then cmake_args+=" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; fi
  kvbm_log "installing kvbm into $venv (pip install --no-build-isolation ., -j$KVBM_JOBS)"
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$KVBM_JOBS" \
    "$venv/bin/python" -m pip install --no-deps --no-build-isolation -q "$KVBM_ROOT"
  [[ -n "$kvbm_want" ]] && printf '%s\n' "$kvbm_want" >"$kvbm_stamp"
  kvbm_log "kvbm installed in $((SECONDS - start)) s"
fi

"$venv/bin/python" - <<'EOF'
from importlib import metadata
names = ["torch", "vllm", "sglang", "transformers", "triton", "kvbm"]
found = []
for n in names:
    try:
        found.append(f"{n}=={metadata.version(n)}")
    except metadata.PackageNotFoundError:
        pass
print("[engines] " + " ".join(found))
EOF
if [[ "$latest" == 1 ]]; then
  # Report-only: which torch the newest engines ask for, against the one pinned.
  "$venv/bin/python" - <<'EOF'
import re
from importlib import metadata
torch = metadata.version("torch")
for eng in ("vllm", "sglang"):
    want = [r for r in metadata.requires(eng) or []
            if re.match(r"torch\s*[=<>!~]", r) and "extra" not in r]
    print(f"[engines] {eng} {metadata.version(eng)} declares {want or ['no torch pin']};"
          f" installed torch {torch}")
EOF
fi
du -sh "$venv" | sed 's/^/[engines] venv size: /'
