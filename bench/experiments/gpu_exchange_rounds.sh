#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_exchange_rounds.sh BASE_DIR
# The cuda backend's byte exchange (all_gather, all_to_all, broadcast, gather, scatter) and chunked
# reduce_scatter with all their buffer-half rounds in one launch, against BASE_DIR (the "before":
# a commx tree that launches one kernel per round, e.g. a checkout of main). Builds both trees at
# once, runs the GPU tests over the changed paths (the rounds through a 1 MiB buffer eager and in
# graphs, the backend's chunking, every collective, graphs and timeouts, the conformance suites of
# the six collectives on the cuda worlds, the call checks, the hierarchical path whose local steps
# run the same kernels), then commx-bench's all_gather / reduce_scatter / all_to_all sweep (bf16,
# 1 MiB - 256 MiB, eager and graph, cuda and nccl) on each tree in turn, AB_ROUNDS times (base,
# new, base, new, ...: drift of the machine hits both alike), compares the per-round medians
# (latency_ab.py; the nccl rows are the same library on both sides, so their change is the
# noise), and runs the new tree once more with 2 x 256 MiB halves (COMMX_CUDA_BUFFER_BYTES=256M),
# the one-round reference the rounds in one launch should approach. Ranks: every GPU (the
# regression was measured at 4). Every step is bounded (AB_*_S seconds). AB_TESTS=0 skips the
# tests, AB_BENCH=0 the benchmark: a second run on the same machine finds both builds done, so
# the two halves can run one after the other, each under 10 minutes.
# Files in $OUT: machine.txt, tests.log, ab.md, ab.json, buf256M.md/.json, bench logs and the JSON
# of every run in runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BASE=$(cd "${1:?usage: gpu_exchange_rounds.sh BASE_DIR}" && pwd)
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_exchange_rounds}
mkdir -p "$OUT"
WORK=$(mktemp -d)
rc=0
. bench/experiments/ab_lib.sh
ab_machine
COLLS="all_gather all_to_all reduce_scatter broadcast gather scatter"
CONFORMANCE=$(for c in $COLLS; do printf 'conformance_%s_test ' "$c"; done)
TESTS="cuda_backend_test cuda_call_check_test cuda_hier_test $CONFORMANCE"
ab_build "${AB_BUILD_S:-360}" "commx_backend_cuda commx_backend_nccl commx-bench" \
  commx_backend_cuda commx_backend_nccl commx-bench $TESTS || exit 1

T=build-ab/bin
# The changed paths first: rounds in one launch, the chunking, graphs, a peer that never arrives.
if [ "${AB_TESTS:-1}" != 0 ]; then
test_step cuda_backend_test "${AB_BACKEND_S:-200}" $T/cuda_backend_test \
  --gtest_filter='CudaBackend.LargeExchangeAndReduceScatterInRounds:CudaBackend.ChunkingThroughASmallBuffer:CudaBackend.TwoShotPiecesInOneLaunch:CudaBackend.EveryCollectiveTwoRanks:CudaBackend.GraphCaptureAndReplay:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu:CudaBackend.AsyncOpsAndStreams:CudaBackend.ThreeAndFourRanksShareGpus:CudaBackend.WorldOfOne:CudaBackend.TwoCommsAtOnce'
for t in $CONFORMANCE; do
  test_step "$t" "${AB_CONFORMANCE_S:-150}" $T/$t --gtest_filter='*/cuda_*'
done
test_step cuda_call_check_test "${AB_CHECK_S:-90}" $T/cuda_call_check_test
test_step cuda_hier_test "${AB_HIER_S:-200}" $T/cuda_hier_test
ab_summary
fi
[ "${AB_BENCH:-1}" = 0 ] && exit $rc

NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 8 ] && NR=8
ARGS="--ranks $NR --backend cuda,nccl --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all --modes eager,graph --min 1M --max 256M --factor 4 --reps ${AB_REPS:-5}"
ab_rounds_and_reference "${AB_BENCH_S:-150}" $ARGS
exit $rc
