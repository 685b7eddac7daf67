#!/usr/bin/env bash
# The main job of README.md: builds commx and runs the side-by-side benchmark on local ranks:
# on GPUs (cuda vs nccl) when this machine has them, else on CPU ranks (cpu vs gloo vs mpi) at 2
# and 4 ranks. Peers that are not installed are skipped with a note. Results:
# bench/results/<machine>_<YYYY-MM-DD> (UTC), the machine from COMMX_MACHINE, else the host name.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Only what the comparison runs (the tests are scripts/test.sh's): the bench, the launcher and
# the backends the bench loads.
TARGETS="commx-bench commx-run" bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
export COMMX_BENCH=$PWD/$BUILD_DIR/bin/commx-bench
out=bench/results/${COMMX_MACHINE:-$(hostname -s)}_$(date -u +%F)
mkdir -p "$out"
ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then ngpu=$(nvidia-smi -L 2>/dev/null | grep -c ^GPU || true); fi
if [ "$ngpu" -ge 2 ] && [ -f "$BUILD_DIR/lib/libcommx_backend_cuda.so" ]; then
  NCCL_NVLS_ENABLE=0 "$COMMX_BENCH" all_reduce,all_gather,reduce_scatter,all_to_all -d bf16 \
    -b 8 -e 256M -f 4 --backend cuda,nccl --device cuda --np 2 \
    --json "$out/gpu.json" --svg "$out/gpu.svg" --md "$out/gpu.md" | tee "$out/gpu.txt"
else
  for np in 2 4; do
    tools/bench/compare.sh "$np" "$out"
  done
fi
