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
rc=0
. bench/experiments/ab_lib.sh
ab_machine
TESTS="cuda_call_check_test cuda_backend_test cuda_all_to_all_v_dynamic_test"
ab_build "${AB_BUILD_S:-280}" "commx_backend_cuda commx-bench" \
  commx_backend_cuda commx_backend_nccl commx-bench $TESTS ${AB_EXTRA_TARGETS:-} || exit 1

T=build-ab/bin
test_step cuda_call_check_test "${AB_CHECK_S:-60}" $T/cuda_call_check_test

NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 2 ] && NR=2
ARGS="--ranks $NR --backend cuda --dtypes bf16,f32 --ops all_reduce --modes eager,graph --min 8 --max 64K --factor 2 --reps ${AB_REPS:-9}"
echo "command: commx-bench $ARGS" >> "$OUT/machine.txt"
for r in $(seq 1 "${AB_ROUNDS:-3}"); do ab_bench "$r" 40 $ARGS; done
# The other collectives (LL exchange, flag-barrier exchange and reduce-scatter), graph mode, once
# per side: their rows join the table with one run each.
CARGS="--ranks $NR --backend cuda --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all --modes graph --min 1K --max 4M --factor 4 --reps 7"
echo "command (collectives): commx-bench $CARGS" >> "$OUT/machine.txt"
ab_bench coll 40 $CARGS
ab_report

# The backend's own coverage over the changed kernels: graphs, GPU-side timeouts, every
# collective, 3-4 ranks sharing GPUs, all_to_all_v_dynamic.
test_step cuda_backend_test "${AB_BACKEND_S:-90}" $T/cuda_backend_test \
  --gtest_filter='CudaBackend.GraphCaptureAndReplay:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu:CudaBackend.AsyncOpsAndStreams:CudaBackend.EveryCollectiveTwoRanks:CudaBackend.WorldOfOne:CudaBackend.TwoCommsAtOnce:CudaBackend.ThreeAndFourRanksShareGpus'
test_step cuda_all_to_all_v_dynamic_test "${AB_DYNAMIC_S:-45}" $T/cuda_all_to_all_v_dynamic_test \
  --gtest_filter='CudaAllToAllVDynamic.EveryFormTwoRanks:CudaAllToAllVDynamic.WorldOfOne'
ab_summary
(cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
exit $rc
