#!/usr/bin/env bash
# Usage (GPU machine with 2+ GPUs, repository root): bash bench/experiments/gpu_fp8_buffer_sweep.sh BUILD
# The FP8 all_reduce (2 ranks, bf16 and f32, eager, 16 / 64 / 256 MiB) against the buffer half
# that sets its round size (COMMX_CUDA_BUFFER_BYTES; the default 31M first and again last, so the
# spread of the two is the noise). BUILD: a build made elsewhere for this CUDA (bin/ and lib/).
# SWEEP_BUFFERS lists the halves (default "31M 16M 24M 42M 48M 64M 31M"). Files in $OUT:
# sweep.md / sweep.json (time per half, size and dtype), machine.txt (every command),
# logs.tar.gz. Every run is bounded.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. scripts/gpu_env.sh
OUT=${OUT:-$(results_dir)/$(date -u +%H%M)_fp8_buffer_sweep}
mkdir -p "$OUT"
LOGS=$(mktemp -d)
use_build_elsewhere "${1:?usage: gpu_fp8_buffer_sweep.sh BUILD}"
rc=0
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1
ARGS="--ranks 2 --backend cuda+fp8 --ops all_reduce --dtypes bf16,f32 --modes eager --min 16M --max 256M --factor 4 --reps 3"
echo "each: COMMX_CUDA_BUFFER_BYTES=<half> commx-bench $ARGS" >> "$OUT/machine.txt"
i=0
for half in ${SWEEP_BUFFERS:-31M 16M 24M 42M 48M 64M 31M}; do
  i=$((i + 1))
  COMMX_CUDA_BUFFER_BYTES=$half timeout 90 "$BUILT/bin/commx-bench" $ARGS \
    --json "$LOGS/$(printf %02d $i)_$half.json" --md /dev/null > "$LOGS/$(printf %02d $i)_$half.log" 2>&1 ||
    { rc=1; echo "half $half failed"; }
done
python3 - "$OUT" "$LOGS" <<'PY' || rc=1
import glob, json, os, sys
out, logs = sys.argv[1], sys.argv[2]
runs = []
for f in sorted(glob.glob(os.path.join(logs, "*.json"))):
    rows = {(r["dtype"], r["bytes"]): r["time_us"] for r in json.load(open(f)).get("rows", [])}
    runs.append((os.path.basename(f)[:-5].split("_", 1)[1], rows))
keys = sorted({k for _, rows in runs for k in rows})
json.dump([{"half": h, "rows": [{"dtype": d, "bytes": b, "time_us": t} for (d, b), t in rows.items()]}
           for h, rows in runs], open(os.path.join(out, "sweep.json"), "w"), indent=1)
with open(os.path.join(out, "sweep.md"), "w") as md:
    md.write("| half | " + " | ".join(f"{d} {b >> 20} MiB" for d, b in keys) + " |\n")
    md.write("|---|" + "---:|" * len(keys) + "\n")
    for h, rows in runs:
        md.write(f"| {h} | " + " | ".join(f"{rows[k]:.1f}" if k in rows else "" for k in keys) + " |\n")
print(open(os.path.join(out, "sweep.md")).read())
PY
tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
exit $rc
