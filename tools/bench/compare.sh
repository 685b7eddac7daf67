#!/usr/bin/env bash
# The cpu-vs-peers comparison of issue 3 in one command: runs commx-bench for the main
# collectives on NP local ranks with backends cpu, gloo and mpi, under mpirun when Open MPI is
# installed (so the mpi backend can run), else with --np (mpi is then skipped with a note), and
# writes JSON, SVG and a markdown table into OUTDIR. Layer: tools/bench.
#
# usage: tools/bench/compare.sh [NP] [OUTDIR] [extra commx-bench flags...]
#   OUTDIR defaults to bench/results/<host>_<YYYY-MM-DD> (UTC).
#   env: COMMX_BENCH (path of commx-bench; default build/bin/commx-bench),
#        COLLECTIVES (default all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,barrier),
#        BACKENDS (default cpu,gloo,mpi), SIZES (default "-b 8 -e 64M -f 4")
set -euo pipefail
np="${1:-2}"
out="${2:-bench/results/$(hostname -s)_$(date -u +%F)}"
shift $(( $# > 2 ? 2 : $# ))
bench="${COMMX_BENCH:-build/bin/commx-bench}"
colls="${COLLECTIVES:-all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,barrier}"
backends="${BACKENDS:-cpu,gloo,mpi}"
sizes="${SIZES:--b 8 -e 64M -f 4}"
mkdir -p "$out"
base="$out/np${np}"
# shellcheck disable=SC2086
args=("$colls" $sizes --backend "$backends" --json "$base.json" --svg "$base.svg" --md "$base.md" "$@")
if command -v mpirun >/dev/null 2>&1; then
  root=()
  [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  set -x
  mpirun "${root[@]}" --oversubscribe -np "$np" "$bench" "${args[@]}" | tee "$base.txt"
else
  echo "# note: mpirun not found; spawning local ranks (the mpi backend is skipped)" >&2
  set -x
  "$bench" "${args[@]}" --np "$np" | tee "$base.txt"
fi
