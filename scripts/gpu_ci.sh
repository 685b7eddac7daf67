#!/usr/bin/env bash
# One call on a GPU machine: builds commx with the GPU backends, runs the GPU tests (label gpu)
# and the cuda-vs-nccl benchmark (plus PyTorch symm_mem for reference), writing everything to
# $OUT (default bench/results/<machine>_<date>, see results_dir in scripts/gpu_env.sh). Usage: `bash scripts/gpu_ci.sh` (or `bash scripts/gpu.sh test bench`).
# Env: GPU_CI_TESTS=0 skips tests, GPU_CI_BENCH=0 skips the benchmark, GPU_CI_QUICK=1 runs a
# shorter benchmark, GPU_CI_SYMM=0 skips symm_mem, BENCH_ARGS adds commx-bench arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
# Logs go to LOGS and are packed into $OUT/logs.tar.gz at the end (a remote runner may return at
# most 8 files): machine.txt, gpu_tests.log, allreduce.json, collectives.json, symm_mem.json,
# report.md (cuda vs nccl vs symm_mem against the targets), allreduce_bf16.svg, logs.tar.gz.
start_results
BUILD=${BUILD_DIR:-build-gpu}
# The conformance suite runs its cuda and nccl worlds here (--gtest_filter below picks them).
GPU_TESTS=${GPU_CI_TESTLIST:-$GPU_TEST_BINARIES $GPU_CONFORMANCE_TESTS}
TARGETS=${GPU_CI_TARGETS:-commx_backend_cuda commx_backend_nccl commx-bench $GPU_TESTS}
gpu_build "$BUILD" "$LOGS/build.log" $TARGETS || exit 1
echo "build ok"
rc=0
if [ "${GPU_CI_TESTS:-1}" = 1 ]; then
  : > "$OUT/gpu_tests.log"
  for t in $GPU_TESTS; do
    echo "=== $t" >> "$OUT/gpu_tests.log"
    filter=${GPU_CI_FILTER:-}
    # The host worlds of the conformance suite are the CPU CI's: here only the GPU ones.
    case $t in conformance_*) filter=${GPU_CI_FILTER:-*/cuda_*:*/nccl_*} ;; esac
    timeout "${GPU_CI_TEST_TIMEOUT:-400}" "$BUILD/bin/$t" ${filter:+--gtest_filter=$filter} \
      >> "$OUT/gpu_tests.log" 2>&1
    r=$?
    if [ $r -ne 0 ]; then rc=1; echo "=== $t FAILED (rc $r)" >> "$OUT/gpu_tests.log"; fi
  done
  grep -E "^=== |^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/gpu_tests.log" | head -60
