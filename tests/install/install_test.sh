#!/usr/bin/env bash
# Installs the built sluice into a scratch prefix, builds the README example
# and a query planned on the installed engine (sluice::query) as an outside
# project against it with find_package(sluice), and runs each on 3 ranks
# with the installed `sluice` tool. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d /tmp/sluice-install-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DORDERS_SOURCE="$src/examples/orders.cc" \
  -DQUERY_SOURCE="$src/tests/install/query_example.cc" >/dev/null
cmake --build "$scratch/build" >/dev/null
out=$("$scratch/prefix/bin/sluice" run -n 3 --timeout 120 -- "$scratch/build/orders")
echo "$out"
grep -q "job: totals match" <<<"$out"
test -f "$scratch/prefix/include/sluice/sluice.h"
# The query engine, installed with its headers, runs a plan written outside the tree.
out=$("$scratch/prefix/bin/sluice" run -n 3 --timeout 120 -- "$scratch/build/query_example")
echo "$out"
grep -q "query: 10 groups of 30000 rows: match" <<<"$out"
test -f "$scratch/prefix/include/sluice/query/exchange.h"
echo "install test: ok"
