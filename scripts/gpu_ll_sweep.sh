#!/usr/bin/env bash
# Usage (device tool, after scripts/gpu_ci.sh built build-gpu/): bash scripts/gpu_ll_sweep.sh
# LL block-size sweep (cuda, bf16, graph) with nccl for reference.
B=build-gpu/bin/commx-gpu-bench
timeout 60 $B --ranks 2 --backend nccl,cuda --dtypes bf16 --ops all_reduce --modes graph --min 64K --max 512K --factor 2 --reps 7 --json /dev/null --md /dev/null 2>&1 | grep all_reduce
for t in 128 256 512; do
  echo "== LL threads $t"
  COMMX_CUDA_LL_THREADS=$t timeout 60 $B --ranks 2 --backend cuda --dtypes bf16,f32 --ops all_reduce --modes graph --min 64K --max 512K --factor 2 --reps 7 --algo ll --json /dev/null --md /dev/null 2>&1 | grep all_reduce
done
