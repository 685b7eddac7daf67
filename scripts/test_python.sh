#!/usr/bin/env bash
# Builds the Python extension in place (python/commx/_C*.so over build/lib/libcommx.so) and runs
# the pytest suite. Part of scripts/test.sh; fails if the extension does not import.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PY=${PYTHON:-python3}
cmake -G Ninja -S python -B build-py -DCOMMX_NATIVE_BUILD_DIR="$PWD/$BUILD_DIR" -DCOMMX_PY_INPLACE=ON \
  -Dpybind11_DIR="$($PY -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
ninja -C build-py -j"${JOBS:-$(nproc)}"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
$PY -c "import commx; print('commx python package:', commx.__file__)"
$PY -m pytest tests/python -q -p no:cacheprovider
