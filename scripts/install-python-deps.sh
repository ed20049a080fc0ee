#!/usr/bin/env bash
# Creates the project's Python environment (.venv at the top of the source
# tree, ignored by git) and installs scripts/requirements.txt into it, only
# when something is missing, so running it twice is cheap. Tests find the
# interpreter at .venv/bin/python (CMake passes it as SLUICE_PYTHON).
#   scripts/install-python-deps.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
req="$root/scripts/requirements.txt"
stamp="$venv/.requirements.txt"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  echo "install-python-deps: $venv up to date"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "install-python-deps: creating $venv"
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" </dev/null
cp "$req" "$stamp"
echo "install-python-deps: installed $(grep -cv '^\s*#' "$req") package(s) into $venv"
