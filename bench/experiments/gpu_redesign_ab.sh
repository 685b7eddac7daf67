#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_redesign_ab.sh BASE_DIR STEP...
# The redesign (canonical ops, algorithm tables, the DeviceBackend skeleton, protocols apart from
# algorithms, one reduction helper) checked on GPUs against BASE_DIR, a tree from before it (one
# whose GPU benchmark is commx-gpu-bench; AB_BASE_BENCH names another). Steps, in the order given:
#   tests        every GPU test binary of this tree except the conformance suite
#                (GPU_TEST_BINARIES of scripts/gpu_env.sh), each bounded by AB_TEST_S seconds
#   conformance  the conformance suite on its cuda and nccl worlds, two suites at a time
#   bench        commx-bench (base: its benchmark) side by side, AB_ROUNDS rounds alternating base
#                and new: all_reduce bf16/f32 and all_gather/reduce_scatter/all_to_all bf16,
#                eager and graph, cuda and nccl, 8 B - 256 MiB; compared by latency_ab.py (AB_AR_MIN,
#                AB_COLL_MIN, AB_MAX and AB_FACTOR narrow the sizes: 8, 1K, 256M, 4)
#   tune         the cuda all_reduce algorithms measured per size at 2 ranks and at every GPU
#                (commx-bench --tune): cuda_tuning.txt, the file bench/tuning/cuda.txt keeps
#   hier         scripts/gpu_hier.sh (forced hosts, FP8 between them; 2 hosts of 2 GPUs on 4)
# AB_BASE_BUILD and AB_NEW_BUILD (both) name builds made elsewhere for this CUDA (bin/ and lib/
# with the benchmark and the cuda and nccl plugins), which then run without building here: the
# bench step only. Else both trees are built once (the first step) in build-ab; BASE_DIR/build-ab
# points into /tmp, so a carried BASE_DIR that is replaced between runs on the same machine keeps
# its build. A step skips work an earlier run on the machine did. Files in $OUT: machine.txt, tests.log,
# conformance.log, ab.md, ab.json, cuda_tuning.txt, tune_logs.tar.gz, hier.tar.gz, runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BASE=$(cd "${1:?usage: gpu_redesign_ab.sh BASE_DIR STEP...}" && pwd)
shift
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_redesign_ab}
mkdir -p "$OUT"
WORK=$(mktemp -d)
rc=0
export AB_BASE_BENCH=${AB_BASE_BENCH:-commx-gpu-bench}
. bench/experiments/ab_lib.sh
ab_machine
[ -e "$BASE/build-ab" ] || { mkdir -p /tmp/commx_ab_base_build; ln -s /tmp/commx_ab_base_build "$BASE/build-ab"; }

if [ -z "${AB_BASE_BUILD:-}" ] || [ -z "${AB_NEW_BUILD:-}" ]; then
  ab_build "${AB_BUILD_S:-420}" "commx_backend_cuda commx_backend_nccl $AB_BASE_BENCH" \
    commx_backend_cuda commx_backend_nccl commx-bench $GPU_TEST_BINARIES $GPU_CONFORMANCE_TESTS || exit 1
fi
T=build-ab/bin
NG=$(nvidia-smi -L | wc -l)

for step in "$@"; do
  t0=$(date +%s)
  case $step in
    tests)
      for t in $GPU_TEST_BINARIES; do test_step "$t" "${AB_TEST_S:-240}" $T/$t; done
      ab_summary ;;
    conformance)
      # Two suites at a time (each spends most of its time starting worlds of 1-4 ranks).
      set -- $GPU_CONFORMANCE_TESTS
      while [ $# -gt 0 ]; do
        for t in "$1" "${2:-}"; do
          [ -n "$t" ] && timeout "${AB_CONFORMANCE_S:-200}" $T/$t --gtest_filter='*/cuda_*:*/nccl_*' \
            > "$WORK/$t.log" 2>&1 &
        done
        wait
        for t in "$1" "${2:-}"; do
          [ -n "$t" ] || continue
          echo "=== $t" >> "$OUT/conformance.log"; cat "$WORK/$t.log" >> "$OUT/conformance.log"
          grep -q "^\[  PASSED  \]" "$WORK/$t.log" && ! grep -q "^\[  FAILED  \]" "$WORK/$t.log" ||
            { rc=1; echo "=== $t FAILED" >> "$OUT/conformance.log"; }
        done
        shift $(( $# > 1 ? 2 : 1 ))
      done
      grep -E "^=== |tests? from .* ran|^\[  (PASSED|FAILED) " "$OUT/conformance.log" ;;
    bench)
      R=$NG
      COMMON="--ranks $R --backend cuda,nccl --modes eager,graph --max ${AB_MAX:-256M}"
      COMMON="$COMMON --factor ${AB_FACTOR:-4} --reps ${AB_REPS:-5}"
      AR="--dtypes bf16,f32 --ops all_reduce --min ${AB_AR_MIN:-8}"
      COLL="--dtypes bf16 --ops all_gather,reduce_scatter,all_to_all --min ${AB_COLL_MIN:-1K}"
      echo "commands: commx-bench (base: $AB_BASE_BENCH) $COMMON $AR" \
        "and $COMMON $COLL" >> "$OUT/machine.txt"
      for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        ab_bench "ar$r" "${AB_BENCH_S:-150}" $COMMON $AR
        ab_bench "coll$r" "${AB_BENCH_S:-150}" $COMMON $COLL
      done
      ab_report | grep -E "^\*\*|mean|^- " ;;
    tune)
      # Every algorithm of the table at each size; the fastest per size becomes a row.
      for n in $(printf "%s\n" 2 "$NG" | sort -un); do
        echo "command: commx-bench all_reduce --np $n -b 8 -e 256M -f 2 -n 20 -w 5 --device cuda" \
          "--backend cuda:ll,cuda:ll128,cuda:flat,cuda:two_shot --tune cuda_tuning.txt" >> "$OUT/machine.txt"
        timeout "${AB_TUNE_S:-200}" $T/commx-bench all_reduce --np "$n" -b 8 -e 256M -f 2 -n 20 -w 5 \
          --device cuda --backend cuda:ll,cuda:ll128,cuda:flat,cuda:two_shot --tune "$OUT/cuda_tuning.txt" \
          > "$WORK/tune_$n.log" 2>&1 || { rc=1; tail -5 "$WORK/tune_$n.log"; }
      done
      (cd "$WORK" && tar czf "$OUT/tune_logs.tar.gz" tune_*.log)
      cat "$OUT/cuda_tuning.txt" ;;
    hier)
      mkdir -p "$WORK/hier"
      BUILD_DIR=build-ab OUT=$WORK/hier HIER_LAYOUTS=${AB_HIER_LAYOUTS:-} HIER_TEST_S=${AB_HIER_TEST_S:-150} HIER_BENCH_S=${AB_HIER_BENCH_S:-110} \
        bash scripts/gpu_hier.sh || rc=1
      tar czf "$OUT/hier.tar.gz" -C "$WORK/hier" . ;;
    *) echo "unknown step '$step' (tests, conformance, bench, tune, hier)"; rc=2 ;;
  esac
  echo "step $step: $(( $(date +%s) - t0 )) s (rc so far $rc)"
done
exit $rc
