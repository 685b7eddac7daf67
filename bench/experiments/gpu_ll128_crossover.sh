#!/usr/bin/env bash
# Usage (GPU machine, after scripts/gpu_ci.sh built build-gpu/): bash bench/experiments/gpu_ll128_crossover.sh
# Where LL128 should take over from LL and hand over to flat (2 ranks, bf16, graph-captured
# all_reduce): each algorithm forced over its range, then the default choice beside NCCL.
B=build-gpu/bin/commx-bench
common="--ranks 2 --ops all_reduce --modes graph --dtypes bf16 --reps 7 --factor 2 --json /dev/null --md /dev/null"
for a in "ll 4K 256K" "ll128 4K 4M" "flat 256K 4M"; do
  set -- $a
  echo "== algo $1"
  timeout 60 $B $common --backend cuda --algo "$1" --min "$2" --max "$3" 2>&1 | grep all_reduce
done
echo "== default choice and nccl"
timeout 60 $B $common --backend cuda,nccl --min 4K --max 4M 2>&1 | grep all_reduce
