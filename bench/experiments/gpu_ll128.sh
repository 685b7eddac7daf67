#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_ll128.sh
# First GPU run of the opt-in LL128 all_reduce: builds build-gpu/, runs its tests (ipc and vmm peer
# memory, the GPU-side timeout) and the LL vs LL128 vs NCCL sweep; logs to $OUT (default
# bench/results/<machine>_<date>): ll128_tests.log, ll_sweep.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)}
mkdir -p "$OUT"
gpu_build build-gpu "$OUT/ll128_build.log" commx_backend_cuda commx_backend_nccl commx-bench \
  cuda_backend_test cuda_tuning_test || exit 1
T=build-gpu/bin/cuda_backend_test
F='CudaBackend.AllReduceLL128:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu'
{
  build-gpu/bin/cuda_tuning_test
  echo "=== ipc"; time timeout 240 $T --gtest_filter="$F"
  echo "=== vmm"; time COMMX_CUDA_PEER_MEM=vmm timeout 240 $T --gtest_filter=CudaBackend.AllReduceLL128
} > "$OUT/ll128_tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|^real|rank [0-9]:" "$OUT/ll128_tests.log" | head -40
bash bench/experiments/gpu_ll_sweep.sh 2>&1 | tee "$OUT/ll_sweep.log"
