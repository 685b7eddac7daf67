# Shared steps of the A/B experiments on a GPU machine (sourced from the repository root of the
# "new" tree, after scripts/gpu_env.sh): both trees built at once, GPU test steps into
# $OUT/tests.log, and rounds of commx-bench alternating base and new, compared by latency_ab.py.
# Uses OUT, WORK (a scratch folder), BASE (the "before" tree; emptied when it fails to build) and
# rc (set to 1 by any failed step).

# ab_machine: the machine, the compilers and both trees' commits into $OUT/machine.txt.
ab_machine() {
  {
    date -u; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
    nvidia-smi topo -m; nvcc --version | tail -1; echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"
    echo "new: ${AB_NEW_BUILD:-$(git rev-parse --short HEAD 2>/dev/null)}" \
      "${BASE:+ base: ${AB_BASE_BUILD:-$(git -C "$BASE" rev-parse --short HEAD 2>/dev/null)}}"
  } > "$OUT/machine.txt" 2>&1
}

# ab_build LIMIT "BASE_TARGETS" TARGETS...: builds BASE/build-ab and ./build-ab at once, each
# within LIMIT seconds. Returns 1 when the new tree fails (its log tail in build_failed.log).
ab_build() {
  local limit=$1 base_targets=$2; shift 2
  (cd "$BASE" && timeout "$limit" bash -c ". '$PWD/scripts/gpu_env.sh' 2>/dev/null;
    cmake -G Ninja -S . -B build-ab -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
    ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > '$WORK/base_build.log' 2>&1 &&
    ninja -C build-ab -j$(nproc) $base_targets >> '$WORK/base_build.log' 2>&1") &
  local base_pid=$!
  timeout "$limit" bash -c ". scripts/gpu_env.sh; gpu_build build-ab '$WORK/build.log' $*" || {
    tail -30 "$WORK/build.log" > "$OUT/build_failed.log"; wait $base_pid; return 1; }
  wait $base_pid || { tail -30 "$WORK/base_build.log" > "$OUT/base_build_failed.log"; BASE=""; }
  echo "build ok${BASE:+ (and $BASE)}: $(date -u +%T)"
}

# test_step NAME LIMIT BINARY ARGS...: one GPU test binary, its output appended to tests.log.
test_step() {
  local name=$1 limit=$2; shift 2
  echo "=== $name" >> "$OUT/tests.log"
  timeout "$limit" "$@" >> "$OUT/tests.log" 2>&1 || { rc=1; echo "=== $name FAILED" >> "$OUT/tests.log"; }
}
ab_summary() { grep -E "^=== |^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|rank [0-9]+ failed" "$OUT/tests.log" | tail -60; }

# ab_side_build SIDE: the build folder of side base or new: AB_BASE_BUILD / AB_NEW_BUILD when set
# (a build made elsewhere for this CUDA: bin/ and lib/, run with its lib/ on LD_LIBRARY_PATH),
# else BASE/build-ab and ./build-ab.
ab_side_build() {
  if [ "$1" = base ]; then echo "${AB_BASE_BUILD:-$BASE/build-ab}"; else echo "${AB_NEW_BUILD:-$PWD/build-ab}"; fi
}
# ab_on SIDE CMD...: CMD with the side's lib/ first on LD_LIBRARY_PATH (a build made elsewhere
# keeps the RPATH of the folder it was built in).
ab_on() {
  local dir; dir=$(ab_side_build "$1"); shift
  LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}

# ab_bench TAG LIMIT ARGS...: commx-bench ARGS on base, then new (WORK/<side>_<TAG>.json), added
# to the runs compared; then the comparison so far into $OUT/ab.md / ab.json (a run cut short
# still leaves it) and every run's JSON and log into $OUT/runs.tar.gz. AB_BASE_BENCH names the base
# tree's benchmark binary when it is not commx-bench (an older tree's commx-gpu-bench, which takes
# the same sweep arguments and writes the same JSON); AB_BASE_ENV ("VAR=value ...") is set for the
# base side only (e.g. an older tree's defaults brought level with the new tree's).
ab_runs=()
ab_bench() {
  local tag=$1 limit=$2 side bin envs; shift 2
  for side in base new; do
    [ $side = base ] && [ -z "$BASE" ] && continue
    bin=$(ab_side_build $side)/bin/commx-bench
    [ $side = base ] && bin=$(ab_side_build base)/bin/${AB_BASE_BENCH:-commx-bench}
    envs=(); [ $side = base ] && read -ra envs <<< "${AB_BASE_ENV:-}"
    ab_on $side env "${envs[@]}" timeout "$limit" "$bin" "$@" --json "$WORK/${side}_$tag.json" --md /dev/null \
      > "$WORK/${side}_$tag.log" 2>&1 || { rc=1; echo "bench $side $tag failed"; }
    ab_runs+=("$side=$WORK/${side}_$tag.json")
  done
  python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${ab_runs[@]}" > /dev/null 2>&1
  (cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
}

# ab_two_builds TAG BASE_BUILD NEW_BUILD: the start of an A/B of two builds made elsewhere for this
# CUDA (bin/ and lib/): OUT (default results_dir/HHMM_TAG) and TOP (the same, kept while
# ab_compare moves OUT), WORK, rc, NG (the GPUs, at most 4), the sides, machine.txt.
ab_two_builds() {
  OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_$1}
  TOP=$OUT
  mkdir -p "$TOP"
  AB_BASE_BUILD=$(cd "$2" && pwd) && AB_NEW_BUILD=$(cd "$3" && pwd) || exit 2
  BASE=$AB_BASE_BUILD
  WORK=$(mktemp -d)
  rc=0
  NG=$(nvidia-smi -L | wc -l)
  [ "$NG" -gt 4 ] && NG=4
  ab_machine
}

# ab_new_tests "BINARY ARGS..."...: each GPU test binary of the new side's build (after
# ab_two_builds) with its arguments, bounded, into $TOP/tests.log; a summary printed.
ab_new_tests() {
  local t
  : > "$TOP/tests.log"
  for t in "$@"; do
    set -- $t
    echo "=== candidate $*" >> "$TOP/tests.log"
    ab_on new timeout 300 "$AB_NEW_BUILD/bin/$1" "${@:2}" >> "$TOP/tests.log" 2>&1 ||
      { rc=1; echo "=== candidate $1 FAILED" >> "$TOP/tests.log"; }
  done
  grep -E "^=== |^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" "$TOP/tests.log"
}

# ab_compare DIR ARGS...: a comparison of its own in DIR (ab.md, ab.json, runs.tar.gz, machine.txt):
# AB_ROUNDS (2) rounds of commx-bench ARGS on both sides, its mean changes printed. Each comparison
# keeps its own runs, so ones at different rank counts are not pooled. Leaves OUT set to DIR.
ab_compare() {
  local dir=$1 r; shift
  OUT=$dir; mkdir -p "$OUT"; ab_runs=()
  echo "sides: base $(ab_side_build base) ${AB_BASE_ENV:-}, new $(ab_side_build new); commx-bench $*" \
    > "$OUT/machine.txt"
  for r in $(seq 1 "${AB_ROUNDS:-2}"); do ab_bench "$(basename "$dir")_r$r" 90 "$@"; done
  echo "== $(basename "$dir")"; ab_report | grep -E "mean change"
}

# ab_report: the final comparison, printed (rc 1 when it fails).
ab_report() {
  python3 bench/experiments/latency_ab.py --md "$OUT/ab.md" --json "$OUT/ab.json" "${ab_runs[@]}" || rc=1
  cat "$OUT/ab.md"
}

# ab_reference LIMIT ARGS...: commx-bench ARGS on the new tree with buffer halves that hold a
# 256 MiB op whole (COMMX_CUDA_BUFFER_BYTES=256M): the one-round reference that ops in rounds
# should approach, into $OUT/buf256M.json / .md. Every run's JSON and log in runs.tar.gz.
ab_reference() {
  local limit=$1; shift
  echo "command (reference): COMMX_CUDA_BUFFER_BYTES=256M commx-bench $*" >> "$OUT/machine.txt"
  ab_on new env COMMX_CUDA_BUFFER_BYTES=256M timeout "$limit" "$(ab_side_build new)/bin/commx-bench" \
    "$@" --json "$OUT/buf256M.json" --md "$OUT/buf256M.md" > "$WORK/buf256M.log" 2>&1 ||
    { rc=1; echo "bench with 256M halves failed"; }
  cat "$OUT/buf256M.md" 2>/dev/null
  (cd "$WORK" && tar czf "$OUT/runs.tar.gz" ./*.json ./*.log) 2>/dev/null
}

# ab_rounds_and_reference LIMIT ARGS...: AB_ROUNDS (default 3) rounds of commx-bench ARGS on both
# trees (ab_bench), the comparison (ab_report), then the one-round reference (ab_reference).
ab_rounds_and_reference() {
  local limit=$1 r; shift
  echo "command: commx-bench $*" >> "$OUT/machine.txt"
  for r in $(seq 1 "${AB_ROUNDS:-3}"); do ab_bench "$r" "$limit" "$@"; done
  ab_report
  ab_reference "$limit" "$@"
}
