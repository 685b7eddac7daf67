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
. scripts/gpu_env.sh
gpu_build "$BUILD" "$OUT/gpu_hier_build.log" commx_backend_cuda commx_backend_nccl cuda_hier_test ||
  exit 1
timeout 500 "$BUILD/bin/cuda_hier_test" > "$OUT/gpu_hier.log" 2>&1
rc=$?
grep -E "^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/gpu_hier.log" | head -40
exit $rc
