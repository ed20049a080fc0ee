#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a fresh seed corpus and
# prints what it did: executions and coverage (libFuzzer's `cov:` figure).
#   fuzz_one.sh <fuzzer> <seed generator> <work dir> <seconds>
# Exit status: 0 if no input crashed it; otherwise libFuzzer's, with the
# crashing input saved in <work dir>/artifacts (reproduce: <fuzzer> <file>).
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
name=$(basename "$fuzzer")
rm -rf "$work/seeds"
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
"$seeds" "$work/seeds"
echo "$name: $(ls "$work/seeds" | wc -l) seed inputs, running for ${seconds} s"
log="$work/fuzz.log"
status=0
# New inputs go to corpus/ (kept between runs), seeds/ is read only.
"$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  "$work/corpus" "$work/seeds" >"$log" 2>&1 || status=$?
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
echo "$name: ${execs:-?} executions, cov: ${cov:-?} ft: ${ft:-?} (last line: ${last:-none})"
if [ "$status" -ne 0 ]; then
  echo "$name: FAILED (status $status); libFuzzer's report:" >&2
  grep -v -E '^#[0-9]+' "$log" | tail -n 60 >&2
  ls "$work/artifacts" >&2
fi
exit "$status"
