# Sourced by the GPU scripts (scripts/gpu_*.sh) from the repository root: the environment every GPU
# run needs. Never NVLink multicast on shared machines; NCCL from COMMX_NCCL_LIBRARY or the
# `nvidia.nccl` wheel of $PY (default python3); GoogleTest from the system or from Debian packages
# carried in .gpudeps/ (apt-get download googletest libgtest-dev), unpacked here: PREFIX_PATH is
# then the CMake prefix to pass.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${COMMX_NCCL_LIBRARY:-}" ]; then
  _nccl_dir=$("${PY:-python3}" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [ -n "$_nccl_dir" ] && [ -f "$_nccl_dir/lib/libnccl.so.2" ]; then
    export COMMX_NCCL_LIBRARY="$_nccl_dir/lib/libnccl.so.2"
  fi
fi
PREFIX_PATH=""
if ! [ -f /usr/include/gtest/gtest.h ] && ls .gpudeps/*.deb >/dev/null 2>&1; then
  mkdir -p .gpudeps/root
  for _deb in .gpudeps/*.deb; do dpkg -x "$_deb" .gpudeps/root; done
  PREFIX_PATH="$PWD/.gpudeps/root/usr"
fi
# The C++ test binaries a GPU run builds and runs: those labelled gpu, the CUDA unit tests that a
# build without CUDA skips, and the conformance suites (one per tests/conformance/*_test.cc, run on
# their cuda and nccl worlds there).
GPU_TEST_BINARIES="lowp_gpu_codec_test lowp_cuda_test cuda_backend_test cuda_call_check_test cuda_all_to_all_v_dynamic_test nccl_all_to_all_v_dynamic_test cuda_hier_test cuda_hier_lowp_test cuda_fd_passing_test cuda_vmm_test cuda_allreduce_select_test cuda_tuning_test cuda_host_layout_test cuda_call_stamp_test cuda_hook_gate_test cuda_init_error_test"
GPU_CONFORMANCE_TESTS=$(cd tests/conformance && ls ./*_test.cc | sed 's|./\(.*\)_test.cc|conformance_\1_test|' | tr '\n' ' ')
# results_dir: where a run's results go by default, bench/results/<machine>_<YYYY-MM-DD> (UTC):
# the machine from COMMX_MACHINE, else "<GPU model>x<GPU count>" (h200x2), else the host name.
results_dir() {
  local m=${COMMX_MACHINE:-} n model
  if [ -z "$m" ]; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($2)}')
    if [ -n "$model" ]; then m=${model}x$n; else m=$(hostname -s); fi
  fi
  echo "$PWD/bench/results/${m}_$(date -u +%F)"
}
# start_results: the run's results folder OUT (default results_dir) with machine.txt (date, host,
# GPUs and their links, nvcc, the NCCL library, torch and its NCCL where importable), and LOGS, a
# scratch folder for the logs.
start_results() {
  OUT=${OUT:-$(results_dir)}
  mkdir -p "$OUT"
  LOGS=$(mktemp -d)
  {
    date -u; hostname; nvidia-smi; nvidia-smi topo -m; nvcc --version | tail -1
    echo "COMMX_NCCL_LIBRARY=${COMMX_NCCL_LIBRARY:-}"
    "${PY:-python3}" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' 2>/dev/null
  } > "$OUT/machine.txt" 2>&1
}
# use_build_elsewhere DIR: a build made elsewhere for this CUDA (bin/ and lib/) runs here: BUILT is
# its absolute path, its lib/ first on LD_LIBRARY_PATH (its binaries keep the RPATH of the folder
# they were built in).
use_build_elsewhere() {
  BUILT=$(cd "$1" && pwd) || exit 1
  export LD_LIBRARY_PATH="$BUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
# gpu_build DIR LOG TARGET...: configures DIR (Release, CUDA on, the carried GoogleTest) and builds
# the targets with every core; output to LOG, its tail printed on failure.
gpu_build() {
  local dir=$1 log=$2
  shift 2
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCOMMX_WITH_CUDA=ON \
    ${PREFIX_PATH:+-DCMAKE_PREFIX_PATH=$PREFIX_PATH} > "$log" 2>&1 &&
    ninja -C "$dir" -j"$(nproc)" "$@" >> "$log" 2>&1 || { tail -30 "$log"; return 1; }
}
