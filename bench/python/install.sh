#!/usr/bin/env bash
# Installs what bench/python/shuffle_peers.py runs: Open MPI from Debian
# (bench/peers/install.sh), then mpi4py (built against it), dask and
# distributed and ray[data] from PyPI into the project's .venv (made by
# scripts/install-python-deps.sh). Never run by make test.
#   bench/python/install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/bench/peers/install.sh"
[ -x "$root/.venv/bin/python" ] || "$root/scripts/install-python-deps.sh"
# mpi4py from source, so that it links Debian's libmpi (the binary wheels
# bring an MPI ABI layer of their own).
MPICC=mpicc "$root/.venv/bin/pip" install -q --no-binary mpi4py -r "$root/bench/python/requirements.txt"
"$root/.venv/bin/python" -c "import mpi4py, dask, distributed, ray; print('bench/python/install.sh: mpi4py', mpi4py.__version__, 'dask', dask.__version__, 'distributed', distributed.__version__, 'ray', ray.__version__)"
