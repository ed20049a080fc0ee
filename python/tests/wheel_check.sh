#!/usr/bin/env bash
# `pip install .` of the Python package into a fresh venv (the wheel built
# by scikit-build-core from pyproject.toml, in pip's isolated build env with
# nanobind and scikit-build-core from PyPI), then a 2-rank shuffle job with
# the installed package alone (no PYTHONPATH) under this build's launcher.
#   python/tests/wheel_check.sh PYTHON SOURCE_DIR BIN_DIR
set -euo pipefail
python=$1
src=$2
bin=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
CMAKE_BUILD_PARALLEL_LEVEL=2 "$work/venv/bin/pip" install -q --disable-pip-version-check \
  "$src" </dev/null
cd "$work"
"$work/venv/bin/python" -c 'import sluice, sys; print("imported", sluice.__file__)'
env -u PYTHONPATH "$bin/sluice" run -n 2 -- "$work/venv/bin/python" \
  "$src/python/tests/programs/shuffle.py" --records 20000
echo "wheel_check: installed and ran"
