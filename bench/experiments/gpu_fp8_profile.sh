#!/usr/bin/env bash
# Usage (GPU machine with 2+ GPUs, repository root): bash bench/experiments/gpu_fp8_profile.sh
# Where the FP8 all_reduce's time goes, on 2 ranks, without changing the code: one build (in
# build-ab, so a machine that ran gpu_redesign_ab.sh finds it done), then
#   fp8.json/.md      the issue table: NCCL bf16/f32, commx bf16/f32, commx FP8 (one- and
#                     two-term), NCCL native FP8; all_reduce 16 MiB - 1 GiB, eager and graph, and
#                     the relative error at 16 MiB
#   variants.json/.md commx FP8 all_reduce at 16-256 MiB (bf16, f32, eager) under settings that
#                     move one cost at a time (the default's times are in fp8.json): the buffer
#                     (42M = the chunk the slots would hold without the unused ones; 256M = one
#                     round), half the blocks of threads (COMMX_CUDA_MAX_BLOCKS_LARGE=66: does the
#                     op scale with the SMs, or with the link?), and FP8 reduce_scatter /
#                     all_gather beside it (the phases of an all_reduce by difference)
#   ncu.log           Nsight Compute on rank 0 only (rank 1 runs unprofiled beside it), one kernel,
#                     metric groups that need one pass each (a replayed pass would wait for a peer
#                     kernel that already ended: it ends at the op timeout and is dropped)
# PROFILE_BUILD=DIR runs a build made elsewhere for this CUDA (bin/: commx-bench, commx-run; lib/)
# instead of building; PROFILE_TABLE=0 skips fp8.json (the table scripts/gpu_lowp.sh also makes);
# NCU_ALL=1 tries every metric group (only the first has completed across two GPUs: the others
# ended at the peer's timeout).
# Every step is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_fp8_profile}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
B=build-ab
rc=0
T0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; nvidia-smi topo -m; uname -r; } > "$OUT/machine.txt" 2>&1
if [ -n "${PROFILE_BUILD:-}" ]; then
  use_build_elsewhere "$PROFILE_BUILD"
  B=$BUILT
else
  gpu_build $B "$LOGS/build.log" commx_backend_cuda commx_backend_nccl commx-bench commx-run || exit 1
fi
echo "build ok $(date -u +%T)"
BENCH=$B/bin/commx-bench

run_bench() {  # NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  echo "$name: commx-bench $*" >> "$OUT/machine.txt"
  timeout "$limit" $BENCH --ranks 2 "$@" > "$LOGS/$name.log" 2>&1 || { rc=1; echo "$name failed"; tail -3 "$LOGS/$name.log"; }
}

[ "${PROFILE_TABLE:-1}" = 1 ] && run_bench fp8 200 --backend nccl,cuda,cuda+fp8,cuda+fp8x2,nccl+fp8 --dtypes bf16,f32 --ops all_reduce \
  --modes eager,graph --min 16M --max 1G --factor 4 --reps 3 --error 16M --json "$OUT/fp8.json" --md "$OUT/fp8.md"
echo "fp8 table $(date -u +%T)"

V="--dtypes bf16,f32 --modes eager --min 16M --max 256M --factor 4 --reps 3"
for v in "BUF42M COMMX_CUDA_BUFFER_BYTES=42M" "BUF256M COMMX_CUDA_BUFFER_BYTES=256M" "BLK66 COMMX_CUDA_MAX_BLOCKS_LARGE=66"; do
  set -- $v
  env "$2" timeout 120 $BENCH --ranks 2 --backend cuda+fp8 --ops all_reduce $V --json "$LOGS/v_$1.json" --md /dev/null \
    > "$LOGS/v_$1.log" 2>&1 || { rc=1; echo "variant $1 failed"; }
  echo "variant $1: $2 commx-bench --ranks 2 --backend cuda+fp8 --ops all_reduce $V" >> "$OUT/machine.txt"
done
run_bench phases 150 --backend cuda+fp8,nccl --ops reduce_scatter,all_gather $V --json "$LOGS/v_phases.json" --md /dev/null
python3 - "$OUT" "$LOGS" <<'EOF' || rc=1
import json, sys, glob, os
out, logs = sys.argv[1], sys.argv[2]
rows = {}
for f in sorted(glob.glob(os.path.join(logs, "v_*.json"))):
    tag = os.path.basename(f)[2:-5]
    for r in json.load(open(f)).get("rows", []):
        key = (r.get("op"), r.get("dtype"), r.get("bytes"))
        rows.setdefault(key, {})[f"{tag}:{r.get('backend')}"] = r.get("time_us")
json.dump({"|".join(map(str, k)): v for k, v in rows.items()}, open(os.path.join(out, "variants.json"), "w"), indent=1)
cols = sorted({c for v in rows.values() for c in v})
with open(os.path.join(out, "variants.md"), "w") as md:
    md.write("| op | dtype | bytes | " + " | ".join(cols) + " |\n|" + "---|" * (3 + len(cols)) + "\n")
    for k in sorted(rows, key=lambda k: (str(k[0]), str(k[1]), k[2] or 0)):
        md.write(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(
            f"{rows[k][c]:.1f}" if isinstance(rows[k].get(c), (int, float)) else "" for c in cols) + " |\n")
print(open(os.path.join(out, "variants.md")).read())
EOF
echo "variants $(date -u +%T)"

# Nsight Compute: rank 0 under ncu, rank 1 plain; all_reduce of 64 MiB.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# gVisor (kernel 4.4.0) gives ncu no counters.
if [ -n "$NCU" ] && [ "$(uname -r)" != 4.4.0 ]; then
  groups=("gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum")
  [ "${NCU_ALL:-0}" = 1 ] && groups+=(
           "sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active" \
           "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_drain_per_warp_active.pct" \
           "smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct" \
           "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct")
  for g in "${groups[@]}"; do
    for dt in ${NCU_DTYPES:-f32 bf16}; do
      [ $(( $(date +%s) - T0 )) -lt 330 ] || break 2
      echo "=== $dt $g" >> "$OUT/ncu.log"
      COMMX_TIMEOUT_SECONDS=15 timeout 60 $B/bin/commx-run -n 2 --timeout 55 -- bash -c \
        "if [ \"\$RANK\" = 0 ]; then exec $NCU --clock-control none --kernel-name regex:lowp_round --launch-skip 6 --launch-count 1 --metrics $g $BENCH --backend cuda+fp8 --dtypes $dt --ops all_reduce --modes eager --min 64M --max 64M --reps 1; else exec $BENCH --backend cuda+fp8 --dtypes $dt --ops all_reduce --modes eager --min 64M --max 64M --reps 1; fi" \
        >> "$OUT/ncu.log" 2>&1
      echo "=== rc $?" >> "$OUT/ncu.log"
    done
  done
  grep -E "^===|passes|__|Error|ERR" "$OUT/ncu.log" | head -80
else
  echo "no ncu, or no counters on this kernel ($(uname -r))" | tee "$OUT/ncu.log"
fi
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
exit $rc
