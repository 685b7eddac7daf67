#!/usr/bin/env bash
# Installs commx from the build folder $1 into a temporary prefix, builds the backend in
# out_of_tree/ against that prefix alone, and runs a comm on it. Layer: tests (plugin).
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/commx-out-of-tree-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
# The installed headers must be the whole public API: nothing may reach into src/.
if grep -rn '#include "\(core\|algorithms\|transport\|store\|lowp\|backends\)/' "$tmp/prefix/include"; then
  echo "an installed header includes a private one"; exit 1
fi
cmake -S "$here/out_of_tree" -B "$tmp/build" -DCOMMX_PREFIX="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$tmp/configure.log"
cmake --build "$tmp/build" -j 2 > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
SCALED_BACKEND_FACTOR=3 COMMX_PLUGIN_DIR="$tmp/build" "$tmp/build/use_scaled_backend"
