#!/usr/bin/env bash
# Small-message cpu-backend latency of several source trees side by side: builds commx-bench in
# each (CUDA off) and runs tools/latency/compare_builds.py per op on 2 local ranks.
# usage: scripts/cpu_latency.sh OUT_DIR NAME=SRC_DIR [NAME=SRC_DIR ...]
#   env: REPS (default 31), OPS (default "broadcast all_gather alltoall all_reduce"), NP (2)
set -euo pipefail
out=$1; shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
builds=()
for spec in "$@"; do
  name=${spec%%=*}; src=$(cd "${spec#*=}" && pwd)
  { cmake -G Ninja -S "$src" -B "$src/build-latency" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCOMMX_WITH_CUDA=OFF && ninja -C "$src/build-latency" commx-bench; } > "$out/build_$name.log" 2>&1
  builds+=("$name=$src/build-latency/bin/commx-bench")
done
for op in ${OPS:-broadcast all_gather alltoall all_reduce}; do
  python3 "$here/tools/latency/compare_builds.py" --json "$out/$op.json" "${REPS:-31}" "${builds[@]}" -- \
    "$op" --np "${NP:-2}" -b 8 -e 32K -f 8 --backend cpu -n 500 -w 50 | tee "$out/$op.txt"
done
