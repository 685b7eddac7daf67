#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_fingerprint_ab.sh BASE_DIR
# The cost of the cuda backend's call checks: builds this tree and the commx tree at BASE_DIR (the
# "before", e.g. a checkout of main without them) at once, runs the call-check GPU tests and a
# few of the backend's, then commx-bench's small-message all_reduce sweep (8 B - 64 KiB, bf16 and
# f32, eager and graph) on each tree in turn, AB_ROUNDS times (base, new, base, new, ...: drift of
# the machine hits both alike), compares the per-round medians (latency_ab.py), then more of the
# backend's GPU tests. Every step is bounded (AB_*_S seconds).
# AB_EXTRA_TARGETS: more targets built into build-ab with the first (a later run can use them).
# Files in $OUT: tests.log, ab.md, ab.json, bench logs; the JSON of every run in runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
BASE=$(cd "${1:?usage: gpu_fingerprint_ab.sh BASE_DIR}" && pwd)
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_cuda_fingerprint}
mkdir -p "$OUT"
WORK=$(mktemp -d)
{
  date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
  nvidia-smi topo -m; nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1
TESTS="cuda_call_check_test cuda_backend_test cuda_all_to_all_v_dynamic_test"
(cd "$BASE" && timeout "${AB_BUILD_S:-280}" bash -c ". '$PWD/scripts/gpu_env.sh' 2>/dev/null;
  cmake -G Ninja -S . -B build-ab -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > '$WORK/base_build.log' 2>&1 &&
  ninja -C build-ab -j$(nproc) commx_backend_cuda commx-bench >> '$WORK/base_build.log' 2>&1") &
base_pid=$!
timeout "${AB_BUILD_S:-280}" bash -c ". scripts/gpu_env.sh; gpu_build build-ab '$WORK/build.log' \
  commx_backend_cuda commx_backend_nccl commx-bench $TESTS ${AB_EXTRA_TARGETS:-}" || { tail -30 "$WORK/build.log" > "$OUT/build_failed.log"; exit 1; }
wait $base_pid || { tail -30 "$WORK/base_build.log" > "$OUT/base_build_failed.log"; BASE=""; }
echo "build ok${BASE:+ (and $BASE)}: $(date -u +%T)"

rc=0
T=build-ab/bin
# test NAME LIMIT BINARY ARGS...: one GPU test binary, its output appended to tests.log.
test_step() {
  local name=$1 limit=$2; shift 2
  echo "=== $name" >> "$OUT/tests.log"
  timeout "$limit" "$@" >> "$OUT/tests.log" 2>&1 || { rc=1; echo "=== $name FAILED" >> "$OUT/tests.log"; }
}
summary() { grep -E "^=== |^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|rank [0-9]+ failed" "$OUT/tests.log" | tail -40; }
test_step cuda_call_check_test "${AB_CHECK_S:-60}" $T/cuda_call_check_test

NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 2 ] && NR=2
ARGS="--ranks $NR --backend cuda --dtypes bf16,f32 --ops all_reduce --modes eager,graph --min 8 --max 64K --factor 2 --reps ${AB_REPS:-9}"
echo "command: commx-bench $ARGS" >> "$OUT/machine.txt"
runs=()
for r in $(seq 1 "${AB_ROUNDS:-3}"); do
  for side in base new; do
    [ $side = base ] && [ -z "$BASE" ] && continue
    dir=build-ab; [ $side = base ] && dir=$BASE/build-ab
    timeout 40 "$dir/bin/commx-bench" $ARGS --json "$WORK/${side}_$r.json" --md /dev/null \
      > "$WORK/${side}_$r.log" 2>&1 || { rc=1; echo "bench $side round $r failed"; }
    runs+=("$side=$WORK/${side}_$r.json")
  done
  # After every round: the comparison so far (a run cut short still leaves it).
  python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" > /dev/null 2>&1
  (cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
done
# The other collectives (LL exchange, flag-barrier exchange and reduce-scatter), graph mode, once
# per side: their rows join the table with one run each.
CARGS="--ranks $NR --backend cuda --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all --modes graph --min 1K --max 4M --factor 4 --reps 7"
echo "command (collectives): commx-bench $CARGS" >> "$OUT/machine.txt"
for side in base new; do
  [ $side = base ] && [ -z "$BASE" ] && continue
  dir=build-ab; [ $side = base ] && dir=$BASE/build-ab
  timeout 40 "$dir/bin/commx-bench" $CARGS --json "$WORK/${side}_coll.json" --md /dev/null \
    > "$WORK/${side}_coll.log" 2>&1 || { rc=1; echo "bench $side collectives failed"; }
  runs+=("$side=$WORK/${side}_coll.json")
done
python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${runs[@]}" || rc=1
cat "$OUT/ab.md"

# The backend's own coverage over the changed kernels: graphs, GPU-side timeouts, every
# collective, 3-4 ranks sharing GPUs, all_to_all_v_dynamic.
test_step cuda_backend_test "${AB_BACKEND_S:-90}" $T/cuda_backend_test \
  --gtest_filter='CudaBackend.GraphCaptureAndReplay:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu:CudaBackend.AsyncOpsAndStreams:CudaBackend.EveryCollectiveTwoRanks:CudaBackend.WorldOfOne:CudaBackend.TwoCommsAtOnce:CudaBackend.ThreeAndFourRanksShareGpus'
test_step cuda_all_to_all_v_dynamic_test "${AB_DYNAMIC_S:-45}" $T/cuda_all_to_all_v_dynamic_test \
  --gtest_filter='CudaAllToAllVDynamic.EveryFormTwoRanks:CudaAllToAllVDynamic.WorldOfOne'
summary
(cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
exit $rc
