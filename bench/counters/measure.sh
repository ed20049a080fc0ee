#!/bin/sh
# What the per-endpoint counters cost the data path, in instructions: runs
# sluice-counters-cost under callgrind (instructions of its push/consume loop
# only) in the build with counters (build/) and in one without
# (build-nocounters/, -DSLUICE_COUNTERS=OFF), in Bandwidth mode (8 KiB
# segments: counters touched once per 512 records) and in Latency mode (a
# segment per record: the worst case), and prints instructions per record
# and the ratio. Instruction counts do not depend on the machine's load, so
# this is a measurement a busy 2-core machine can make.
#
#   bench/counters/measure.sh [RECORDS]      (default 200000; needs valgrind)
set -eu
records=${1:-200000}
here=$(cd "$(dirname "$0")/../.." && pwd)
command -v valgrind >/dev/null || { echo "measure.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
for dir in build build-nocounters; do
  if [ ! -x "$here/$dir/bin/sluice-counters-cost" ]; then
    flags=""
    [ "$dir" = build-nocounters ] && flags="-DSLUICE_COUNTERS=OFF"
    cmake -S "$here" -B "$here/$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release $flags >/dev/null
    cmake --build "$here/$dir" --target sluice_tool sluice-counters-cost >/dev/null
  fi
done
instructions() {  # build-dir mode-flag -> instructions in run_loop
  out=$(mktemp)
  "$here/$1/bin/sluice" run -n 1 -- valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect='*run_loop*' "$here/$1/bin/sluice-counters-cost" --records "$records" $2 \
    >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
  rm -f "$out"
}
printf '%-10s %16s %16s %12s %12s %8s\n' mode "with counters" "without" "per record" "without" ratio
for mode in bandwidth latency; do
  flag=""
  [ "$mode" = latency ] && flag="--latency"
  with=$(instructions build "$flag")
  without=$(instructions build-nocounters "$flag")
  awk -v m="$mode" -v a="$with" -v b="$without" -v n="$records" \
    'BEGIN { printf "%-10s %16d %16d %12.2f %12.2f %8.4f\n", m, a, b, a / n, b / n, a / b }'
done
