#!/usr/bin/env bash
# Installs, from Debian's packages, the peers bench/peers/run can compare
# sluice with, and only those that are missing: UCX (ucx_perftest), Open MPI
# (mpirun and mpi.h for bench/peers/mpi_peer.cc), ZeroMQ (libzmq for
# bench/peers/zmq_peer.cc), matplotlib (bench/plot). Never run by `make test`;
# sluice builds and tests without any of them.
#
# Debian 12 packages neither libfabric's fabtests nor the OSU micro-benchmarks;
# bench/peers/run says so in its report and skips them.
#
# Usage: bench/peers/install.sh   (root, or a user with sudo)
set -euo pipefail

packages=(
  ucx-utils                    # ucx_perftest
  openmpi-bin libopenmpi-dev   # mpirun, mpicxx / mpi.h
  libzmq3-dev                  # libzmq + zmq.h
  python3-matplotlib           # bench/plot
  pkg-config
)

# Packages dpkg does not list as installed ("ii").
mapfile -t missing < <(for p in "${packages[@]}"; do
  [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || echo "$p"
done)
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "bench/peers/install.sh: all ${#packages[@]} packages present"
  exit 0
fi
echo "bench/peers/install.sh: installing ${missing[*]}"
run=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "bench/peers/install.sh: need root or sudo for ${missing[*]}" >&2; exit 1; }
  run=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -q </dev/null
"${run[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
echo "bench/peers/install.sh: done; re-run cmake so that bench/CMakeLists.txt finds MPI and libzmq"
