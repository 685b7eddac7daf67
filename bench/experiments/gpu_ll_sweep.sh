#!/usr/bin/env bash
# Usage (GPU machine, after scripts/gpu_ci.sh built build-gpu/): bash bench/experiments/gpu_ll_sweep.sh
# LL vs LL128 one-shot all_reduce (cuda, bf16/f32, graph, 64 KiB..1 MiB) with nccl for reference;
# LL128 also at 128/256/512 threads per block (COMMX_CUDA_LL_THREADS).
B=build-gpu/bin/commx-bench
common="--ranks 2 --ops all_reduce --modes graph --min 64K --max 1M --factor 2 --reps 7 --json /dev/null --md /dev/null"
timeout 60 $B $common --backend nccl,cuda --dtypes bf16 2>&1 | grep all_reduce
echo "== LL (512 threads)"
timeout 60 $B $common --backend cuda --dtypes bf16,f32 --algo ll 2>&1 | grep all_reduce
for t in 128 256 512; do
  echo "== LL128 threads $t"
  COMMX_CUDA_LL_THREADS=$t timeout 60 $B $common --backend cuda --dtypes bf16,f32 --algo ll128 2>&1 | grep all_reduce
done
