#!/usr/bin/env bash
# Experiment on a 2-GPU machine: why eager all_reduce issued from Python (host gaps, rank skew)
# stalls where the lock-step C++ loop does not, and whether torch.cuda.graph captures. Builds the
# cuda plugin, commx-bench and the Python extension, then: the C++ loop with host gaps and
# skew per algorithm, kernel timelines from Python (stall_profile.py), the graph-capture tests,
# and a short torch_bench. Everything under $OUT. Usage: bash bench/experiments/stall_diag.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)}
mkdir -p "$OUT"
PY=$(command -v python3)
BUILD=build-gpu
LOG=$OUT/diag.log
t0=$(date +%s)
{ cmake -G Ninja -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON -DCOMMX_BUILD_TESTS=OFF &&
  ninja -C $BUILD -j"$(nproc)" commx commx_backend_cuda commx_backend_nccl commx-bench &&
  cmake -G Ninja -S python -B build-py-gpu -DCMAKE_BUILD_TYPE=Release -DCOMMX_NATIVE_BUILD_DIR="$PWD/$BUILD" \
    -DCOMMX_PY_INPLACE=ON -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')" &&
  ninja -C build-py-gpu -j"$(nproc)"; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s" | tee "$LOG"
export PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1
B="$BUILD/bin/commx-bench --ranks 2 --backend cuda --dtypes bf16 --ops all_reduce --modes eager --reps 3 --json /dev/null --md /dev/null"
if [ "${DIAG_CPP:-1}" = 1 ]; then
  # The late-peer cost per algorithm and poll setting (the last rank 100 us late per op), then
  # the lock-step latency of the default choice with and without the poll backoff.
  for algo in ll ll128 flat; do
    for v in "" "COMMX_CUDA_POLL_SLEEP_NS=0" "COMMX_CUDA_POLL_SLEEP_NS=0 COMMX_CUDA_MAX_BLOCKS=8" \
             "COMMX_CUDA_POLL_SLEEP_NS=250" "COMMX_CUDA_POLL_SLEEP_NS=4000"; do
      echo "== C++ $algo skew 100 ${v:-default}" >> "$LOG"
      timeout 60 env $v $B --algo $algo --min 256K --max 1M --factor 4 --skew-us 100 2>&1 | grep -v "^#" >> "$LOG"
    done
  done
  for v in "" "COMMX_CUDA_POLL_SLEEP_NS=0"; do
    echo "== C++ lock-step ${v:-default}" >> "$LOG"
    timeout 90 env $v ${B/--modes eager/--modes eager,graph} --min 8 --max 4M --factor 8 2>&1 | grep -v "^#" >> "$LOG"
  done
fi
if [ "${DIAG_PROFILE:-1}" = 1 ]; then
  P="timeout 60 $PY bench/experiments/stall_profile.py"
  { echo "== profile"; $P --algo ll --bytes 256K; $P --algo ll128 --bytes 1M --side-stream
    $P --algo ll128 --bytes 1M --skew-us 200; COMMX_CUDA_POLL_SLEEP_NS=0 $P --algo ll --bytes 256K; } >> "$LOG" 2>&1
fi
if [ "${DIAG_GRAPHS:-1}" = 1 ]; then
  echo "== capture_query" >> "$LOG"; timeout 60 "$PY" bench/experiments/capture_query.py >> "$LOG" 2>&1
  echo "== graph tests" >> "$LOG"
  timeout 300 "$PY" -m pytest tests/python/test_cuda_graphs.py -v -p no:cacheprovider --durations=0 >> "$LOG" 2>&1
fi
if [ "${DIAG_TORCH:-1}" = 1 ]; then
  echo "== torch_bench" >> "$LOG"
  timeout 240 "$PY" tools/gpu_bench/torch_bench.py --ranks 2 --dtypes bf16 --min 8 --max 64M --factor 8 \
    --skews 20,100 --ops 60 --reps 3 --json "$OUT/torch_quick.json" --md "$OUT/torch_quick.md" >> "$LOG" 2>&1
fi
grep -E "^==|captured|capture failed|rank [01]:|us host|all_reduce|PASSED|FAILED|ERROR|passed|failed|build" "$LOG" | head -150
