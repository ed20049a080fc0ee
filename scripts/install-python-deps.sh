#!/usr/bin/env bash
# Creates the project's Python environment (.venv at the top of the source
# tree, ignored by git) and installs scripts/requirements.txt into it, only
# when something is missing, so running it twice is cheap. Tests find the
# interpreter at .venv/bin/python (CMake passes it as SLUICE_PYTHON).
#
# The packages go in without their bytecode (pip's compiling is two thirds
# of the install: 17 s against 6 s here, and the C++ configure waits for
# the install); --bytecode compiles it afterwards, which make test does
# beside the C++ build (test-programs), so the tests' interpreters do not
# compile numpy or pandas at every start (PYTHONDONTWRITEBYTECODE keeps
# Python from caching what it compiles itself). Cheap when already done.
#   scripts/install-python-deps.sh [--bytecode]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
req="$root/scripts/requirements.txt"
stamp="$venv/.requirements.txt"

if [ "${1:-}" = "--bytecode" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    echo "install-python-deps: no $venv (run scripts/install-python-deps.sh first)" >&2
    exit 1
  fi
  "$venv/bin/python" -m compileall -q -j 0 "$venv/lib" >/dev/null
  echo "install-python-deps: bytecode of $venv compiled"
  exit 0
fi

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  echo "install-python-deps: $venv up to date"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "install-python-deps: creating $venv"
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile -r "$req" </dev/null
cp "$req" "$stamp"
echo "install-python-deps: installed $(grep -cv '^\s*#' "$req") package(s) into $venv"
