#!/usr/bin/env bash
# Builds and runs kvbm-replay (tools/replay/): the README's demo.
#
#   bash scripts/demo.sh [arguments for kvbm-replay]
#
# With no arguments kvbm-replay replays the shipped Mooncake conversation trace
# (examples/data/conversation_trace.jsonl, 12,031 requests) through G1, G2 and G3 with bytes
# moved and verified, and prints hits, evictions and bytes per tier (docs/replay.md).
#
# Installs missing dependencies (scripts/deps.sh), builds the target kvbm-replay in the
# `release` preset tree (build/release), then runs it. Build output goes to
# build/release/demo-build.log and is shown only if the build fails.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=demo
cd "$KVBM_ROOT"

if [[ ! -f tools/replay/main.cpp ]]; then
  kvbm_err "tools/replay/main.cpp is missing"
  exit 1
fi

bash scripts/deps.sh
dir="$KVBM_BUILD_ROOT/release"
mkdir -p "$dir"
log="$dir/demo-build.log"
kvbm_log "building kvbm-replay in $dir (log: $log)"
if ! { kvbm_configure_preset release && kvbm_build_preset release --target kvbm-replay; } \
  >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  kvbm_err "build failed; full log: $log"
  exit 1
fi
kvbm_log "running $dir/tools/replay/kvbm-replay $*"
echo
exec "$dir/tools/replay/kvbm-replay" "$@"
