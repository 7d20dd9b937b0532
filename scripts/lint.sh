#!/usr/bin/env bash
# Style and static checks; scripts/test.sh runs them as its stage `lint`.
#
#   bash scripts/lint.sh           clang-format check + clang-tidy; non-zero on findings
#   bash scripts/lint.sh --fix     reformat the changed lines in place, then clang-tidy
#   bash scripts/lint.sh --format  clang-format check only
#   bash scripts/lint.sh --tidy    clang-tidy only
#
# clang-format (.clang-format) checks the C++ lines changed since the merge base with
# $KVBM_LINT_BASE (default: main, else origin/main), committed or not: the tree predates the
# check and is not reformatted wholesale; what is touched is held to it (git clang-format).
# Without a base it checks only uncommitted changes.
#
# clang-tidy (.clang-tidy) runs on every library source, src/**/*.cpp, in parallel
# ($KVBM_JOBS); the public headers are checked through them (HeaderFilterRegex). It reads
# compile_commands.json from the clang tree of the preset `threadsafety` (configured here if
# needed, not built). Exit: 0 clean, 1 findings, 77 a tool is missing (the stage reports SKIP).
set -uo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=lint
cd "$KVBM_ROOT" || exit 1

mode="${1:-check}"
case "$mode" in check | --fix | --format | --tidy) ;; *) echo "usage: $0 [--fix|--format|--tidy]" >&2; exit 2 ;; esac

find_tool() {  # prefer the unversioned name, then the newest versioned one
  local name="$1" v
  command -v "$name" >/dev/null 2>&1 && { echo "$name"; return 0; }
  for v in 19 18 17 16 15 14; do
    command -v "$name-$v" >/dev/null 2>&1 && { echo "$name-$v"; return 0; }
  done
  return 1
}

status=0

if [[ "$mode" != --tidy ]]; then
  clang_format="$(find_tool clang-format)" && git_clang_format="$(find_tool git-clang-format)" || {
    kvbm_err "clang-format or git-clang-format not found (apt-get install clang-format)"
    exit 77
  }
  base_ref="${KVBM_LINT_BASE:-}"
  if [[ -z "$base_ref" ]]; then
    for ref in main origin/main; do
      git rev-parse -q --verify "$ref^{commit}" >/dev/null && { base_ref="$ref"; break; }
    done
  fi
  base="$(git merge-base HEAD "${base_ref:-HEAD}" 2>/dev/null || git rev-parse HEAD)"
  exts=h,hpp,cpp,cc,cu,cuh
  # git clang-format reads the index: look at a temporary one holding the working tree.
  index="$(mktemp)"
  trap 'rm -f "$index"' EXIT
  cp "$(git rev-parse --git-path index)" "$index"
  GIT_INDEX_FILE="$index" git add -A -- . ':!build' 2>/dev/null
  if [[ "$mode" == --fix ]]; then
    kvbm_log "clang-format the lines changed since ${base:0:12} (${base_ref:-HEAD})"
    GIT_INDEX_FILE="$index" "$git_clang_format" --binary "$clang_format" --extensions "$exts" \
      --force "$base" -- ':!tests/compile_fail' >/dev/null
  else
    kvbm_log "clang-format check of the lines changed since ${base:0:12} (${base_ref:-HEAD})"
    out="$(GIT_INDEX_FILE="$index" "$git_clang_format" --binary "$clang_format" \
      --extensions "$exts" --diff "$base" -- ':!tests/compile_fail' 2>&1)"
    if grep -q '^diff ' <<<"$out"; then
      printf '%s\n' "$out"
      kvbm_err "clang-format: the lines above are not formatted (bash scripts/lint.sh --fix)"
      status=1
    fi
  fi
  [[ "$mode" == --format ]] && exit "$status"
fi

clang_tidy="$(find_tool clang-tidy)" || { kvbm_err "clang-tidy not found (apt-get install clang-tidy)"; exit 77; }
command -v clang++ >/dev/null 2>&1 || { kvbm_err "clang++ not found"; exit 77; }
dir="$KVBM_BUILD_ROOT/threadsafety"
if [[ ! -f "$dir/compile_commands.json" ]]; then
  kvbm_log "configure preset threadsafety for compile_commands.json"
  kvbm_configure_preset threadsafety >/dev/null || { kvbm_err "configure failed"; exit 1; }
fi
# Generated headers (kvbm/config.h) come with the configure step; nothing needs building.
# src/python/ (the extension) is left out: its compile commands are scikit-build-core's, not the preset's.
mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- 'src/*.cpp' ':!src/python/*')
kvbm_log "$clang_tidy on ${#sources[@]} library sources (-j$KVBM_JOBS)"
log="$dir/clang-tidy.log"
printf '%s\0' "${sources[@]}" |
  xargs -0 -r -n 1 -P "$KVBM_JOBS" "$clang_tidy" -p "$dir" --quiet >"$log" 2>&1
tidy_rc=$?
if ((tidy_rc != 0)) || grep -qE '(warning|error): ' "$log"; then
  grep -vE '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Use -system-headers' "$log"
  kvbm_err "clang-tidy: findings above"
  status=1
fi
if ((status == 0)); then kvbm_log "clean"; fi
exit "$status"
