#!/usr/bin/env bash
# GPU tests of the cuda backend's hierarchical (multi-host) path, with forced hosts on one machine
# (tests/cuda/hier_test.cc; needs 2 GPUs and NCCL, else its tests skip). Builds cuda_hier_test in
# $BUILD_DIR (default build-gpu, the folder of scripts/gpu_ci.sh, whose cache it reuses) and runs
# it; the log goes to $OUT/gpu_hier.log (OUT default /tmp). Usage: bash scripts/gpu_hier.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
if [ -z "${COMMX_NCCL_LIBRARY:-}" ]; then
  d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [ -n "$d" ] && [ -f "$d/lib/libnccl.so.2" ]; then export COMMX_NCCL_LIBRARY="$d/lib/libnccl.so.2"; fi
fi
# GoogleTest from .gpudeps/ when the system has none (as scripts/gpu_ci.sh does).
PREFIX_PATH=""
if ! [ -f /usr/include/gtest/gtest.h ] && ls .gpudeps/*.deb >/dev/null 2>&1; then
  mkdir -p .gpudeps/root
  for f in .gpudeps/*.deb; do dpkg -x "$f" .gpudeps/root; done
  PREFIX_PATH="$PWD/.gpudeps/root/usr"
fi
cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > "$OUT/gpu_hier_build.log" 2>&1 &&
  ninja -C "$BUILD" -j"$(nproc)" commx_backend_cuda commx_backend_nccl cuda_hier_test \
    >> "$OUT/gpu_hier_build.log" 2>&1 || { tail -30 "$OUT/gpu_hier_build.log"; exit 1; }
timeout 500 "$BUILD/bin/cuda_hier_test" > "$OUT/gpu_hier.log" 2>&1
rc=$?
grep -E "^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/gpu_hier.log" | head -40
exit $rc
