#!/usr/bin/env bash
# Installs what bench/kv/etcd_bench.py needs: Debian's etcd-server, and our
# loader (bench/kv/etcd-loader, Go; etcd's client v3.5 from the Go module
# proxy, pinned in its go.sum), built with go from PATH or /usr/local/go/bin.
# (bench/kv/resp_bench.py installs its redis-server itself.) The demo and the
# tests need none of them.
#
#   bench/kv/install.sh
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v etcd >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends etcd-server
fi
go="$(command -v go || true)"
if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
if [ -z "$go" ]; then
  echo "bench/kv/install.sh: go not found (install Go from https://go.dev/dl)" >&2
  exit 1
fi
(cd etcd-loader && GOFLAGS=-mod=readonly "$go" build -o etcd-loader .)
echo "bench/kv/install.sh: $(etcd --version | head -1); $(pwd)/etcd-loader/etcd-loader"
