#!/usr/bin/env bash
# The FP8 collectives on a GPU machine (`bash scripts/gpu.sh lowp`, or directly): builds the cuda
# and nccl backends, the FP8 tests and commx-bench, then writes to $OUT (default
# bench/results/<machine>_<date>, results_dir in scripts/gpu_env.sh):
#   lowp_tests.log      lowp_gpu_codec_test and lowp_cuda_test (bits equal to the CPU codec)
#   lowp_allreduce.*    all_reduce of bf16: NCCL bf16, commx bf16, commx FP8 (one- and two-term
#                       gather), NCCL native FP8; relative error at <= 16 MiB
#   lowp_f32.*          all_reduce of f32: NCCL f32 vs commx FP8
#   lowp_coll.*         reduce_scatter, all_gather, all_to_all of bf16: NCCL, commx, commx FP8
#   lowp_generic.json   commx FP8 with COMMX_CUDA_LOWP_KERNEL=generic (the kernel for any world
#                       size) beside the specialised one, same binary and run
#   lowp_sized.json     commx FP8 with COMMX_CUDA_LOWP_KERNEL=sized (the round kernel where the
#                       two-rank all_reduce kernel would run), same binary and run
#   lowp_occupancy.json commx FP8 with the other COMMX_CUDA_LOWP_BLOCKS_PER_SM (1 block of threads
#                       per SM with up to 128 registers, or 2 with 64), same binary and run
#   fp8_training.*      loss curves of a 2-layer MLP trained with bf16 / FP8 / fp8x2 gradient
#                       all-reduce (LOWP_TRAIN=1; tools/gpu_bench/fp8_training.py)
#   torch_fp8.*         the FP8 all_reduce as PyTorch users call it (LOWP_TORCH=1;
#                       tools/gpu_bench/torch_bench.py): commx's Python API with the per-op FP8
#                       hint beside torch's NCCL and commx in the dtype, eager (also with the last
#                       rank 100 us late) and torch.cuda.graph, 16-256 MiB
#   logs.tar.gz         build and benchmark logs
# Env: LOWP_TESTS=0 / LOWP_BENCH=0 skip a part (LOWP_SETTINGS=0: lowp_generic, lowp_sized and
# lowp_occupancy); LOWP_MIN/LOWP_MAX bound the sizes (16M, 1G; LOWP_TORCH_MIN/MAX those of
# torch_fp8: 16M, 256M); LOWP_REPS (5); LOWP_BASE=DIR also
# benchmarks the FP8 all_reduce of the commx tree at DIR (built there in build-gpu) as the "before"
# of a comparison (lowp_base.json); LOWP_BUILD=DIR runs a build made elsewhere for this CUDA
# instead of building (DIR/bin: commx-bench and the two tests; DIR/lib: libcommx, the cuda and nccl
# plugins, the tuning tables; the Python extension is built against it).
# Not here: an Nsight Compute profile. ncu serialises the kernels of the two rank processes, so the
# profiled kernel waits for a peer kernel that cannot start (it ends at the op timeout).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
start_results
BUILD=${LOWP_BUILD:-${BUILD_DIR:-build-gpu}}
# The benchmark binary of a tree: commx-bench, or commx-gpu-bench in trees from before the port.
bench_bin() { if [ -f "$1/tools/gpu_bench/gpu_bench.cc" ]; then echo commx-gpu-bench; else echo commx-bench; fi; }
BENCH_TARGETS="commx_backend_cuda commx_backend_nccl"
TESTS="lowp_gpu_codec_test lowp_cuda_test"
BASE=${LOWP_BASE:-}
if [ -n "$BASE" ]; then
  (cd "$BASE" && gpu_build build-gpu "$LOGS/base_build.log" $BENCH_TARGETS "$(bench_bin .)") &
  base_pid=$!
fi
if [ -n "${LOWP_BUILD:-}" ]; then
  use_build_elsewhere "$LOWP_BUILD"
  BUILD=$BUILT
else
  gpu_build "$BUILD" "$LOGS/build.log" $BENCH_TARGETS commx-bench $TESTS || exit 1
fi
if [ -n "$BASE" ]; then wait $base_pid || BASE=""; fi
echo "build ok${BASE:+ (and $BASE)}"
rc=0
NR=$(nvidia-smi -L | wc -l)
[ "$NR" -gt 2 ] && NR=2
MIN=${LOWP_MIN:-16M} MAX=${LOWP_MAX:-1G} REPS=${LOWP_REPS:-5}

if [ "${LOWP_TESTS:-1}" = 1 ]; then
  : > "$OUT/lowp_tests.log"
  for t in $TESTS; do
    echo "=== $t" >> "$OUT/lowp_tests.log"
    timeout 300 "$BUILD/bin/$t" >> "$OUT/lowp_tests.log" 2>&1 || { rc=1; echo "=== $t FAILED" >> "$OUT/lowp_tests.log"; }
  done
  grep -E "^=== |^\[( +OK|  FAILED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/lowp_tests.log" | head -40
fi

