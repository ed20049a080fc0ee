#!/usr/bin/env bash
# Builds kv-porcupine (apps/kv/porcupine: our small Go program around the
# porcupine linearizability checker, a Go module at the version go.sum pins)
# into .tools/kv-porcupine at the top of the source tree (ignored by git).
# Cheap when the built one matches the sources. The apps/kv tests check the
# histories of `sluice-kv run --history` with it. Uses go from PATH or
# /usr/local/go/bin; without go it says so and exits 0 (the kv history tests
# then fail, naming the missing checker and this script).
#   scripts/install-porcupine.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/apps/kv/porcupine"
dest="$root/.tools/kv-porcupine"
bin="$dest/kv-porcupine"
stamp="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"

if [ -x "$bin" ] && [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "install-porcupine: $bin present"
  exit 0
fi
go="$(command -v go || true)"
if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
if [ -z "$go" ]; then
  echo "install-porcupine: go not found (install Go from https://go.dev/dl to build the kv-porcupine checker)" >&2
  exit 0
fi
echo "install-porcupine: building kv-porcupine into $dest"
mkdir -p "$dest"
(cd "$src" && GOFLAGS=-mod=readonly "$go" build -o "$bin" .) </dev/null
echo "$stamp" > "$dest/stamp"
echo "install-porcupine: installed $bin"
