#!/usr/bin/env bash
# Runs one fault-worker job of 4 ranks without a launcher, as a multi-host
# job would run: a standalone `sluice registry` and four ranks started with
# the bootstrap environment. The script injects the fault from outside, as
# `sluice run --faults-after "AT rank 2 record" --kill 2@0` would: when rank
# 2 prints its mark ("AT rank 2 record K"), it sends SIGNAL (KILL or STOP)
# to rank 2's process; no rank is told. Nothing else stops the ranks but
# themselves. A stopped rank 2 is resumed with SIGCONT after the others
# ended (or, with RESUME_AT=TEXT in the environment, as soon as a rank
# printed a line holding TEXT; the script then says whether rank 2's
# process still existed at that line), and gets 10 s to notice on its own that the
# job went on without it; then it is killed. Each line a rank prints is
# prefixed "[rank] ".
#   [RESUME_AT=TEXT] [REGISTRY_ARGS=...] standalone_job.sh SLUICE_BIN WORKER KILL|STOP args...
set -u
sluice=$1 worker=$2 signal=$3
shift 3
out=$(mktemp)
log=$(mktemp)
# shellcheck disable=SC2086 # REGISTRY_ARGS: more options of `sluice registry`, split on spaces
SLUICE_SECRET=standalone-test "$sluice" registry --bind 127.0.0.1:0 --world 4 ${REGISTRY_ARGS:-} \
  >"$out" 2>&1 &
registry=$!
for _ in $(seq 200); do grep -q '^SLUICE_REGISTRY=' "$out" && break; sleep 0.05; done
addr=$(sed -n 's/^SLUICE_REGISTRY=//p' "$out")
[ -n "$addr" ] || { echo "FAILED: the registry did not start"; cat "$out"; kill "$registry"; exit 1; }
declare -a runs
for r in 0 1 2 3; do
  (SLUICE_RANK=$r SLUICE_WORLD_SIZE=4 SLUICE_REGISTRY=$addr SLUICE_SECRET=standalone-test \
    "$worker" "$@" 2>&1 | sed -u "s/^/[$r] /" | tee -a "$log") &
  runs[$r]=$!
done
# Waits up to 60 s for a line of the ranks' log that `grep ARGS` matches;
# false if none came.
await_line() {
  for _ in $(seq 6000); do
    grep -q "$@" "$log" && return 0
    sleep 0.01
  done
  return 1
}
# The fault, from outside: rank 2's worker process (not its sed or tee).
(
  if await_line '^\[2\] AT rank 2 record'; then
    echo "standalone_job.sh: SIG$signal to rank 2 at its mark"
    victim=$(pgrep -P "${runs[2]}" -f "$worker" | head -n 1)
    pkill "-$signal" -P "${runs[2]}" -f "$worker"
    if [ "$signal" = STOP ] && [ -n "${RESUME_AT:-}" ]; then
      await_line -F -- "$RESUME_AT"
      # Field 3 of /proc/PID/stat: T while stopped, Z once it exited (not reaped yet).
      state=$(sed 's/.*) \([A-Za-z]\).*/\1/' "/proc/$victim/stat" 2>/dev/null)
      if [ -z "$state" ] || [ "$state" = Z ]; then
        echo "standalone_job.sh: rank 2's process had exited when a rank printed '$RESUME_AT'"
      else
        echo "standalone_job.sh: rank 2's process still existed (state $state) when a rank printed '$RESUME_AT'"
      fi
      echo "standalone_job.sh: SIGCONT to rank 2 (a rank printed '$RESUME_AT')"
      pkill -CONT -P "${runs[2]}" -f "$worker"
    fi
  else
    echo "standalone_job.sh: rank 2 never printed its mark: no fault injected"
  fi
) &
injector=$!
wait "${runs[0]}" "${runs[1]}" "${runs[3]}"
echo "survivors ended"
pkill -CONT -P "${runs[2]}" 2>/dev/null
for _ in $(seq 100); do kill -0 "${runs[2]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${runs[2]}" 2>/dev/null; then
  echo "victim still running 10 s after SIGCONT: killed"
  pkill -KILL -P "${runs[2]}" 2>/dev/null
fi
wait "${runs[2]}" 2>/dev/null
kill "$injector" 2>/dev/null
wait "$injector" 2>/dev/null
kill "$registry" 2>/dev/null
wait "$registry" 2>/dev/null
rm -f "$out" "$log"
