#!/usr/bin/env bash
# Issue 7's scaling run in one call on a machine with 4 (or 8) GPUs: cuda vs nccl all_reduce
# (bf16, f32) at world sizes 2 and 4 (or 8), graph-captured and eager, FP8 all_reduce, the other
# collectives, threshold sweeps per algorithm, init time, and world size 2x GPUs (two ranks per
# GPU: correctness only).
# Writes logs and JSON to $OUT. Usage: bash scripts/gpu_scaling.sh (GoogleTest from .gpudeps when the machine has none).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
FINAL=${OUT:-$(results_dir)}
mkdir -p "$FINAL"
# Work in a scratch folder and pack it into $FINAL after every step (a remote runner may return at
# most 8 files, and whatever is there when a step overruns the call's limit).
OUT=$(mktemp -d)
pack() { tar -czf "$FINAL/scaling.tar.gz" -C "$OUT" . ; cp "$OUT/scaling.log" "$OUT"/*.md "$FINAL/" 2>/dev/null; }
NG=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"; } > "$OUT/machine.txt" 2>&1
B=build-gpu
cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ninja -C $B -j"$(nproc)" commx_backend_cuda commx_backend_nccl commx-bench cuda_backend_test \
  lowp_gpu_codec_test lowp_cuda_test >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build ok ($NG GPUs)"
G=$B/bin/commx-bench
log=$OUT/scaling.log
run() { echo "== $*" | tee -a "$log"; timeout "$@" 2>&1 | tee -a "$log" | grep -E "^init|wrong [1-9]|rank .*:|skipping" ; pack; }
echo "== gpu tests (lowp, 2 GPUs)" | tee -a "$log"
CUDA_VISIBLE_DEVICES=0,1 timeout 120 $B/bin/lowp_cuda_test 2>&1 | grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED) |Failure|failed" | tee -a "$log"
# all_reduce at full width and at 2 ranks (bf16 and f32, graph and eager, 8 B..1 GiB).
run 150 $G --ranks "$NG" --backend cuda,nccl --dtypes bf16,f32 --ops all_reduce --modes graph,eager \
  --min 8 --max "${SCALING_MAX:-1G}" --factor 8 --reps 5 --json "$OUT/allreduce_np$NG.json" --md /dev/null
# FP8 all_reduce against NCCL bf16 and NCCL native FP8, with errors against float64.
run 120 $G --ranks "$NG" --backend nccl,cuda+fp8,cuda+fp8x2,nccl+fp8 --dtypes bf16 --ops all_reduce \
  --modes eager --min 1M --max 1G --factor 4 --reps 5 --error 16M --json "$OUT/lowp_np$NG.json" --md "$OUT/lowp_np$NG.md"
run 80 $G --ranks "$NG" --backend cuda,nccl --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all \
  --modes graph --min 1K --max 256M --factor 8 --reps 5 --json "$OUT/collectives_np$NG.json" --md /dev/null
# Threshold tuning at NG ranks: each all-reduce algorithm forced over its range (graph, bf16).
for a in "ll 8 2M" "flat 8 32M" "tree 8K 1G"; do
  set -- $a
  run 60 $G --ranks "$NG" --backend cuda --algo "$1" --dtypes bf16 --ops all_reduce --modes graph \
    --min "$2" --max "$3" --factor 2 --reps 5 --json "$OUT/tune_np${NG}_$1.json" --md /dev/null
done
run 100 $G --ranks 2 --backend cuda,nccl --dtypes bf16 --ops all_reduce --modes graph,eager \
  --min 8 --max 256M --factor 8 --reps 5 --json "$OUT/allreduce_np2.json" --md /dev/null
# World size 2x GPUs (two ranks per GPU): correctness of the shared-GPU path, default (one block
# for latency kernels) and forced multi-block (the case that returned wrong results before).
run 40 $G --ranks $((2 * NG)) --backend cuda --dtypes bf16,f32 --ops all_reduce --modes eager \
  --min 8 --max 4M --factor 8 --reps 3 --json "$OUT/allreduce_np$((2 * NG))_shared.json" --md /dev/null
COMMX_CUDA_MAX_BLOCKS=64 run 40 $G --ranks $((2 * NG)) --backend cuda --dtypes bf16 --ops all_reduce \
  --modes eager --min 2K --max 256K --factor 2 --reps 3 --json "$OUT/allreduce_np$((2 * NG))_shared_multiblock.json" --md /dev/null
pack
echo done
