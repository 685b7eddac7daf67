#!/usr/bin/env bash
# The main job of README.md: builds commx and runs the side-by-side benchmark on local ranks
# (CPU ranks here; GPUs when present). Peers that are not installed are skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
bin=$BUILD_DIR/bin
if [ -x "$bin/commx-bench" ]; then
  bash scripts/bench_cpu.sh
else
  "$bin/commx-run" -n 4 -- "$bin/commx_example_allreduce"
fi
