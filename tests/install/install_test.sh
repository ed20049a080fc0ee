#!/usr/bin/env bash
# Installs the built sluice into a scratch prefix, builds the README example
# as an outside project against it with find_package(sluice), and runs it on
# 3 ranks with the installed `sluice` tool. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d /tmp/sluice-install-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DORDERS_SOURCE="$src/examples/orders.cc" >/dev/null
cmake --build "$scratch/build" >/dev/null
out=$("$scratch/prefix/bin/sluice" run -n 3 --timeout 120 -- "$scratch/build/orders")
echo "$out"
grep -q "job: totals match" <<<"$out"
test -f "$scratch/prefix/include/sluice/sluice.h"
echo "install test: ok"
