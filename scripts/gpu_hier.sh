#!/usr/bin/env bash
# GPU tests and benchmark of the cuda backend's hierarchical (multi-host) path, with forced hosts
# on one machine (needs 2 GPUs and NCCL, else the tests skip): tests/cuda/hier_test.cc and its
# FP8 inter-host step (tests/cuda/hier_lowp_test.cc), then commx-bench with 2 hosts of 1 GPU
# (and 2 hosts of 2 GPUs where 4 are present): nccl (the whole op through NCCL), cuda (the
# inter-host step through NCCL in the dtype), cuda+fp8 / cuda+fp8x2 (the inter-host step in FP8).
# Each layout runs twice: with NCCL between the "hosts" over NVLink as it finds it, and over TCP on
# the loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo), a
# network link as between real hosts: a simulation, every NCCL comm of the run (the nccl rows
# too) crosses the "hosts" that way. Builds in $BUILD_DIR (default build-gpu, the folder of
# scripts/gpu_ci.sh, whose cache it reuses); logs and results go to $OUT (default /tmp):
# gpu_hier.log, hier_bench.md, hier_bench_*.json. HIER_TESTS=0 / HIER_BENCH=0 skip a part;
# HIER_LAYOUTS picks the layouts (default "2x1 2x2", hosts x GPUs per host).
# Usage: bash scripts/gpu_hier.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
. scripts/gpu_env.sh
gpu_build "$BUILD" "$OUT/gpu_hier_build.log" commx_backend_cuda commx_backend_nccl cuda_hier_test \
  cuda_hier_lowp_test commx-bench || exit 1
rc=0
if [ "${HIER_TESTS:-1}" != 0 ]; then
  : > "$OUT/gpu_hier.log"
  for t in cuda_hier_lowp_test cuda_hier_test; do
    echo "=== $t" >> "$OUT/gpu_hier.log"
    timeout "${HIER_TEST_S:-400}" "$BUILD/bin/$t" >> "$OUT/gpu_hier.log" 2>&1 || rc=1
  done
  grep -E "^=== |^\[( +OK|  FAILED|  SKIPPED|  PASSED) |rank [0-9]+ failed|Failure" "$OUT/gpu_hier.log" | head -40
fi
[ "${HIER_BENCH:-1}" = 0 ] && exit $rc
NG=$(nvidia-smi -L | wc -l)
ARGS="--backend nccl,cuda,cuda+fp8,cuda+fp8x2 --dtypes bf16,f32 --ops all_reduce,reduce_scatter --modes eager --min 1M --max ${HIER_MAX:-64M} --factor 4 --reps 3"
: > "$OUT/hier_bench.md"
for layout in ${HIER_LAYOUTS:-2x1 2x2}; do
  hosts=${layout%x*}; per=${layout#*x}
  [ $((hosts * per)) -gt "$NG" ] && continue
  for link in nvlink tcp; do
    env=(COMMX_CUDA_RANKS_PER_HOST=$per)
    [ $link = tcp ] && env+=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)
    name=hier_bench_${layout}_$link
    { echo "## $hosts hosts x $per GPUs, NCCL between hosts over $link"; echo
      echo "\`${env[*]} commx-bench --ranks $((hosts * per)) $ARGS\`"; echo; } >> "$OUT/hier_bench.md"
    env "${env[@]}" timeout "${HIER_BENCH_S:-200}" "$BUILD/bin/commx-bench" --ranks $((hosts * per)) $ARGS \
      --json "$OUT/$name.json" --md "$OUT/$name.md" > "$OUT/$name.log" 2>&1 || rc=1
    cat "$OUT/$name.md" >> "$OUT/hier_bench.md" 2>/dev/null
  done
done
cat "$OUT/hier_bench.md"
exit $rc
