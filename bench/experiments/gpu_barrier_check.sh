#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   bash bench/experiments/gpu_barrier_check.sh MAIN_BUILD CANDIDATE_BUILD [NOCALLWORD_BUILD]
# What the block barrier's call check costs at 256 KiB - 8 MiB on every native collective: MAIN_BUILD
# (a build whose barrier checks the call some way) against CANDIDATE_BUILD (another way) and,
# optionally, NOCALLWORD_BUILD (the barrier with no call check at all: the bound of what a check
# costs). Measured so: bench/results/h200x4_2026-11-27/1458_barrier_check (a call word written
# before the flag against a 16-byte flag and no check) and 1525_flag_check (the call word against
# the check in the flag's low bits, which landed). Builds made elsewhere for this CUDA (bin/ and
# lib/).
# Files in $OUT:
#   tests.log        on CANDIDATE: cuda_call_check_test (a peer with another call is named at a
#                    barrier of every native kernel), cuda_backend_test, the all_reduce conformance
#                    suite on its cuda worlds, lowp_cuda_test
#   candidate_<n>/, candidate_<n>_coll/  MAIN (base) against CANDIDATE (new): all_reduce bf16/f32; all_gather,
#                    reduce_scatter, all_to_all bf16, graph and eager, 256 KiB - 8 MiB, n = every
#                    GPU (up to 4), AB_ROUNDS (2) rounds: ab.md, ab.json
#   nocallword_<n>/, nocallword_<n>_coll/  MAIN against NOCALLWORD, the same sweeps (with NOCALLWORD_BUILD)
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
. bench/experiments/ab_lib.sh
USAGE="usage: gpu_barrier_check.sh MAIN_BUILD CANDIDATE_BUILD [NOCALLWORD_BUILD]"
ab_two_builds barrier_check "${1:?$USAGE}" "${2:?$USAGE}"
NCW=""; [ -n "${3:-}" ] && NCW=$(cd "$3" && pwd)

ab_new_tests cuda_call_check_test cuda_backend_test "conformance_all_reduce_test --gtest_filter=*/cuda_*" lowp_cuda_test

SWEEP="--backend cuda,nccl --modes graph,eager --min 256K --max 8M --factor 2 --reps 5"
ab_compare "$TOP/candidate_$NG" --ranks "$NG" --dtypes bf16,f32 --ops all_reduce $SWEEP
ab_compare "$TOP/candidate_${NG}_coll" --ranks "$NG" --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all $SWEEP
if [ -n "$NCW" ]; then
  AB_NEW_BUILD=$NCW ab_compare "$TOP/nocallword_$NG" --ranks "$NG" --dtypes bf16,f32 --ops all_reduce $SWEEP
  AB_NEW_BUILD=$NCW ab_compare "$TOP/nocallword_${NG}_coll" --ranks "$NG" --dtypes bf16 \
    --ops all_gather,reduce_scatter,all_to_all $SWEEP
fi
exit $rc
