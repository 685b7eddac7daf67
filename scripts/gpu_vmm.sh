#!/usr/bin/env bash
# GPU tests of the cuda backend's VMM peer memory (peer_mem=vmm, docs/cuda.md): builds in
# $BUILD_DIR (default build-gpu, the folder of scripts/gpu_ci.sh) and runs, each step under its own
# timeout: cuda_vmm_test (PeerMemory over VMM and the backend with the peer_mem hint), then the
# whole cuda_backend_test and cuda_hier_test (and, as step lowp, lowp_cuda_test) with
# COMMX_CUDA_PEER_MEM=vmm. Logs go to $OUT/gpu_vmm_*.log (OUT default /tmp). VMM_STEPS picks the
# steps (default "fd vmm backend hier"; a device-tool call has 10 minutes: run VMM_STEPS="fd vmm",
# then "backend", then "hier lowp").
# Usage: bash scripts/gpu_vmm.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
. scripts/gpu_env.sh
gpu_build "$BUILD" "$OUT/gpu_vmm_build.log" commx_backend_cuda commx_backend_nccl cuda_vmm_test \
  cuda_fd_passing_test cuda_backend_test cuda_hier_test lowp_cuda_test || exit 1
rc=0
step() {  # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" > "$OUT/gpu_vmm_$name.log" 2>&1
  local r=$?
  [ $r -ne 0 ] && { rc=1; echo "=== $name FAILED (rc $r)"; }
  grep -E "^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/gpu_vmm_$name.log" | head -40
}
for s in ${VMM_STEPS:-fd vmm backend hier}; do
  case $s in
    fd) step fd 60 "$BUILD/bin/cuda_fd_passing_test" ;;
    vmm) step vmm 500 "$BUILD/bin/cuda_vmm_test" ;;
    backend) step backend 500 env COMMX_CUDA_PEER_MEM=vmm "$BUILD/bin/cuda_backend_test" ;;
    hier) step hier 500 env COMMX_CUDA_PEER_MEM=vmm "$BUILD/bin/cuda_hier_test" ;;
    lowp) step lowp 500 env COMMX_CUDA_PEER_MEM=vmm "$BUILD/bin/lowp_cuda_test" ;;
  esac
done
exit $rc
