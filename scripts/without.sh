#!/usr/bin/env bash
# Runs a command with a PATH on which the named programs are not found: a directory of links to
# every other program on PATH, in place of PATH. Shows what a stage does when an install step did
# not put a program there (docs/building.md, "CI fails instead of skipping").
#
#   bash scripts/without.sh redis-server -- env CI=true KVBM_STAGES=release bash scripts/test.sh
set -euo pipefail

hide=()
while (($#)) && [[ "$1" != -- ]]; do
  hide+=("$1")
  shift
done
if (($# < 2)); then
  echo "usage: $0 <program>... -- <command> [args...]" >&2
  exit 2
fi
shift
farm="$(mktemp -d "${TMPDIR:-/tmp}/kvbm-without.XXXXXX")"
trap 'rm -rf "$farm"' EXIT
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
  [[ -d "$dir" ]] || continue
  for f in "$dir"/*; do
    name="${f##*/}"
    [[ -x "$f" && ! -e "$farm/$name" ]] || continue
    [[ " ${hide[*]} " == *" $name "* ]] && continue
    ln -s "$f" "$farm/$name"
  done
done
echo "[without] PATH without: ${hide[*]}" >&2
PATH="$farm" "$@"
