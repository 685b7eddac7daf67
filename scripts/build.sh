#!/usr/bin/env bash
# Configures and builds commx into ${BUILD_DIR:-build} (Release with debug info, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} >/dev/null
ninja -C "$BUILD_DIR" -j"${JOBS:-$(nproc)}"
