#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   bash bench/experiments/gpu_buffer_parity.sh BASE_BUILD NEW_BUILD
# What the buffer default costs at PARITY_MIN - PARITY_MAX (32M - 64M): BASE_BUILD (the tree
# before the redesign, whose benchmark is commx-gpu-bench, with 256 MiB buffer halves) against
# NEW_BUILD, both run with COMMX_CUDA_BUFFER_BYTES=${PARITY_BUFFER:-256M}, so both hold the same
# layout and any change left is the code's. Builds made elsewhere for this CUDA (bin/ and lib/).
# Files in $OUT: machine.txt, parity_<n>/ (ab.md, ab.json, the runs): all_reduce bf16/f32 and
# all_gather, reduce_scatter, all_to_all bf16 (PARITY_OPS), graph-captured, cuda and nccl, at every
# GPU (up to 4). Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
. bench/experiments/ab_lib.sh
USAGE="usage: gpu_buffer_parity.sh BASE_BUILD NEW_BUILD"
export COMMX_CUDA_BUFFER_BYTES=${PARITY_BUFFER:-256M}
ab_two_builds buffer_parity "${1:?$USAGE}" "${2:?$USAGE}"
echo "both sides: COMMX_CUDA_BUFFER_BYTES=$COMMX_CUDA_BUFFER_BYTES" >> "$OUT/machine.txt"
AB_BASE_BENCH=commx-gpu-bench ab_compare "$TOP/parity_$NG" --ranks "$NG" --backend cuda,nccl \
  --dtypes bf16,f32 --ops "${PARITY_OPS:-all_reduce,all_gather,reduce_scatter,all_to_all}" --modes graph \
  --min "${PARITY_MIN:-32M}" --max "${PARITY_MAX:-64M}" --factor 2 --reps 5
exit $rc
