#!/usr/bin/env bash
# Installs the Python client the way users do — pip, no package index —
# into a throwaway venv, and checks the installed copy from outside the
# source tree (installed_check.py): from the directory, from the sdist, and
# editable; then uninstalls (which needs a correct RECORD).
#
#   PYVENV=python3 clients/python/tests/install_test.sh     (make test-py)
#
# PYVENV is the interpreter that creates the venv. When it cannot make one
# with pip (Debian's python3 without python3-venv), Debian's python3-venv
# is installed and /usr/bin/python3 is used.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYVENV:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1

venv_ok() { "$1/bin/python" -m pip --version >/dev/null 2>&1; }

v="$tmp/venv"
if ! { "$py" -m venv "$v" >/dev/null 2>&1 && venv_ok "$v"; }; then
  rm -rf "$v"
  py=/usr/bin/python3
  if ! { "$py" -m venv "$v" >/dev/null 2>&1 && venv_ok "$v"; }; then
    rm -rf "$v"
    echo "install_test: no venv with pip available; installing Debian's python3-venv" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    "$py" -m venv "$v"
  fi
fi
vpy="$v/bin/python"
echo "install_test: venv from $("$vpy" -c 'import sys; print(sys.version.split()[0])') ($py), $("$vpy" -m pip --version | cut -d' ' -f1-2)"

check() { (cd "$tmp" && "$vpy" -I "$src/tests/installed_check.py" --expect "$1" --source "$src"); }
gone() {
  "$vpy" -m pip uninstall -y -q laggard
  if (cd "$tmp" && "$vpy" -I -c "import laggard" 2>/dev/null); then
    echo "install_test: FAIL: laggard still importable after pip uninstall" >&2
    exit 1
  fi
  if ls "$v"/lib/python*/site-packages | grep -qi laggard; then
    echo "install_test: FAIL: pip uninstall left files behind:" >&2
    ls "$v"/lib/python*/site-packages | grep -i laggard >&2
    exit 1
  fi
}

"$vpy" -m pip install -q --no-index "$src"
check site
gone

sdist="$(cd "$tmp" && "$vpy" -I -c 'import sys; sys.path.insert(0, sys.argv[1]); import laggard_build as b; print(b.build_sdist(sys.argv[2]))' "$src/backend" "$tmp")"
"$vpy" -m pip install -q --no-index "$tmp/$sdist"
check site
gone

"$vpy" -m pip install -q --no-index -e "$src"
check editable
gone
echo "install_test: OK"
