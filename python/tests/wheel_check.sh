#!/usr/bin/env bash
# `pip install .` of the Python package into a fresh venv (the wheel built
# by scikit-build-core from pyproject.toml, in pip's isolated build env with
# nanobind and scikit-build-core from PyPI), then 2-rank shuffle jobs with
# the installed package alone (no PYTHONPATH) under the launcher the wheel
# carries: its `sluice` command and `python -m sluice`, with nothing of the
# build tree on PATH.
#   python/tests/wheel_check.sh PYTHON SOURCE_DIR
set -euo pipefail
python=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
CMAKE_BUILD_PARALLEL_LEVEL=2 "$work/venv/bin/pip" install -q --disable-pip-version-check \
  "$src" </dev/null
cd "$work"
"$work/venv/bin/python" -c 'import sluice, sys; print("imported", sluice.__file__)'
launcher=$("$work/venv/bin/python" -c 'import sluice.__main__ as m; print(m.find_tool())')
case "$launcher" in
  "$work"/venv/*/sluice/bin/sluice) echo "launcher in the wheel: $launcher" ;;
  *) echo "wheel_check: the launcher found is $launcher, not the wheel's"; exit 1 ;;
esac
env -u PYTHONPATH PATH="$work/venv/bin:/usr/bin:/bin" sluice run -n 2 -- python \
  "$src/python/tests/programs/shuffle.py" --records 20000
env -u PYTHONPATH PATH="/usr/bin:/bin" "$work/venv/bin/python" -m sluice run -n 2 -- \
  "$work/venv/bin/python" "$src/python/tests/programs/shuffle.py" --records 20000
echo "wheel_check: installed and ran"
