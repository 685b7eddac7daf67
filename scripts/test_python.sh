#!/usr/bin/env bash
# Python tests (called by scripts/test.sh): builds the commx extension in place
# (python/commx/_C*.so) against the root build in $BUILD_DIR, then runs pytest on tests/python.
# Tests that need torch skip themselves where it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
py=${PYTHON:-python3}
pybind11_dir=$($py -c "import pybind11; print(pybind11.get_cmake_dir())")
cmake -G Ninja -S python -B "$BUILD_DIR/python" -DCMAKE_BUILD_TYPE=Release \
  -DCOMMX_NATIVE_BUILD_DIR="$PWD/$BUILD_DIR" -DCOMMX_PY_INPLACE=ON \
  -Dpybind11_DIR="$pybind11_dir" -DPython_EXECUTABLE="$(command -v "$py")" > /dev/null
ninja -C "$BUILD_DIR/python" -j"${JOBS:-2}"
$py -m pytest tests/python -q
