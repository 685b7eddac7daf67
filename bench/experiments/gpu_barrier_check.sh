#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   bash bench/experiments/gpu_barrier_check.sh MAIN_BUILD CANDIDATE_BUILD [NOCALLWORD_BUILD]
# What the block barrier's call check costs at 1-8 MiB, where every native collective is 2-6%
# slower at 4 ranks than the tree before the call checks (bench/results/h200x4_2026-11-27/
# 1244_two_shot_slots): main writes its call hash into the peer's pad right before the flag's
# release fence (which then waits for that NVLink write) and reads the peer's after the wait.
# Builds made elsewhere for this CUDA (bin/ and lib/): MAIN_BUILD; CANDIDATE_BUILD, whose flags
# carry the call check in the same 16-byte store (branch flaghash); NOCALLWORD_BUILD (optional),
# the barrier with no call check at all (branch nocallword: the bound of what the check costs).
# Files in $OUT:
#   tests.log        on CANDIDATE: cuda_call_check_test (a peer with another call is named at a
#                    barrier of every native kernel), cuda_backend_test, the all_reduce conformance
#                    suite on its cuda worlds, lowp_cuda_test
#   flaghash_<n>/, flaghash_<n>_coll/  MAIN (base) against CANDIDATE (new): all_reduce bf16/f32; all_gather,
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
CAND=$AB_NEW_BUILD
NCW=""; [ -n "${3:-}" ] && NCW=$(cd "$3" && pwd)

: > "$TOP/tests.log"
for t in cuda_call_check_test cuda_backend_test "conformance_all_reduce_test --gtest_filter=*/cuda_*" lowp_cuda_test; do
  set -- $t
  echo "=== candidate $*" >> "$TOP/tests.log"
  ab_on new timeout 300 "$CAND/bin/$1" "${@:2}" >> "$TOP/tests.log" 2>&1 ||
    { rc=1; echo "=== candidate $1 FAILED" >> "$TOP/tests.log"; }
done
grep -E "^=== |^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" "$TOP/tests.log"

SWEEP="--backend cuda,nccl --modes graph,eager --min 256K --max 8M --factor 2 --reps 5"
ab_compare "$TOP/flaghash_$NG" --ranks "$NG" --dtypes bf16,f32 --ops all_reduce $SWEEP
ab_compare "$TOP/flaghash_${NG}_coll" --ranks "$NG" --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all $SWEEP
if [ -n "$NCW" ]; then
  AB_NEW_BUILD=$NCW ab_compare "$TOP/nocallword_$NG" --ranks "$NG" --dtypes bf16,f32 --ops all_reduce $SWEEP
  AB_NEW_BUILD=$NCW ab_compare "$TOP/nocallword_${NG}_coll" --ranks "$NG" --dtypes bf16 \
    --ops all_gather,reduce_scatter,all_to_all $SWEEP
fi
exit $rc
