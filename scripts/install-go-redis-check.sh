#!/usr/bin/env bash
# Builds kv-go-redis-check (tests/kv/go_redis: a Go program that checks a
# sluice-kv RESP gateway with go-redis, github.com/redis/go-redis/v9 at the
# version go.sum pins) into .tools/kv-go-redis-check at the top of the source
# tree (ignored by git). Cheap when the built one matches the sources. The
# build takes about 35 CPU-seconds from a clean module cache, so `make test`
# does not run this script; the test that uses the program
# (kv.resp_clients_test.go_redis.*, label slow) skips without it. Uses go
# from PATH or /usr/local/go/bin; without go, or if the build fails, it says
# so and exits 1.
#   scripts/install-go-redis-check.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/tests/kv/go_redis"
dest="$root/.tools/kv-go-redis-check"
bin="$dest/kv-go-redis-check"
stamp="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"

if [ -x "$bin" ] && [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "install-go-redis-check: $bin present"
  exit 0
fi
go="$(command -v go || true)"
if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
if [ -z "$go" ]; then
  echo "install-go-redis-check: go not found (install Go 1.26 or later from https://go.dev/dl to build kv-go-redis-check)" >&2
  exit 1
fi
echo "install-go-redis-check: building kv-go-redis-check into $dest (about 35 CPU-seconds the first time)"
mkdir -p "$dest"
rm -f "$dest/stamp"
if ! (cd "$src" && GOFLAGS=-mod=readonly "$go" build -o "$bin" .) </dev/null; then
  echo "install-go-redis-check: building $src failed (go-redis is fetched through the Go module proxy: is it reachable?)" >&2
  exit 1
fi
echo "$stamp" > "$dest/stamp"
echo "install-go-redis-check: installed $bin"
