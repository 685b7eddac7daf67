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
#   runs.tar.gz every run's JSON and log, and the new build with 256 MiB buffer halves (one round)
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_fp8_rounds}
mkdir -p "$OUT"
WORK=$(mktemp -d)
rc=0
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; nvidia-smi topo -m; uname -r
  echo "new: ${1:-build-gpu (built here)}  base: ${BASE_BUILD:-none}"; } > "$OUT/machine.txt" 2>&1
TESTS="lowp_cuda_test conformance_all_reduce_test"
if [ -n "${1:-}" ]; then
  NEW=$(cd "$1" && pwd)
else
  NEW=$PWD/build-gpu
  gpu_build "$NEW" "$WORK/build.log" commx_backend_cuda commx_backend_nccl commx-bench $TESTS || exit 1
fi
BASE=""; [ -n "${BASE_BUILD:-}" ] && BASE=$(cd "$BASE_BUILD" && pwd)
echo "binaries ready $(date -u +%T)"

# on BUILD CMD...: CMD with BUILD's libraries (a build made elsewhere keeps its own RPATH).
on() { local b=$1; shift; LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

: > "$OUT/tests.log"
for side in ${BASE:+base} new; do
  b=$NEW; [ $side = base ] && b=$BASE
  for t in $TESTS; do
    [ $side = base ] && [ $t != lowp_cuda_test ] && continue
    f=""; [ $t = conformance_all_reduce_test ] && f="--gtest_filter=*/cuda_*"
    echo "=== $side $t" >> "$OUT/tests.log"
    on "$b" timeout 150 "$b/bin/$t" $f >> "$OUT/tests.log" 2>&1 ||
      { rc=1; echo "=== $side $t FAILED" >> "$OUT/tests.log"; }
  done
done
grep -E "^=== |^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" "$OUT/tests.log"

runs=()
# bench TAG RANKS LIMIT ARGS...: commx-bench on base, then new; the comparison so far into $OUT.
bench() {
  local tag=$1 ranks=$2 limit=$3 side b; shift 3
  echo "$tag: commx-bench --ranks $ranks $*" >> "$OUT/machine.txt"
  for side in ${BASE:+base} new; do
    b=$NEW; [ $side = base ] && b=$BASE
    on "$b" timeout "$limit" "$b/bin/commx-bench" --ranks "$ranks" "$@" --json "$WORK/${side}_$tag.json" \
      --md /dev/null > "$WORK/${side}_$tag.log" 2>&1 || { rc=1; echo "$side $tag failed"; tail -3 "$WORK/${side}_$tag.log"; }
    runs+=("$side=$WORK/${side}_$tag.json")
  done
  [ -n "$BASE" ] && python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" > /dev/null 2>&1
  (cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
}
bench fp8 2 120 --backend nccl,cuda,cuda+fp8,cuda+fp8x2 --dtypes bf16,f32 --ops all_reduce --modes eager \
  --min 16M --max 256M --factor 4 --reps 3 --error 16M
bench phases 2 90 --backend nccl,cuda+fp8 --dtypes bf16,f32 --ops reduce_scatter,all_gather --modes eager \
  --min 16M --max 256M --factor 4 --reps 3
NG=$(nvidia-smi -L | wc -l); [ "$NG" -gt 4 ] && NG=4
bench ar "$NG" 90 --backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --modes graph --min 512K --max 32M \
  --factor 4 --reps 5
[ -n "$BASE" ] && { python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" || rc=1; }
echo "buf256M: COMMX_CUDA_BUFFER_BYTES=256M commx-bench --ranks 2 (new) --backend cuda+fp8 ..." >> "$OUT/machine.txt"
on "$NEW" env COMMX_CUDA_BUFFER_BYTES=256M timeout 60 "$NEW/bin/commx-bench" --ranks 2 --backend cuda+fp8 \
  --dtypes bf16,f32 --ops all_reduce --modes eager --min 16M --max 256M --factor 4 --reps 3 \
  --json "$WORK/new_buf256M.json" --md /dev/null > "$WORK/new_buf256M.log" 2>&1 || rc=1
(cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
grep -E "mean change" "$OUT/ab.md" 2>/dev/null
exit $rc
