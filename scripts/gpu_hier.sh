#!/usr/bin/env bash
# GPU tests of the cuda backend's hierarchical (multi-host) path only, with forced hosts on one
# machine (needs 2 GPUs and NCCL). Assumes scripts/gpu_ci.sh (or the same cmake line) already
# built $BUILD_DIR (default build-gpu); builds cuda_backend_test if missing. Writes
# $OUT/gpu_hier.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
export NCCL_NVLS_ENABLE=0
if [ -z "${COMMX_NCCL_LIBRARY:-}" ]; then
  d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [ -n "$d" ] && [ -f "$d/lib/libnccl.so.2" ]; then export COMMX_NCCL_LIBRARY="$d/lib/libnccl.so.2"; fi
fi
if ! [ -x "$BUILD/bin/cuda_backend_test" ]; then
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON >/dev/null &&
    ninja -C "$BUILD" -j"$(nproc)" commx_backend_cuda commx_backend_nccl cuda_backend_test >/dev/null ||
    { echo "build failed"; exit 1; }
fi
LOG=${OUT:+$OUT/gpu_hier.log}
LOG=${LOG:-/tmp/gpu_hier.log}
timeout 400 "$BUILD/bin/cuda_backend_test" --gtest_filter='CudaHier*' > "$LOG" 2>&1
rc=$?
grep -E "^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$LOG" | head -40
exit $rc
