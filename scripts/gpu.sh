#!/usr/bin/env bash
# The one GPU entry point: builds commx with the GPU backends and runs the suites named, in order,
# in one run on a GPU machine (`bash scripts/gpu.sh test python bench`).
#   test     the C++ GPU suites (cuda, FP8, hierarchical, VMM, fd passing)
#   python   the Python/torch GPU tests (every binding, CUDA graphs as PyTorch captures them,
#            the "commx" process group, DeviceMesh, FSDP2 against NCCL under torchrun)
#   bench    commx-bench's GPU sweep: cuda vs nccl (+ FP8, symm_mem), lock-step and with a late rank
#   torch    the PyTorch client benchmark (tools/gpu_bench/torch_bench.py), the decode step
#            (tools/gpu_bench/decode_bench.py) and the MoE layer step (tools/gpu_bench/moe_bench.py)
#   moe      the MoE layer step alone
#   scaling  the 2/4/8-GPU scaling comparison (scripts/gpu_scaling.sh)
#   vmm      the GPU suites over VMM peer memory (scripts/gpu_vmm.sh; VMM_STEPS picks steps)
#   hier     the hierarchical (multi-host) path with forced hosts: its tests, FP8 between hosts
#            included, and its benchmark over NVLink and a TCP link (scripts/gpu_hier.sh)
#   lowp     the FP8 collectives: tests, benchmarks against NCCL bf16/f32 and NCCL's native FP8,
#            the same through PyTorch, and the training-quality check (scripts/gpu_lowp.sh)
# Results go to $OUT (default bench/results/<machine>_<date>, results_dir in scripts/gpu_env.sh):
# the summaries (report.md, torch_bench.md, decode.md, moe.md, summary.txt) and everything else
# packed in results.tar.gz (a remote runner may return at most 8 files). Env of the underlying
# scripts applies (GPU_CI_*, GPU_PY_*); TORCH_BENCH_ARGS, DECODE_ARGS and MOE_ARGS add arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
FINAL=${OUT:-$(results_dir)}
mkdir -p "$FINAL"
WORK=$(mktemp -d)
export OUT=$WORK
PY=$(command -v "${PYTHON:-python3}")
rc=0
run() {  # name command...: runs one step, notes its status in summary.txt
  local name=$1; shift
  local t0=$(date +%s)
  "$@"; local r=$?
  echo "$name: rc $r, $(( $(date +%s) - t0 )) s" | tee -a "$WORK/summary.txt"
  [ $r -eq 0 ] || rc=1
}
python_ready() {  # the extension, built once for the benchmarks that import commx
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  [ -f python/commx/_C*.so ] 2>/dev/null || GPU_PY_TESTS=0 bash scripts/gpu_python.sh > /dev/null
  NR=$(nvidia-smi -L | wc -l)
}
moe_step() {
  timeout 300 "$PY" tools/gpu_bench/moe_bench.py --ranks "$NR" --json "$OUT/moe.json" \
    --md "$OUT/moe.md" ${MOE_ARGS:-} > "$OUT/moe.log" 2>&1
}
moe_suite() { python_ready; moe_step; }
torch_suite() {
  python_ready
  local r=0
  timeout 420 "$PY" tools/gpu_bench/torch_bench.py --ranks "$NR" --json "$OUT/torch_bench.json" \
    --md "$OUT/torch_bench.md" ${TORCH_BENCH_ARGS:-} > "$OUT/torch_bench.log" 2>&1 || r=1
  timeout 300 "$PY" tools/gpu_bench/decode_bench.py --ranks "$NR" --json "$OUT/decode.json" \
    --md "$OUT/decode.md" ${DECODE_ARGS:-} > "$OUT/decode.log" 2>&1 || r=1
  moe_step || r=1
  return $r
}
for suite in "${@:-test}"; do
  case $suite in
    test) run test env GPU_CI_BENCH=0 bash scripts/gpu_ci.sh ;;
    python) run python bash scripts/gpu_python.sh ;;
    bench) run bench env GPU_CI_TESTS=0 bash scripts/gpu_ci.sh ;;
    torch) run torch torch_suite ;;
    moe) run moe moe_suite ;;
    scaling) run scaling bash scripts/gpu_scaling.sh ;;
    vmm) run vmm bash scripts/gpu_vmm.sh ;;
    hier) run hier bash scripts/gpu_hier.sh ;;
    lowp) run lowp env LOWP_TRAIN=${LOWP_TRAIN:-1} LOWP_TORCH=${LOWP_TORCH:-1} bash scripts/gpu_lowp.sh ;;
    *) echo "unknown suite '$suite' (test, python, bench, torch, scaling, vmm, hier, lowp, moe)"; rc=2 ;;
  esac
done
for f in report.md torch_bench.md decode.md moe.md summary.txt; do
  [ -f "$WORK/$f" ] && cp "$WORK/$f" "$FINAL/"
done
tar czf "$FINAL/results.tar.gz" -C "$WORK" . 2>/dev/null
exit $rc
