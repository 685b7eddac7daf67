#!/usr/bin/env bash
# The GPU half of the Python tests, in one call on a GPU machine (2 GPUs): builds libcommx with
# the CUDA backends and the commx._C extension against this machine's python3 with plain CMake (no
# pip, no network), then runs tests/python/test_cuda.py and the CUDA tests of test_torch.py (the
# "commx" process group and DeviceMesh/DTensor on CUDA tensors, the quick start and the FSDP2 loop
# against NCCL under torchrun), then the CPU Python suite on this machine's torch (GPU_PY_CPU=0
# skips it). Everything goes to $OUT/python_gpu.log (OUT default bench/results/<machine>_<date>); the summary
# is printed. Reuses build-gpu/ when scripts/gpu_ci.sh built it; else builds build-gpu-py/.
# Usage (on a machine with 2 GPUs): bash scripts/gpu_python.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)}
mkdir -p "$OUT"
LOG="$OUT/python_gpu.log"
: > "$LOG"
PY=${PYTHON:-python3}
PY=$(command -v "$PY")
JOBS=$(nproc)
say() { echo "$*" | tee -a "$LOG"; }

{
  date -u; nvidia-smi -L; "$PY" --version
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  "$PY" -c 'import pybind11; print("pybind11", pybind11.__version__)'
  "$PY" -c 'import pytest; print("pytest", pytest.__version__)'
  echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"
} >> "$LOG" 2>&1
INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ ! -f "$INC/Python.h" ]; then
  say "FAIL: no Python.h in $INC: the extension cannot be built for $PY"; exit 1
fi

# libcommx + the GPU plugins.
if [ -f build-gpu/CMakeCache.txt ]; then
  BUILD=${BUILD_DIR:-build-gpu}
else
  BUILD=${BUILD_DIR:-build-gpu-py}
fi
if [ -f "$BUILD/lib/libcommx.so" ] && [ ! -f "$BUILD/CMakeCache.txt" ]; then
  say "native build made elsewhere: $BUILD"  # bin/ and lib/ only: nothing to build
else
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
      -DCOMMX_BUILD_TESTS=OFF >> "$LOG" 2>&1 || { say "FAIL: cmake (native)"; tail -30 "$LOG"; exit 1; }
  fi
  ninja -C "$BUILD" -j"$JOBS" commx commx_backend_cuda commx_backend_nccl >> "$LOG" 2>&1 ||
    { say "FAIL: native build"; tail -40 "$LOG"; exit 1; }
fi
# The extension, in place (python/commx/_C*.so) over that build: what scripts/test_python.sh does.
cmake -G Ninja -S python -B build-py-gpu -DCMAKE_BUILD_TYPE=Release \
  -DCOMMX_NATIVE_BUILD_DIR="$(cd "$BUILD" && pwd)" -DCOMMX_PY_INPLACE=ON -DPython_EXECUTABLE="$PY" \
  -Dpybind11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')" >> "$LOG" 2>&1 &&
  ninja -C build-py-gpu -j"$JOBS" >> "$LOG" 2>&1 || { say "FAIL: extension build"; tail -40 "$LOG"; exit 1; }
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import commx, commx.torch; print('commx', commx.__file__, commx.registered_backends())" \
  >> "$LOG" 2>&1 || { say "FAIL: commx does not import"; tail -20 "$LOG"; exit 1; }
say "build ok ($BUILD, build-py-gpu)"

rc=0
[ "${GPU_PY_TESTS:-1}" = 1 ] || exit 0  # build only
# GPU tests: every binding on CUDA tensors (cuda and nccl backends), the process group, DeviceMesh,
# quick start and FSDP2-vs-NCCL under torchrun (-s: the losses and torchrun output are logged).
say "== GPU tests: test_cuda.py + test_torch.py -k cuda"
timeout "${GPU_PY_TIMEOUT:-480}" "$PY" -m pytest tests/python/test_cuda.py tests/python/test_cuda_graphs.py tests/python/test_torch.py \
  -k "${GPU_PY_K:-cuda}" -v -s -rA --durations=0 -p no:cacheprovider >> "$LOG" 2>&1 || rc=1
grep -E "^(tests/python/.*(PASSED|FAILED|SKIPPED|ERROR)|PASSED|FAILED|SKIPPED|ERROR) |fsdp2 (commx|nccl) losses|^=+ .* in [0-9.]+s" "$LOG" | tail -40
if [ "${GPU_PY_CPU:-1}" = 1 ]; then
  say "== CPU Python suite on this torch"
  timeout 400 "$PY" -m pytest tests/python -q -p no:cacheprovider -k "not cuda" >> "$LOG" 2>&1 || rc=1
  tail -3 "$LOG"
fi
say "gpu_python rc=$rc"
exit $rc
