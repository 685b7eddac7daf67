#!/usr/bin/env bash
# Usage (GPU machine, repository root): bash bench/experiments/gpu_fingerprint_variants.sh BASE_DIR
# Where the cuda call checks' latency goes: builds BASE_DIR's tree (the "before") and this tree
# several times at once, each with compile-time switches (VARIANTS: "name=flags ..."; "new" is
# this tree as is, with its GPU tests), runs the call-check tests, then commx-bench's small-message
# sweeps on every build in turn, ROUNDS times, and compares each build with the base
# (latency_ab.py: ab_<name>.md/json). Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.."
BASE=$(cd "${1:?usage: gpu_fingerprint_variants.sh BASE_DIR}" && pwd)
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_cuda_fingerprint_variants}
mkdir -p "$OUT"
WORK=$(mktemp -d)
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; nvcc --version | tail -1; } > "$OUT/machine.txt" 2>&1
VARIANTS=${VARIANTS:-"noentry=-DCOMMX_AB_NO_CALL_ENTRY nochecks=-DCOMMX_AB_NO_CALL_ENTRY;-DCOMMX_AB_NO_WAIT_CHECKS nohash=-DCOMMX_AB_NO_CALL_ENTRY;-DCOMMX_AB_NO_WAIT_CHECKS;-DCOMMX_AB_NO_HASH"}
TESTS=${TESTS:-cuda_call_check_test cuda_backend_test cuda_all_to_all_v_dynamic_test}
build() {  # DIR SRC LOG CUDA_FLAGS TARGET...
  local dir=$1 src=$2 log=$3 flags=$4
  shift 4
  timeout "${BUILD_S:-300}" bash -c "cd '$src' && cmake -G Ninja -S . -B '$dir' -DCMAKE_BUILD_TYPE=Release \
    -DCOMMX_WITH_CUDA=ON ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} \
    -DCMAKE_CUDA_FLAGS='${flags//;/ }' > '$log' 2>&1 && ninja -C '$dir' -j$(nproc) $*  >> '$log' 2>&1" ||
    { tail -30 "$log" > "$OUT/build_failed_$(basename "$dir").log"; return 1; }
}
pids=()
build "$BASE/build-ab" "$BASE" "$WORK/base.log" "" commx_backend_cuda commx-bench & pids+=($!)
build "$PWD/build-ab" "$PWD" "$WORK/new.log" "" commx_backend_cuda commx_backend_nccl commx-bench $TESTS & pids+=($!)
names=(base new)
for v in $VARIANTS; do
  build "$PWD/build-${v%%=*}" "$PWD" "$WORK/${v%%=*}.log" "${v#*=}" commx_backend_cuda commx-bench & pids+=($!)
  names+=("${v%%=*}")
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo "builds done (rc $rc): $(date -u +%T)"
dir_of() { case $1 in base) echo "$BASE/build-ab" ;; new) echo build-ab ;; *) echo "build-$1" ;; esac; }

: > "$OUT/tests.log"
for t in $TESTS; do
  echo "=== $t" >> "$OUT/tests.log"
  timeout "${TEST_S:-120}" build-ab/bin/$t >> "$OUT/tests.log" 2>&1 || { rc=1; echo "=== $t FAILED" >> "$OUT/tests.log"; }
done
grep -E "^=== |^\[ +(OK|FAILED|PASSED) +\]" "$OUT/tests.log" | tail -40

NR=$(nvidia-smi -L | wc -l); [ "$NR" -gt 2 ] && NR=2
ARGS="--ranks $NR --backend cuda --dtypes bf16 --ops all_reduce,all_gather --modes graph,eager --min 8 --max 64K --factor 4 --reps ${REPS:-9}"
echo "command: commx-bench $ARGS" >> "$OUT/machine.txt"
declare -A runs
for r in $(seq 1 "${ROUNDS:-3}"); do
  for n in "${names[@]}"; do
    d=$(dir_of "$n"); [ -x "$d/bin/commx-bench" ] || continue
    timeout 40 "$d/bin/commx-bench" $ARGS --json "$WORK/${n}_$r.json" --md /dev/null > "$WORK/${n}_$r.log" 2>&1 ||
      { rc=1; echo "bench $n round $r failed"; }
    runs[$n]+=" $WORK/${n}_$r.json"
  done
  for n in "${names[@]}"; do
    [ "$n" = base ] && continue
    specs=(); for f in ${runs[base]:-}; do specs+=("base=$f"); done
    for f in ${runs[$n]:-}; do specs+=("new=$f"); done
    python3 bench/experiments/latency_ab.py --md "$OUT/ab_$n.md" --json "$OUT/ab_$n.json" "${specs[@]}" > /dev/null 2>&1
  done
done
for n in "${names[@]}"; do [ -f "$OUT/ab_$n.md" ] && { echo "== $n vs base"; grep "^- " "$OUT/ab_$n.md"; }; done
(cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
exit $rc
