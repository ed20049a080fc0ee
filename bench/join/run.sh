#!/usr/bin/env bash
# The join benchmark: sluice's radix join against its two baselines on the
# same data in the same run, and the fragment-and-replicate join against the
# radix join where one relation is much smaller (DFI paper §6.2.1, Fig. 6, 7).
#
#   bench/join/run.sh [options]
#     --build DIR     build directory with the programs (default: build)
#     --r N --s N     relation sizes for the radix comparison (default 8000000 each)
#     --ranks "P..."  process counts (default "1 2 4")
#     --threads "T..." sluice worker threads per process (default "1"; MPI runs 1 per process)
#     --repeat N      runs per point (default 5); medians, min and max are printed
#     --out FILE      every run's JSON line goes here (default: BUILD_DIR/join-bench.jsonl)
#     --quick         small sizes, 1 repeat: checks that the script works
#   Extra data flags for all programs go after `--` (e.g. -- --dist zipf --theta 1.0).
#
# Every program gets the same data flags, so all join the same tuples; every
# run's checksum must equal the single-thread join's, or the script fails.
# Ratios are by median wall time, and (last two columns) by CPU-seconds of
# the timed part: on a shared machine the second is the steadier one.
# The MPI baseline runs only where sluice-join-mpi was built (bench/join/install.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build r=8000000 s=8000000 ranks="1 2 4" threads="1" repeat=5 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --r) r=$2; shift 2 ;;
    --s) s=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) r=200000 s=200000 ranks="1 2" repeat=1; shift ;;
    --) shift; break ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
extra=("$@")
bin=$build/bin
[ -n "$out" ] || out=$build/join-bench.jsonl
for p in sluice sluice-join sluice-join-single; do
  [ -x "$bin/$p" ] || { echo "run.sh: $bin/$p missing: build first (make build, or --build DIR)" >&2; exit 1; }
done
have_mpi=0
[ -x "$bin/sluice-join-mpi" ] && command -v mpirun >/dev/null && have_mpi=1
: > "$out"

# run LABEL CMD...: runs CMD `repeat` times, appends each JSON line, tagged, to $out.
run() {
  local label=$1; shift
  for _ in $(seq "$repeat"); do
    "$@" | grep '^\(\[0\] \)\?{' | sed -e 's/^\[0\] //' -e "s/^{/{\"label\":\"$label\",/" >> "$out"
  done
}

echo "== environment: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
echo "== data: --r $r --s $s ${extra[*]:-}; $repeat runs per point"
"$bin/sluice-join-single" --r "$r" --s "$s" "${extra[@]}" --method both --repeat "$repeat" --json |
  sed -e 's/^{/{"label":"single",/' >> "$out"
for p in $ranks; do
  for t in $threads; do
    run "sluice-radix-P${p}T$t" "$bin/sluice" run -n "$p" -- "$bin/sluice-join" --algorithm radix --threads "$t" \
        --r "$r" --s "$s" "${extra[@]}" --json
  done
  if [ $have_mpi = 1 ]; then
    run "mpi-radix-P$p" mpirun --allow-run-as-root --oversubscribe -np "$p" "$bin/sluice-join-mpi" \
        --r "$r" --s "$s" "${extra[@]}" --json
  fi
done
# Fragment-and-replicate where R is 1000x smaller than S (the DFI paper's Fig. 7 shape).
small=$(( s / 1000 > 0 ? s / 1000 : 1 ))
for p in $ranks; do
  [ "$p" -lt 2 ] && continue
  run "sluice-replicate-small-P$p" "$bin/sluice" run -n "$p" -- "$bin/sluice-join" --algorithm replicate \
      --r "$small" --s "$s" "${extra[@]}" --json
  run "sluice-radix-small-P$p" "$bin/sluice" run -n "$p" -- "$bin/sluice-join" --algorithm radix \
      --r "$small" --s "$s" "${extra[@]}" --json
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def group(label):
    return [r for r in rows if r["label"] == label]
single = {r["method"]: r for r in group("single")}
ref = single["radix"]["checksum"]
bad = [r for r in rows if r["label"] != "single" and r.get("matches") is not None
       and r["r"] == single["radix"]["r"] and r["checksum"] != ref]
if bad:
    sys.exit(f"run.sh: checksum differs from the single-thread join in {len(bad)} runs: {bad[0]}")
def stats(rs, key="seconds"):
    v = sorted(r[key] for r in rs)
    return statistics.median(v), v[0], v[-1]
st_hash, st_radix = single["hash"]["seconds_median"], single["radix"]["seconds_median"]
print(f"single thread: hash join {st_hash:.3f} s ({single['hash']['cpu_seconds_median']:.2f} CPU-s), "
      f"radix join {st_radix:.3f} s ({single['radix']['cpu_seconds_median']:.2f} CPU-s) (medians)")
print(f"{'PxT':>4} {'sluice radix s (min-max)':>26} {'CPU-s':>6} {'MPI radix s (min-max)':>24} {'CPU-s':>6}"
      f" {'MPI/sluice':>10} {'1-thread radix/sluice':>21} {'1-thread hash/sluice':>20} {'CPU: MPI/sluice':>15}"
      f" {'1-thread radix/sluice':>21}")
points = sorted({tuple(int(x) for x in r["label"][len("sluice-radix-P"):].split("T"))
                 for r in rows if r["label"].startswith("sluice-radix-P")})
for p, t in points:
    s = group(f"sluice-radix-P{p}T{t}"); m = group(f"mpi-radix-P{p}") if t == 1 else []
    sm, smin, smax = stats(s); scpu = statistics.median(r["cpu_seconds"] for r in s)
    line = f"{p:>2}x{t} {sm:>10.3f} ({smin:.3f}-{smax:.3f})   {scpu:>6.2f}"
    if m:
        mm, mmin, mmax = stats(m); mcpu = statistics.median(r["cpu_seconds"] for r in m)
        line += f" {mm:>8.3f} ({mmin:.3f}-{mmax:.3f})   {mcpu:>6.2f} {mm / sm:>10.2f}"
    else:
        line += f" {'-':>24} {'':>6} {'':>10}"
    line += f" {st_radix / sm:>21.2f} {st_hash / sm:>20.2f}"
    line += f" {mcpu / scpu:>15.2f}" if m else f" {'':>15}"
    line += f" {single['radix']['cpu_seconds_median'] / scpu:>21.2f}"
    print(line)
small = sorted({int(r["label"].split("-P")[1]) for r in rows if r["label"].startswith("sluice-replicate-small-P")})
if small:
    print("small R (|S|/1000): fragment-and-replicate against radix")
    for p in small:
        rep = stats(group(f"sluice-replicate-small-P{p}"))[0]; rad = stats(group(f"sluice-radix-small-P{p}"))[0]
        print(f"{p:>2} replicate {rep:.3f} s, radix {rad:.3f} s, radix/replicate {rad / rep:.2f}")
print(f"(every run's JSON line: {sys.argv[1]})")
PY
