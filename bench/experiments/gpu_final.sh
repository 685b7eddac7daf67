#!/usr/bin/env bash
# One GPU run within a time budget (2 GPUs): build, the FP8 benchmark, the GPU tests
# of shared-GPU grids and the hierarchical timeout, then the Python GPU tests with whatever time
# is left of GPU_FINAL_BUDGET seconds. Everything lands in $OUT. Usage: bash bench/experiments/gpu_final.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( ${GPU_FINAL_BUDGET:-470} - ($(date +%s) - T0) )); }
{ date -u; nvidia-smi -L; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"; } > "$OUT/machine.txt"
B=build-gpu
cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > "$OUT/build.log" 2>&1 &&
  ninja -C $B -j"$(nproc)" commx commx_backend_cuda commx_backend_nccl commx-bench \
    cuda_backend_test cuda_hier_test >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build ok after $(( $(date +%s) - T0 )) s"
timeout 120 $B/bin/commx-bench --ranks 2 --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 \
  --dtypes bf16 --ops all_reduce --modes eager --min 1M --max 1G --factor 4 --reps 5 --error 4M \
  --json "$OUT/lowp_np2.json" --md "$OUT/lowp_np2.md" > "$OUT/lowp.log" 2>&1
grep -E "^\| (cuda\+|nccl\+)" "$OUT/lowp_np2.md" | cut -d'|' -f2,6,7,8,9,11,12
COMMX_CUDA_LOWP_BLOCKS_PER_SM=1 timeout 30 $B/bin/commx-bench --ranks 2 --backend cuda+fp8 \
  --dtypes bf16 --ops all_reduce --modes eager --min 16M --max 256M --factor 4 --reps 5 \
  --json /dev/null --md /dev/null 2>&1 | grep "^cuda" | sed 's/^/one-block-per-SM /' | tee -a "$OUT/lowp.log"
for t in "cuda_backend_test *ShareGpus*:*TwoComms*:*EveryCollectiveTwo*" "cuda_hier_test *NeverArrives*:*TwoHostsOfOne*"; do
  set -- $t
  timeout 60 $B/bin/$1 --gtest_filter="$2" > "$OUT/$1.log" 2>&1
  grep -E "^\[( +OK|  FAILED|  PASSED) |rank [0-9]+ (failed|killed)" "$OUT/$1.log" | head -12
done
echo "python gets $(left) s"
GPU_PY_CPU=0 GPU_PY_TIMEOUT=$(( $(left) - 40 )) timeout $(left) bash scripts/gpu_python.sh 2>&1 | tail -25