fi
if [ "${GPU_CI_BENCH:-1}" = 1 ]; then
  NR=$(nvidia-smi -L | wc -l)
  [ "$NR" -gt 2 ] && NR=2
  ARGS="--ranks $NR --backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --modes eager,graph --min 4 --max 256M --factor ${GPU_CI_FACTOR:-4}"
  [ "${GPU_CI_QUICK:-0}" = 1 ] && ARGS="--ranks $NR --backend cuda,nccl --dtypes bf16 --ops all_reduce --modes eager,graph --min 8 --max 256M --factor 4 --reps 5"
  echo "command: commx-bench $ARGS ${BENCH_ARGS:-}" >> "$OUT/machine.txt"
  timeout 300 "$BUILD/bin/commx-bench" $ARGS ${BENCH_ARGS:-} --json "$OUT/allreduce.json" --md "$LOGS/allreduce.md" > "$LOGS/bench.log" 2>&1 || rc=1
  # A late rank (host-bound clients never issue in lock-step): each rank-1 op starts 20 us late.
  timeout 120 "$BUILD/bin/commx-bench" --ranks "$NR" --backend cuda,nccl --dtypes bf16 --ops all_reduce \
    --modes eager --min 8 --max 64M --factor 8 --reps 5 --skew-us 20 \
    --json "$OUT/allreduce_skew.json" --md "$LOGS/allreduce_skew.md" >> "$LOGS/bench.log" 2>&1 || rc=1
  if [ "${GPU_CI_COLL:-1}" = 1 ]; then
    timeout 200 "$BUILD/bin/commx-bench" --ranks "$NR" --backend cuda,nccl --dtypes bf16 \
      --ops all_gather,reduce_scatter,all_to_all --modes graph,eager --min 1K --max 256M --factor 4 --reps 5 \
      --json "$OUT/collectives.json" --md "$LOGS/collectives.md" >> "$LOGS/bench.log" 2>&1 || rc=1
  fi
  if [ "${GPU_CI_LOWP:-1}" = 1 ]; then
    # Issue 5: commx FP8 (one- and two-term gather) vs commx bf16 vs NCCL bf16 vs NCCL native FP8.
    timeout 300 "$BUILD/bin/commx-bench" --ranks "$NR" --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 \
      --dtypes bf16 --ops all_reduce --modes eager --min 1M --max "${GPU_CI_LOWP_MAX:-1G}" --factor 4 --reps 5 \
      --error 16M --json "$OUT/lowp.json" --md "$OUT/lowp.md" > "$LOGS/lowp.log" 2>&1 || rc=1
    grep -E "error|skipping|rank" "$LOGS/lowp.log" | grep -v "^nccl  all_reduce bf16 eager" | head -40
  fi
  if [ "${GPU_CI_SYMM:-1}" = 1 ]; then
    timeout 200 python3 tools/gpu_bench/symm_mem_bench.py --ranks "$NR" --dtypes bf16 --min 4 --max 64M --factor 4 \
      --json "$OUT/symm_mem.json" > "$LOGS/symm_mem.log" 2>&1 || rc=1
  fi
  if [ "${GPU_CI_TUNE:-0}" = 2 ]; then
    # A/B of launch and buffer settings (cuda only, bf16, graph and eager).
    B="$BUILD/bin/commx-bench --ranks $NR --backend cuda --dtypes bf16 --ops all_reduce --reps 5 --factor 4"
    for v in "COMMX_CUDA_PDL=0" "COMMX_CUDA_PDL=1" "COMMX_CUDA_PDL=0 COMMX_CUDA_BUFFER_BYTES=64M" \
             "COMMX_CUDA_PDL=1 COMMX_CUDA_BUFFER_BYTES=64M"; do
      tag=$(echo "$v" | tr ' =' '__')
      timeout 60 env $v $B --modes graph,eager --min 8 --max 512K --json "$LOGS/ab_$tag.json" --md /dev/null > "$LOGS/ab_$tag.log" 2>&1
      echo "== $v"; awk '{print $4, $5, $6}' "$LOGS/ab_$tag.log" | tr '\n' ' '; echo
    done
    for v in "COMMX_CUDA_BUFFER_BYTES=256M" "COMMX_CUDA_BUFFER_BYTES=128M"; do
      tag=$(echo "$v" | tr ' =' '__')
      timeout 60 env $v $B --modes graph --min 64M --max 256M --factor 2 --json "$LOGS/ab_$tag.json" --md /dev/null > "$LOGS/ab_$tag.log" 2>&1
      echo "== $v"; awk '{print $5, $6}' "$LOGS/ab_$tag.log" | tr '\n' ' '; echo
    done
  fi
  if [ "${GPU_CI_TUNE:-0}" = 1 ]; then
    # Threshold tuning: each all-reduce algorithm forced over its size range, and block/buffer
    # variants for large messages (cuda only, bf16, graph).
    B="$BUILD/bin/commx-bench --ranks $NR --backend cuda --dtypes bf16 --ops all_reduce --modes graph --reps 5"
    for a in "ll 8 1M" "flat 8 16M" "tree 8 256M"; do
      set -- $a
      timeout 100 $B --algo "$1" --min "$2" --max "$3" --json "$LOGS/tune_$1.json" --md /dev/null > "$LOGS/tune_$1.log" 2>&1
      echo "== algo $1"; awk '{print $5, $6}' "$LOGS/tune_$1.log" | tr '\n' ' '; echo
    done
    for v in "COMMX_CUDA_MAX_BLOCKS=64" "COMMX_CUDA_MAX_BLOCKS=256" "COMMX_CUDA_BUFFER_BYTES=256M" \
             "COMMX_CUDA_MAX_BLOCKS=256 COMMX_CUDA_BUFFER_BYTES=256M"; do
      tag=$(echo "$v" | tr ' =' '__')
      timeout 100 env $v $B --algo tree --min 4M --max 256M --factor 4 --json "$LOGS/tune_$tag.json" --md /dev/null > "$LOGS/tune_$tag.log" 2>&1
      echo "== $v"; awk '{print $5, $6}' "$LOGS/tune_$tag.log" | tr '\n' ' '; echo
    done
  fi
  python3 tools/gpu_bench/report.py "$OUT" || rc=1
  cat "$OUT/report.md" 2>/dev/null | cut -d'|' -f2-13 | grep -v eager
  tail -5 "$LOGS/bench.log"
fi
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
rm -rf "$LOGS"
exit $rc
