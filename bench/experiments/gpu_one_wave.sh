#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   bash bench/experiments/gpu_one_wave.sh MAIN_BUILD CANDIDATE_BUILD [BASE_BUILD]
# The two-shot all_reduce of one piece at 2-8 MiB on 4 ranks is 1.4-5.3% slower than the tree
# before the redesign (bench/results/h200x4_2026-11-27/1544_mid_sizes, 1603_mid_sizes_unroll: not
# the barrier's call check, the buffer layout or the reduce loop's unrolling). Its kernel is held
# to two blocks per SM (64 registers, spills), which 16 MiB at 4 ranks needs (one wave of 256
# blocks) but 2-8 MiB (32-128 blocks) does not. CANDIDATE_BUILD (branch midsizes) launches an
# instance without the cap when the grid fits the SMs at one block each. Builds made elsewhere for
# this CUDA (bin/ and lib/). Files in $OUT:
#   tests.log        on CANDIDATE: the all_reduce conformance suite on its cuda worlds (1-4 ranks)
#                    and cuda_backend_test
#   cand_<n>/        MAIN (base) against CANDIDATE (new): all_reduce bf16/f32, graph and eager,
#                    1-32 MiB, at n = every GPU (up to 4) and n = 2
#   base_<n>/        BASE against CANDIDATE, graph, 1-16 MiB, every GPU (with BASE_BUILD)
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
. bench/experiments/ab_lib.sh
USAGE="usage: gpu_one_wave.sh MAIN_BUILD CANDIDATE_BUILD [BASE_BUILD]"
ab_two_builds one_wave "${1:?$USAGE}" "${2:?$USAGE}"
OLD=""; [ -n "${3:-}" ] && OLD=$(cd "$3" && pwd)

ab_new_tests "conformance_all_reduce_test --gtest_filter=*/cuda_*" cuda_backend_test

SWEEP="--backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --min 1M --max 32M --factor 2 --reps 5"
ab_compare "$TOP/cand_$NG" --ranks "$NG" --modes graph,eager $SWEEP
[ "$NG" -gt 2 ] && ab_compare "$TOP/cand_2" --ranks 2 --modes graph,eager $SWEEP
if [ -n "$OLD" ]; then
  BASE=$OLD AB_BASE_BUILD=$OLD AB_BASE_BENCH=commx-gpu-bench ab_compare "$TOP/base_$NG" --ranks "$NG" \
    --modes graph --backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --min 1M --max 16M --factor 2 --reps 5
fi
exit $rc
