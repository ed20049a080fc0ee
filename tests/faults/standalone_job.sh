#!/usr/bin/env bash
# Runs one fault-worker job of 4 ranks without a launcher, as a multi-host
# job would run: a standalone `sluice registry` and four ranks started with
# the bootstrap environment. Nothing stops the ranks but themselves. The
# victim (rank 2) is resumed with SIGCONT after the others ended, and gets
# 10 s to notice on its own that the job went on without it; then it is
# killed. Each line a rank prints is prefixed "[rank] ".
#   standalone_job.sh SLUICE_BIN WORKER args...
set -u
sluice=$1 worker=$2
shift 2
out=$(mktemp)
SLUICE_SECRET=standalone-test "$sluice" registry --bind 127.0.0.1:0 --world 4 >"$out" 2>&1 &
registry=$!
for _ in $(seq 200); do grep -q '^SLUICE_REGISTRY=' "$out" && break; sleep 0.05; done
addr=$(sed -n 's/^SLUICE_REGISTRY=//p' "$out")
[ -n "$addr" ] || { echo "FAILED: the registry did not start"; cat "$out"; kill "$registry"; exit 1; }
declare -a runs
for r in 0 1 2 3; do
  (SLUICE_RANK=$r SLUICE_WORLD_SIZE=4 SLUICE_REGISTRY=$addr SLUICE_SECRET=standalone-test \
    "$worker" "$@" 2>&1 | sed -u "s/^/[$r] /") &
  runs[$r]=$!
done
wait "${runs[0]}" "${runs[1]}" "${runs[3]}"
echo "survivors ended"
pkill -CONT -P "${runs[2]}" 2>/dev/null
for _ in $(seq 100); do kill -0 "${runs[2]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${runs[2]}" 2>/dev/null; then
  echo "victim still running 10 s after SIGCONT: killed"
  pkill -KILL -P "${runs[2]}" 2>/dev/null
fi
wait "${runs[2]}" 2>/dev/null
kill "$registry" 2>/dev/null
wait "$registry" 2>/dev/null
rm -f "$out"
