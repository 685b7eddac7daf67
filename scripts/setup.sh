#!/usr/bin/env bash
# Installs everything commx needs on a fresh Debian machine (idempotent; run as root for apt).
# Debian packages come from scripts/deps/*.apt, Python packages from scripts/deps/*.pip.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
list() { local f; for f in "$@"; do sed 's/#.*//' "$f"; done | xargs -r echo; }

apt_pkgs=$(list scripts/deps/*.apt)
missing=""
for p in $apt_pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

if [ "${COMMX_SKIP_PIP:-0}" != 1 ]; then
  pip_reqs=$(list scripts/deps/*.pip)
  if [ -n "$pip_reqs" ]; then
    py=${PYTHON:-python3}
    need=0
    for r in $pip_reqs; do
      name=${r%%[<>=]*}
      $py -c "import importlib.metadata as m; m.version('$name')" 2>/dev/null || need=1
    done
    if [ $need = 1 ]; then
      echo "setup: installing Python packages: $pip_reqs"
      extra=""
      [ -f scripts/deps/pip-index.txt ] && extra=$(cat scripts/deps/pip-index.txt)
      $py -m pip install -q $extra $pip_reqs
    fi
  fi
fi
echo "setup: done"
