#!/usr/bin/env bash
# Configures and builds commx into ${BUILD_DIR:-build} (Release with debug info, Ninja); only the
# ninja targets in $TARGETS when set (e.g. TARGETS="commx-bench commx-run").
# ccache (scripts/deps/core.apt) caches compiles across builds and worktrees when present.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
LAUNCHER=""
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  LAUNCHER="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
fi
cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} $LAUNCHER ${CMAKE_ARGS:-} >/dev/null
# shellcheck disable=SC2086
ninja -C "$BUILD_DIR" -j"${JOBS:-$(nproc)}" ${TARGETS:-}
