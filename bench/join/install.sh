#!/usr/bin/env bash
# Installs what the join benchmark's MPI baseline needs (Open MPI), then
# reconfigures a build so that sluice-join-mpi gets built. The demo and the
# tests never need MPI; only bench/join/run.sh does.
#
#   bench/join/install.sh [BUILD_DIR]      (default: build)
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."

if ! command -v mpirun >/dev/null || ! command -v mpicxx >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev
fi
echo "bench/join/install.sh: $(mpirun --version 2>/dev/null | head -1)"
if [ -d "$build" ]; then
  cmake -S . -B "$build" >/dev/null
  cmake --build "$build" --target sluice-join-mpi
fi
