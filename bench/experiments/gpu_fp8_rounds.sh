#!/usr/bin/env bash
# Usage (GPU machine with 2-4 GPUs, repository root):
#   [BASE_BUILD=DIR] bash bench/experiments/gpu_fp8_rounds.sh [NEW_BUILD]
# The FP8 kernels with one receive slot per peer (larger rounds) and their pairs of codec blocks
# in coalesced groups, and the two-shot all_reduce's kernel of one piece, checked and measured in
# one run. NEW_BUILD (and BASE_BUILD, the "before" to compare with) are build folders made
# elsewhere for this CUDA (bin/: commx-bench, lowp_cuda_test, conformance_all_reduce_test; lib/:
# libcommx and the cuda and nccl plugins); without NEW_BUILD this tree is built in build-gpu.
#   tests.log   lowp_cuda_test of each build (every FP8 collective bit for bit against the host
#               codec, rounds through a 1 MiB buffer, 3-4 ranks) and the new build's all_reduce
#               conformance suite on the cuda worlds (1-4 ranks: the two-shot of one piece and of
#               several)
#   ab.md/.json each benchmark run on both builds in turn (base, then new), compared by
#               latency_ab.py (the NCCL rows are the same library on both sides: their change is
#               the noise): all_reduce 16-256 MiB at 2 ranks (NCCL, commx, commx FP8 one- and
#               two-term; bf16 and f32; eager), FP8 reduce_scatter and all_gather at 2 ranks, and
#               all_reduce 512 KiB - 32 MiB at every GPU (up to 4) graph-captured
#   buf256M.*   the new build with 256 MiB buffer halves (one round): the reference
#   runs.tar.gz every run's JSON and log
# FP8_STEPS picks the benchmark steps (default "fp8 phases ar reference"; fp8 is the all_reduce
# rows, phases reduce_scatter and all_gather, ar the all_reduce at every GPU, reference buf256M).
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_fp8_rounds}
mkdir -p "$OUT"
WORK=$(mktemp -d)
rc=0
TESTS="lowp_cuda_test conformance_all_reduce_test"
if [ -n "${1:-}" ]; then
  AB_NEW_BUILD=$(cd "$1" && pwd)
else
  AB_NEW_BUILD=$PWD/build-gpu
  gpu_build "$AB_NEW_BUILD" "$WORK/build.log" commx_backend_cuda commx_backend_nccl commx-bench $TESTS || exit 1
fi
AB_BASE_BUILD=""; [ -n "${BASE_BUILD:-}" ] && AB_BASE_BUILD=$(cd "$BASE_BUILD" && pwd)
BASE=$AB_BASE_BUILD  # ab_bench runs a base side when set
. bench/experiments/ab_lib.sh
ab_machine
echo "binaries ready $(date -u +%T)"

: > "$OUT/tests.log"
for side in ${BASE:+base} new; do
  for t in $TESTS; do
    [ $side = base ] && [ $t != lowp_cuda_test ] && continue
    f=""; [ $t = conformance_all_reduce_test ] && f="--gtest_filter=*/cuda_*"
    echo "=== $side $t" >> "$OUT/tests.log"
    ab_on $side timeout 150 "$(ab_side_build $side)/bin/$t" $f >> "$OUT/tests.log" 2>&1 ||
      { rc=1; echo "=== $side $t FAILED" >> "$OUT/tests.log"; }
  done
done
grep -E "^=== |^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" "$OUT/tests.log"

# bench TAG LIMIT ARGS...: ab_bench (base, then new; the comparison so far into $OUT), logged.
STEPS=" ${FP8_STEPS:-fp8 phases ar reference} "
step() { [[ $STEPS == *" $1 "* ]]; }
bench() { step "$1" || return 0; echo "$1: commx-bench ${*:3}" >> "$OUT/machine.txt"; ab_bench "$@"; }
bench fp8 120 --ranks 2 --backend nccl,cuda,cuda+fp8,cuda+fp8x2 --dtypes bf16,f32 --ops all_reduce \
  --modes eager --min 16M --max 256M --factor 4 --reps 3 --error 16M
bench phases 90 --ranks 2 --backend nccl,cuda+fp8 --dtypes bf16,f32 --ops reduce_scatter,all_gather \
  --modes eager --min 16M --max 256M --factor 4 --reps 3
NG=$(nvidia-smi -L | wc -l); [ "$NG" -gt 4 ] && NG=4
bench ar 90 --ranks "$NG" --backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --modes graph \
  --min 512K --max 32M --factor 4 --reps 5
[ -n "$BASE" ] && ab_report > /dev/null
step reference && ab_reference 60 --ranks 2 --backend cuda+fp8 --dtypes bf16,f32 --ops all_reduce --modes eager \
  --min 16M --max 256M --factor 4 --reps 3 > /dev/null
grep -E "mean change" "$OUT/ab.md" 2>/dev/null
exit $rc
