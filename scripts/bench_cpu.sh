#!/usr/bin/env bash
# The CPU comparison of issue 3 (run by scripts/main_job.sh): commx's cpu backend next to Gloo and
# Open MPI on 2 and 4 local ranks, for all_reduce, all_gather, reduce_scatter, broadcast,
# all_to_all and barrier from 8 B to 32 MiB. Under mpirun when Open MPI is installed (else with
# spawned ranks; mpi is then skipped with a note). Writes npN.{txt,json,svg,md} into BENCH_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
out=${BENCH_OUT:-bench/results/cpu_latest}
for np in ${BENCH_NP:-2 4}; do
  COMMX_BENCH="$BUILD_DIR/bin/commx-bench" tools/bench/compare.sh "$np" "$out"
done
echo "bench_cpu: results in $out (npN.md: tables, npN.svg: plots, npN.json: every row)"
