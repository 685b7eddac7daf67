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
# seconds). AB_EXTRA_TESTS names more test binaries to build and run. AB_TESTS=0 skips the
# tests, AB_BENCH=0 the benchmark: a second run on the same machine finds both builds done, so
# the two halves can run one after the other, each under 10 minutes.
# Files in $OUT: machine.txt, tests.log, ab.md, ab.json, buf256M.md/.json, bench logs and the JSON
# of every run in runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BASE=$(cd "${1:?usage: gpu_pipelined_allreduce.sh BASE_DIR}" && pwd)
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_pipelined_allreduce}
mkdir -p "$OUT"
WORK=$(mktemp -d)
rc=0
. bench/experiments/ab_lib.sh
ab_machine
FP8=${AB_FP8:-1}
TESTS="cuda_backend_test conformance_all_reduce_test cuda_call_check_test"
[ "$FP8" != 0 ] && TESTS="$TESTS lowp_cuda_test"
# AB_EXTRA_TESTS: more GPU test binaries of the new tree, built and run whole after the others.
EXTRA=${AB_EXTRA_TESTS:-}
TESTS="$TESTS $EXTRA"
ab_build "${AB_BUILD_S:-300}" "commx_backend_cuda commx_backend_nccl commx-bench" \
  commx_backend_cuda commx_backend_nccl commx-bench $TESTS || exit 1

T=build-ab/bin
# The changed path first: pieces in one launch, the chunking, graphs, a peer that never arrives.
if [ "${AB_TESTS:-1}" != 0 ]; then
test_step cuda_backend_test "${AB_BACKEND_S:-150}" $T/cuda_backend_test \
  --gtest_filter='CudaBackend.TwoShotPiecesInOneLaunch:CudaBackend.ChunkingThroughASmallBuffer:CudaBackend.AllReduceEveryDtypeOpAndSize:CudaBackend.GraphCaptureAndReplay:CudaBackend.PeerThatNeverArrivesTimesOutOnTheGpu:CudaBackend.AsyncOpsAndStreams:CudaBackend.ThreeAndFourRanksShareGpus:CudaBackend.WorldOfOne'
test_step conformance_all_reduce_test "${AB_CONFORMANCE_S:-150}" $T/conformance_all_reduce_test \
  --gtest_filter='*/cuda_*'
test_step cuda_call_check_test "${AB_CHECK_S:-90}" $T/cuda_call_check_test
[ "$FP8" != 0 ] && test_step lowp_cuda_test "${AB_LOWP_S:-240}" $T/lowp_cuda_test
for t in $EXTRA; do test_step "$t" "${AB_EXTRA_S:-200}" $T/$t; done
ab_summary
fi
[ "${AB_BENCH:-1}" = 0 ] && exit $rc

NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 2 ] && NR=2
BACKENDS=cuda,nccl
[ "$FP8" != 0 ] && BACKENDS=cuda,cuda+fp8,nccl
ARGS="--ranks $NR --backend $BACKENDS --dtypes bf16,f32 --ops all_reduce --modes eager,graph --min 1M --max 256M --factor 4 --reps ${AB_REPS:-5}"
ab_rounds_and_reference "${AB_BENCH_S:-120}" $ARGS
exit $rc
