#!/usr/bin/env bash
# Packaging test: kvbm must be usable from another CMake project.
#
#   bash scripts/package_test.sh
#
# 1. Builds the library in the `release` preset tree (configuring it if needed) and installs it
#    with `cmake --install <tree> --prefix <tmp>/install`.
# 2. Moves the installed tree to <tmp>/relocated, so the package must be relocatable.
# 3. find_package: configures examples/consumer with CMAKE_PREFIX_PATH=<tmp>/relocated
#    (`find_package(kvbm 0.1 CONFIG REQUIRED)`, links kvbm::kvbm), builds and runs it.
# 4. add_subdirectory: configures examples/consumer with -DKVBM_CONSUMER_SOURCE_DIR=<repo>,
#    builds and runs it.
# Set KVBM_KEEP_TMP=1 to keep the temporary directory for inspection.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KVBM_LOG_TAG=package
cd "$KVBM_ROOT"

release_dir="$KVBM_BUILD_ROOT/release"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kvbm-package-test.XXXXXX")"
cleanup() {
  if [[ "${KVBM_KEEP_TMP:-0}" == 1 ]]; then
    kvbm_log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

if [[ ! -f "$release_dir/CMakeCache.txt" ]]; then
  kvbm_log "configuring the release preset in $release_dir"
  kvbm_configure_preset release
fi
kvbm_log "building kvbm in $release_dir"
kvbm_build_preset release --target kvbm

kvbm_log "installing to $tmp/install"
cmake --install "$release_dir" --prefix "$tmp/install" >"$tmp/install.log" || {
  cat "$tmp/install.log"
  exit 1
}
for f in include/kvbm/tier.h include/kvbm/error.h; do
  [[ -f "$tmp/install/$f" ]] || { kvbm_err "not installed: $f"; exit 1; }
done
config="$(find "$tmp/install" -path '*/cmake/kvbm/kvbmConfig.cmake' | head -n 1)"
[[ -n "$config" ]] || { kvbm_err "kvbmConfig.cmake was not installed"; exit 1; }
for f in kvbmConfigVersion.cmake kvbmTargets.cmake; do
  [[ -f "$(dirname "$config")/$f" ]] || { kvbm_err "not installed: $f"; exit 1; }
done
mv "$tmp/install" "$tmp/relocated"

build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$release_dir/CMakeCache.txt")"
build_type="${build_type:-Release}"

kvbm_log "find_package consumer (prefix $tmp/relocated)"
kvbm_cmake_configure "$tmp/find_package" -S "$KVBM_ROOT/examples/consumer" \
  -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_PREFIX_PATH="$tmp/relocated"
cmake --build "$tmp/find_package" --parallel "$KVBM_JOBS"
"$tmp/find_package/kvbm_consumer"

kvbm_log "add_subdirectory consumer (source $KVBM_ROOT)"
kvbm_cmake_configure "$tmp/add_subdirectory" -S "$KVBM_ROOT/examples/consumer" \
  -DCMAKE_BUILD_TYPE="$build_type" -DKVBM_CONSUMER_SOURCE_DIR="$KVBM_ROOT"
cmake --build "$tmp/add_subdirectory" --parallel "$KVBM_JOBS"
"$tmp/add_subdirectory/kvbm_consumer"

kvbm_log "PASS: the installed package and add_subdirectory() both work"
