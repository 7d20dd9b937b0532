#!/usr/bin/env bash
# Builds and runs the quickstart example (examples/quickstart.cpp): the README's demo.
#
#   bash scripts/demo.sh [arguments for kvbm_quickstart]
#
# Installs missing dependencies (scripts/deps.sh), builds the target kvbm_quickstart in the
# `release` preset tree (build/release), then runs it. Build output goes to
# build/release/demo-build.log and is shown only if the build fails.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=demo
cd "$KVBM_ROOT"

if [[ ! -f examples/quickstart.cpp ]]; then
  kvbm_err "examples/quickstart.cpp is missing"
  exit 1
fi

bash scripts/deps.sh
dir="$KVBM_BUILD_ROOT/release"
mkdir -p "$dir"
log="$dir/demo-build.log"
kvbm_log "building kvbm_quickstart in $dir (log: $log)"
if ! { kvbm_configure_preset release && kvbm_build_preset release --target kvbm_quickstart; } >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  kvbm_err "build failed; full log: $log"
  exit 1
fi
kvbm_log "running $dir/examples/kvbm_quickstart $*"
echo
exec "$dir/examples/kvbm_quickstart" "$@"