# bench NAME BUILD_DIR BINARY ARGS...: one benchmark run, its log kept in LOGS.
bench() {
  local name=$1 dir=$2 bin=$3; shift 3
  echo "command: $bin --ranks $NR $*" >> "$OUT/machine.txt"
  timeout 240 "$dir/bin/$bin" --ranks "$NR" "$@" > "$LOGS/$name.log" 2>&1 || rc=1
  grep -E "us .*GB/s" "$LOGS/$name.log" | awk '{printf "%s %s %s %s %s us\n", $1, $2, $3, $5, $6}'
}
if [ "${LOWP_BENCH:-1}" = 1 ]; then
  bench lowp_allreduce "$BUILD" commx-bench --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 --dtypes bf16 \
    --ops all_reduce --modes eager --min "$MIN" --max "$MAX" --factor 4 --reps "$REPS" --error 16M \
    --json "$OUT/lowp_allreduce.json" --md "$OUT/lowp_allreduce.md"
  bench lowp_f32 "$BUILD" commx-bench --backend nccl,cuda,cuda+fp8 --dtypes f32 --ops all_reduce --modes eager \
    --min 64M --max "$MAX" --factor 4 --reps "$REPS" --error 64M \
    --json "$OUT/lowp_f32.json" --md "$LOGS/lowp_f32.md"
  bench lowp_coll "$BUILD" commx-bench --backend nccl,cuda,cuda+fp8 --dtypes bf16 \
    --ops reduce_scatter,all_gather,all_to_all --modes eager --min "$MIN" --max "$MAX" --factor 4 \
    --reps "$REPS" --json "$OUT/lowp_coll.json" --md "$LOGS/lowp_coll.md"
fi
if [ "${LOWP_BENCH:-1}" = 1 ] && [ "${LOWP_SETTINGS:-1}" = 1 ]; then
  COMMX_CUDA_LOWP_KERNEL=generic bench lowp_generic "$BUILD" commx-bench --backend cuda+fp8,cuda+fp8x2 \
    --dtypes bf16 --ops all_reduce --modes eager --min "$MIN" --max "$MAX" --factor 4 --reps "$REPS" \
    --json "$OUT/lowp_generic.json" --md /dev/null
  COMMX_CUDA_LOWP_KERNEL=sized bench lowp_sized "$BUILD" commx-bench --backend cuda+fp8 \
    --dtypes bf16,f32 --ops all_reduce --modes eager --min "$MIN" --max "$MAX" --factor 4 --reps "$REPS" \
    --json "$OUT/lowp_sized.json" --md /dev/null
  other_bpsm=1
  [ "${COMMX_CUDA_LOWP_BLOCKS_PER_SM:-1}" = 1 ] && other_bpsm=2
  COMMX_CUDA_LOWP_BLOCKS_PER_SM=$other_bpsm bench lowp_occupancy "$BUILD" commx-bench --backend cuda+fp8,cuda+fp8x2 \
    --dtypes bf16 --ops all_reduce --modes eager --min "$MIN" --max "$MAX" --factor 4 --reps "$REPS" \
    --json "$OUT/lowp_occupancy.json" --md /dev/null
fi
if [ "${LOWP_BENCH:-1}" = 1 ] && [ -n "$BASE" ]; then
  bench lowp_base "$BASE/build-gpu" "$(bench_bin "$BASE")" --backend cuda+fp8,cuda+fp8x2 --dtypes bf16 --ops all_reduce \
    --modes eager --min "$MIN" --max "$MAX" --factor 4 --reps "$REPS" \
    --json "$OUT/lowp_base.json" --md /dev/null
fi

if [ "${LOWP_TRAIN:-0}" = 1 ]; then
  # The Python extension over this build (no tests), then 200 steps per variant on 2 ranks.
  BUILD_DIR=$BUILD GPU_PY_TESTS=0 OUT=$LOGS bash scripts/gpu_python.sh > "$LOGS/python_build.log" 2>&1 &&
    PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" timeout 240 python3 tools/gpu_bench/fp8_training.py \
      --ranks "$NR" --steps 200 --out "$OUT" > "$LOGS/fp8_training.log" 2>&1
  echo "training: rc $?"; tail -8 "$LOGS/fp8_training.log"
fi
if [ "${LOWP_TORCH:-0}" = 1 ]; then
  # The Python extension over this build (no tests), then torch_bench with the FP8 clients.
  BUILD_DIR=$BUILD GPU_PY_TESTS=0 OUT=$LOGS bash scripts/gpu_python.sh > "$LOGS/python_build.log" 2>&1
  PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" timeout 300 python3 tools/gpu_bench/torch_bench.py \
    --ranks "$NR" --clients nccl,cuda,cuda+fp8,cuda+fp8x2 --dtypes bf16,f32 \
    --min "${LOWP_TORCH_MIN:-16M}" --max "${LOWP_TORCH_MAX:-256M}" --factor 4 --skews 100 --skew-max 256M --ops 20 --reps 3 \
    --json "$OUT/torch_fp8.json" --md "$OUT/torch_fp8.md" > "$LOGS/torch_fp8.log" 2>&1 || rc=1
  echo "torch_fp8: rc $rc"; tail -4 "$LOGS/torch_fp8.log"
fi
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
rm -rf "$LOGS"
exit $rc
