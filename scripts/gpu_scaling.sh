#!/usr/bin/env bash
# Issue 7's scaling run in one call on a machine with 4 (or 8) GPUs: cuda vs nccl all_reduce at
# world sizes 2, 4 (and 8), graph-captured and eager, the other collectives at full size, init
# time, world size 8 on 4 GPUs (two ranks per GPU: correctness only), and the GPU tests.
# Writes logs and JSON to $OUT. Usage: bash scripts/gpu_scaling.sh (device tool: carry .gpudeps).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench/results/scaling-local}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
PREFIX_PATH=""
if ! [ -f /usr/include/gtest/gtest.h ] && ls .gpudeps/*.deb >/dev/null 2>&1; then
  mkdir -p .gpudeps/root
  for f in .gpudeps/*.deb; do dpkg -x "$f" .gpudeps/root; done
  PREFIX_PATH="$PWD/.gpudeps/root/usr"
fi
if [ -z "${COMMX_NCCL_LIBRARY:-}" ]; then
  d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  [ -n "$d" ] && [ -f "$d/lib/libnccl.so.2" ] && export COMMX_NCCL_LIBRARY="$d/lib/libnccl.so.2"
fi
NG=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"; } > "$OUT/machine.txt" 2>&1
B=build-gpu
cmake -G Ninja -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
  ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ninja -C $B -j"$(nproc)" commx_backend_cuda commx_backend_nccl commx-gpu-bench cuda_backend_test \
  lowp_gpu_codec_test >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build ok ($NG GPUs)"
G=$B/bin/commx-gpu-bench
log=$OUT/scaling.log
run() { echo "== $*" | tee -a "$log"; timeout "$@" 2>&1 | tee -a "$log" | grep -E "^init|wrong [1-9]|rank .*:|skipping" ; }
for n in $NG 2; do
  run 90 $G --ranks "$n" --backend cuda,nccl --dtypes bf16 --ops all_reduce --modes graph,eager \
    --min 8 --max 256M --factor 8 --reps 5 --json "$OUT/allreduce_np$n.json" --md /dev/null
done
run 60 $G --ranks "$NG" --backend cuda,nccl --dtypes bf16 --ops all_gather,reduce_scatter,all_to_all \
  --modes graph --min 1K --max 64M --factor 8 --reps 5 --json "$OUT/collectives_np$NG.json" --md /dev/null
run 45 $G --ranks $((2 * NG)) --backend cuda --dtypes bf16,f32 --ops all_reduce --modes eager \
  --min 8 --max 4M --factor 16 --reps 3 --json "$OUT/allreduce_np$((2 * NG))_shared.json" --md /dev/null
echo "== gpu tests" | tee -a "$log"
timeout 30 $B/bin/lowp_gpu_codec_test 2>&1 | tail -3 | tee -a "$log"
timeout 90 $B/bin/cuda_backend_test 2>&1 | grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED) " | tee -a "$log"
echo done
