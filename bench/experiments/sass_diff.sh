#!/usr/bin/env bash
# Usage: bash bench/experiments/sass_diff.sh BASE_TREE NEW_TREE FILE...
# Whether a change to the cuda kernels' sources left their machine code as it was, without a GPU:
# compiles each FILE (a .cu path relative to the tree roots; a file one tree lacks is skipped
# there, so kernels may move between files) in both trees with the flags below, then compares
# every device function's SASS and ptxas register/stack/spill figures by demangled name
# (sass_functions.py). Exit 0 when every function is identical and none is in one tree only.
# NVCC_FLAGS: extra nvcc flags for every file (e.g. --fmad=false for the lowp kernels).
# NVCC_STD: the language standard (default c++20; the CMake build compiles CUDA as c++17).
# SASS_DIFF_WORK: where objects, logs and the per-function SASS go (default: a temp dir, kept).
# CUOBJDUMP: the cuobjdump to use (default: the one on PATH, else the one the triton package ships).
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,11p "$0"; exit 2; }
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${CUOBJDUMP:-}" ]; then
  CUOBJDUMP=$(command -v cuobjdump ||
    python3 -c 'import os, triton; print(os.path.dirname(triton.__file__) + "/backends/nvidia/bin/cuobjdump")' 2>/dev/null) ||
    true
  [ -x "$CUOBJDUMP" ] || { echo "no cuobjdump: set CUOBJDUMP" >&2; exit 2; }
  export CUOBJDUMP
fi
work=${SASS_DIFF_WORK:-$(mktemp -d /tmp/sass_diff.XXXXXX)}
mkdir -p "$work"
flags=(-std=${NVCC_STD:-c++20} -O3 -arch=sm_90 --expt-relaxed-constexpr -DNDEBUG -Iinclude -Isrc -Isrc/backends
       -I/usr/local/cuda/include -Xptxas -v ${NVCC_FLAGS:-})

# compile TREE SIDE: every FILE the tree has, into $work/SIDE; lists OBJ:LOG pairs in SIDE/objs.
compile() {
  local tree=$1 side=$2 f obj
  mkdir -p "$work/$side"
  : > "$work/$side/objs"
  for f in "${files[@]}"; do
    [ -f "$tree/$f" ] || continue
    obj=$work/$side/$(echo "$f" | tr / _).o
    (cd "$tree" && nvcc "${flags[@]}" -c "$f" -o "$obj" 2> "$obj.ptxas.log") ||
      { echo "nvcc failed on $tree/$f:" >&2; tail -20 "$obj.ptxas.log" >&2; return 1; }
    echo "$obj:$obj.ptxas.log" >> "$work/$side/objs"
  done
}

files=("$@")
compile "$base" base & base_pid=$!
compile "$new" new & new_pid=$!
failed=0
wait $base_pid || failed=1
wait $new_pid || failed=1
[ $failed = 0 ] || exit 1
for side in base new; do
  # shellcheck disable=SC2046  # one OBJ:LOG word per compiled file
  python3 "$here/sass_functions.py" manifest "$work/$side" $(cat "$work/$side/objs")
done
echo "base: $base ($(wc -l < "$work/base/objs") files)  new: $new ($(wc -l < "$work/new/objs") files)  work: $work"
python3 "$here/sass_functions.py" compare "$work/base" "$work/new"
