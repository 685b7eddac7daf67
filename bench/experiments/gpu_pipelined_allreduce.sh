#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_pipelined_allreduce.sh BASE_DIR
# The cuda backend's two-shot all_reduce and FP8 collectives with all their buffer-half pieces
# (rounds) in one launch, against BASE_DIR (the "before": a commx tree that launches one kernel per
# piece, e.g. a checkout of main). Builds both trees at once, runs the GPU tests over the changed
# paths (the two-shot in pieces, the backend's chunking, graphs and timeouts, the all_reduce
# conformance suite on the cuda backend, the call checks, the FP8 kernels against the host codec),
# then commx-bench's large all_reduce sweep (1 MiB - 256 MiB, bf16 and f32, eager and graph, cuda,
# cuda+fp8 and nccl; AB_FP8=0 leaves FP8 out) on each tree in turn, AB_ROUNDS times (base, new,
# base, new, ...: drift of the machine hits both alike), compares the per-round medians
# (latency_ab.py; the nccl rows are the same library on both sides, so their change is the noise),
# and runs the new tree once more with 2 x 256 MiB halves (COMMX_CUDA_BUFFER_BYTES=256M), the
# one-piece reference the pipelined kernels should approach. Every step is bounded (AB_*_S
# seconds). AB_EXTRA_TESTS names more test binaries to build and run. AB_TESTS=0 skips the tests, AB_BENCH=0 the benchmark: on a warm machine a second call
# finds both builds done, so the two halves can run as two calls of under 10 minutes each.
# Files in $OUT: machine.txt, tests.log, ab.md, ab.json, buf256M.md/.json, bench logs and the JSON
# of every run in runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BASE=$(cd "${1:?usage: gpu_pipelined_allreduce.sh BASE_DIR}" && pwd)
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_pipelined_allreduce}
mkdir -p "$OUT"
WORK=$(mktemp -d)
{
  date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
  nvidia-smi topo -m; nvcc --version | tail -1; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"
  echo "new: $(git rev-parse --short HEAD 2>/dev/null)  base: $(git -C "$BASE" rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/machine.txt" 2>&1
FP8=${AB_FP8:-1}
TESTS="cuda_backend_test conformance_all_reduce_test cuda_call_check_test"
[ "$FP8" != 0 ] && TESTS="$TESTS lowp_cuda_test"
# AB_EXTRA_TESTS: more GPU test binaries of the new tree, built and run whole after the others.
EXTRA=${AB_EXTRA_TESTS:-}
TESTS="$TESTS $EXTRA"
(cd "$BASE" && timeout "${AB_BUILD_S:-300}" bash -c ". '$PWD/scripts/gpu_env.sh' 2>/dev/null;
  cmake -G Ninja -S . -B build-ab -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > '$WORK/base_build.log' 2>&1 &&
  ninja -C build-ab -j$(nproc) commx_backend_cuda commx_backend_nccl commx-bench \
  >> '$WORK/base_build.log' 2>&1") &
base_pid=$!
timeout "${AB_BUILD_S:-300}" bash -c ". scripts/gpu_env.sh; gpu_build build-ab '$WORK/build.log' \
  commx_backend_cuda commx_backend_nccl commx-bench $TESTS" || {
  tail -30 "$WORK/build.log" > "$OUT/build_failed.log"; wait $base_pid; exit 1; }
wait $base_pid || { tail -30 "$WORK/base_build.log" > "$OUT/base_build_failed.log"; BASE=""; }
echo "build ok${BASE:+ (and $BASE)}: $(date -u +%T)"

rc=0
T=build-ab/bin
# test_step NAME LIMIT BINARY ARGS...: one GPU test binary, its output appended to tests.log.
test_step() {
  local name=$1 limit=$2; shift 2
  echo "=== $name" >> "$OUT/tests.log"
  timeout "$limit" "$@" >> "$OUT/tests.log" 2>&1 || { rc=1; echo "=== $name FAILED" >> "$OUT/tests.log"; }
}
summary() { grep -E "^=== |^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|rank [0-9]+ failed" "$OUT/tests.log" | tail -60; }
# The changed path first: pieces in one launch, the chunking, graphs, a peer that never arrives.
if [ "${AB_TESTS:-1}" != 0 ]; then
test_step cuda_backend_test "${AB_BACKEND_S:-150}" $T/cuda_backend_test \
  --gtest_filter='CudaBackend.TwoShotPiecesInOneLaunch:CudaBackend.ChunkingThroughASmallBuffer:CudaBackend.AllReduceEveryDtypeOpAndSize:CudaBackend.GraphCaptureAndReplay:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu:CudaBackend.AsyncOpsAndStreams:CudaBackend.ThreeAndFourRanksShareGpus:CudaBackend.WorldOfOne'
test_step conformance_all_reduce_test "${AB_CONFORMANCE_S:-150}" $T/conformance_all_reduce_test \
  --gtest_filter='*/cuda_*'
test_step cuda_call_check_test "${AB_CHECK_S:-90}" $T/cuda_call_check_test
[ "$FP8" != 0 ] && test_step lowp_cuda_test "${AB_LOWP_S:-240}" $T/lowp_cuda_test
for t in $EXTRA; do test_step "$t" "${AB_EXTRA_S:-200}" $T/$t; done
summary
fi
[ "${AB_BENCH:-1}" = 0 ] && exit $rc

NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 2 ] && NR=2
BACKENDS=cuda,nccl
[ "$FP8" != 0 ] && BACKENDS=cuda,cuda+fp8,nccl
ARGS="--ranks $NR --backend $BACKENDS --dtypes bf16,f32 --ops all_reduce --modes eager,graph --min 1M --max 256M --factor 4 --reps ${AB_REPS:-5}"
echo "command: commx-bench $ARGS" >> "$OUT/machine.txt"
runs=()
for r in $(seq 1 "${AB_ROUNDS:-3}"); do
  for side in base new; do
    [ $side = base ] && [ -z "$BASE" ] && continue
    dir=build-ab; [ $side = base ] && dir=$BASE/build-ab
    timeout "${AB_BENCH_S:-120}" "$dir/bin/commx-bench" $ARGS --json "$WORK/${side}_$r.json" \
      --md /dev/null > "$WORK/${side}_$r.log" 2>&1 || { rc=1; echo "bench $side round $r failed"; }
    runs+=("$side=$WORK/${side}_$r.json")
  done
  # After every round: the comparison so far (a run cut short still leaves it).
  python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" > /dev/null 2>&1
  (cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
done
python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" || rc=1
cat "$OUT/ab.md"

# The reference: the new tree with halves that hold a 256 MiB op whole (one piece).
echo "command (reference): COMMX_CUDA_BUFFER_BYTES=256M commx-bench $ARGS" >> "$OUT/machine.txt"
COMMX_CUDA_BUFFER_BYTES=256M timeout "${AB_BENCH_S:-120}" $T/commx-bench $ARGS \
  --json "$OUT/buf256M.json" --md "$OUT/buf256M.md" > "$WORK/buf256M.log" 2>&1 ||
  { rc=1; echo "bench with 256M halves failed"; }
cat "$OUT/buf256M.md" 2>/dev/null
(cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
exit $rc
