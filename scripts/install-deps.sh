#!/usr/bin/env bash
# Installs the Debian packages sluice needs to build and test, and only those
# that are missing, so running it twice is cheap. Safe without a terminal
# (CI=true, no stdin). Extra package names given as arguments are installed
# the same way (tests/fuzz/run.sh passes clang and its runtime libraries).
# Then the Python packages (scripts/install-python-deps.sh: DuckDB in .venv).
# The adya history checker, which only the tests use, is built by
# scripts/install-adya.sh (`make test` runs it; `make demo` does not).
#   scripts/install-deps.sh [package ...]
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config   # build
  libgtest-dev                            # tests
  libfabric-dev                           # the ofi transport (tcp, verbs, efa, shm providers)
  librdkafka-dev                          # sluice-stream's Kafka sources and sinks
  libcli11-dev nlohmann-json3-dev         # the sluice tool: CLI parsing, JSON output
  iproute2 procps python3 python3-venv    # tests and scripts
  gdb                                     # stacks of a hung job (sluice run --stacks-on-timeout)
  "$@"                                    # what the caller needs besides
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  "$(dirname "$0")/install-python-deps.sh"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# An update first: a fresh machine's package lists may be empty or stale.
$sudo apt-get update -q </dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
"$(dirname "$0")/install-python-deps.sh"
