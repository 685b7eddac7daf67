#!/usr/bin/env bash
# The exact sequence of the 23:40 call (run from the checkout root with OUT set; the
# same benchmarks as scripts/gpu_lowp.sh, reordered so the all_reduce tables come first within the
# call's time limit, plus 1 GiB, COMMX_CUDA_LOWP_HALVES=0 and COMMX_CUDA_LOWP_BLOCKS_PER_SM=2).
# One GPU call: build + FP8 tests (both slot schemes), then the benchmarks in priority order.
set -uo pipefail
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
. scripts/gpu_env.sh
BUILD=build-gpu
{ date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.sm --format=csv; nvidia-smi topo -m; nvcc --version | tail -1; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"; git -C .. log -1 --oneline 2>/dev/null; } > $R/machine.txt 2>&1
gpu_build $BUILD $R/build.log commx_backend_cuda commx_backend_nccl commx-bench lowp_gpu_codec_test lowp_cuda_test || { el build failed; exit 1; }
el build ok
for mode in 1 0; do
  for t in lowp_gpu_codec_test lowp_cuda_test; do
    [ $mode = 0 ] && [ $t = lowp_gpu_codec_test ] && continue
    COMMX_CUDA_LOWP_HALVES=$mode timeout 120 $BUILD/bin/$t > $R/tests_halves$mode.$t.log 2>&1; echo "$t halves=$mode rc=$?"
    grep -E "^\[( +OK|  FAILED|  PASSED) |Failure" $R/tests_halves$mode.$t.log | head -12
  done
done
el tests done
B=$BUILD/bin/commx-bench
bench() { local name=$1; shift; echo "command: ${ENVS:-} commx-bench --ranks 2 $*" >> $R/machine.txt; env ${ENVS:-} timeout 120 $B --ranks 2 "$@" > $R/$name.log 2>&1; echo "$name rc=$?"; grep -E "us .*GB/s" $R/$name.log | awk -v n=$name '{printf "%s %s %s %s %s %s us\n", n, $1, $2, $3, $5, $6}'; }
C="--modes eager --factor 4 --reps 3"
bench allreduce --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 --dtypes bf16 --ops all_reduce --min 16M --max 256M --error 16M $C --json $R/allreduce.json --md $R/allreduce.md
el ar
bench f32 --backend nccl,cuda,cuda+fp8 --dtypes f32 --ops all_reduce --min 64M --max 256M --error 64M $C --json $R/f32.json --md $R/f32.md
el f32
ENVS=COMMX_CUDA_LOWP_HALVES=0 bench halves0 --backend cuda+fp8,cuda+fp8x2 --dtypes bf16 --ops all_reduce --min 16M --max 256M $C --json $R/halves0.json --md /dev/null
el h0
bench coll --backend nccl,cuda,cuda+fp8 --dtypes bf16 --ops reduce_scatter,all_gather,all_to_all --min 16M --max 256M $C --json $R/coll.json --md $R/coll.md
el coll
bench ar1g --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 --dtypes bf16 --ops all_reduce --min 1G --max 1G $C --json $R/allreduce_1g.json --md /dev/null
el 1g
ENVS=COMMX_CUDA_LOWP_BLOCKS_PER_SM=2 bench occupancy2 --backend cuda+fp8,cuda+fp8x2 --dtypes bf16 --ops all_reduce --min 16M --max 256M $C --json $R/occupancy2.json --md /dev/null
el occ
ENVS=COMMX_CUDA_LOWP_KERNEL=generic bench generic --backend cuda+fp8,cuda+fp8x2 --dtypes bf16 --ops all_reduce --min 16M --max 256M $C --json $R/generic.json --md /dev/null
el generic
