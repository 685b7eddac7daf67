#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   bash bench/experiments/gpu_two_shot_waves.sh MAIN_BUILD OCC2_BUILD [BASE_BUILD]
# Why the two-shot all_reduce is 10-12% slower at 16 MiB on 4 ranks than the tree before the
# redesign (bench/results/h200x4_2026-11-27/1244_two_shot_slots): its kernel of one piece takes 84
# registers, so one block of 512 threads fits an SM and the 256 blocks of a 16 MiB op run in two
# waves (the tree before held 64 registers, two blocks per SM). Builds made elsewhere for this CUDA
# (bin/ and lib/): MAIN_BUILD, OCC2_BUILD (the same with the kernel of one piece held to two blocks
# per SM: 64 registers, bf16 spills 12 / 20 bytes) and, optionally, BASE_BUILD (the tree before the
# redesign, whose benchmark is commx-gpu-bench). Files in $OUT:
#   tests.log     on MAIN: cuda_backend_test's two-shot over 2-17 pieces and the large exchange
#                 in rounds (the two-shot's slot per peer, 2 and 3 ranks); on OCC2: the
#                 all_reduce conformance suite on its cuda worlds (1-4 ranks)
#   occ_<n>/      MAIN (base) against OCC2 (new): all_reduce bf16/f32, graph and eager, 1-32 MiB,
#                 at n = every GPU (up to 4) and n = 2 ranks, AB_ROUNDS (2) rounds: ab.md, ab.json
#   cap_<n>/      MAIN with COMMX_CUDA_MAX_BLOCKS_LARGE=132 (one wave, twice the work per block)
#                 against OCC2, every GPU
#   base_<n>/     BASE against OCC2, every GPU (with BASE_BUILD)
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
. bench/experiments/ab_lib.sh
USAGE="usage: gpu_two_shot_waves.sh MAIN_BUILD OCC2_BUILD [BASE_BUILD]"
ab_two_builds two_shot_waves "${1:?$USAGE}" "${2:?$USAGE}"
MAIN=$AB_BASE_BUILD OCC2=$AB_NEW_BUILD
OLD=""; [ -n "${3:-}" ] && OLD=$(cd "$3" && pwd)

echo "=== main cuda_backend_test" > "$TOP/tests.log"
ab_on base timeout 240 "$MAIN/bin/cuda_backend_test" \
  --gtest_filter='*TwoShotPiecesInOneLaunch*:*LargeExchangeAndReduceScatterInRounds*' >> "$TOP/tests.log" 2>&1 ||
  { rc=1; echo "=== main cuda_backend_test FAILED" >> "$TOP/tests.log"; }
echo "=== occ2 conformance_all_reduce_test" >> "$TOP/tests.log"
ab_on new timeout 150 "$OCC2/bin/conformance_all_reduce_test" --gtest_filter='*/cuda_*' >> "$TOP/tests.log" 2>&1 ||
  { rc=1; echo "=== occ2 conformance_all_reduce_test FAILED" >> "$TOP/tests.log"; }
grep -E "^=== |^\[  (PASSED|FAILED) " "$TOP/tests.log"

SWEEP="--backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --modes graph,eager --min 1M --max 32M --factor 2 --reps 5"
ab_compare "$TOP/occ_$NG" --ranks "$NG" $SWEEP
[ "$NG" -gt 2 ] && ab_compare "$TOP/occ_2" --ranks 2 $SWEEP
AB_BASE_ENV="COMMX_CUDA_MAX_BLOCKS_LARGE=132" ab_compare "$TOP/cap_$NG" --ranks "$NG" $SWEEP
if [ -n "$OLD" ]; then
  BASE=$OLD AB_BASE_BUILD=$OLD AB_BASE_BENCH=commx-gpu-bench ab_compare "$TOP/base_$NG" --ranks "$NG" $SWEEP
fi
exit $rc
