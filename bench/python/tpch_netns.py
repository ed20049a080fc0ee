"""TPC-H across simulated hosts (a benchmark, not a test; docs/python.md):
python/examples/tpch.py with each rank in a network namespace of its own
(bench/kv/netns.py: one bridge, a veth link per host, 198.18.210.0/24), its
flows over ofi (libfabric's tcp provider, across the links), started the way
a cluster manager starts ranks: a standalone `sluice registry` in host 0, then
every rank by hand with the bootstrap variables. Rank 0 also runs the one
DuckDB it is compared with (with --verify), inside its own namespace. Prints
rank 0's output: each plan's median and `verify: OK (... N.NNx its time ...)`.

  sudo .venv/bin/python bench/python/tpch_netns.py --ranks 2 -- \\
      --sf 1 --verify --repeat 7 --queries q1,join,q3

Needs root and iproute2 (it says why it cannot run otherwise and exits 0, as
the other namespace benchmarks do); the namespaces are removed on every exit.
"""

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "kv"))
import netns  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2, help="ranks, one per simulated host")
    ap.add_argument("--build", default=str(ROOT / "build"),
                    help="the CMake build holding bin/sluice and python/")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for the whole job")
    ap.add_argument("tpch", nargs=argparse.REMAINDER,
                    help="after --: python/examples/tpch.py's options")
    args = ap.parse_args()
    tpch_args = args.tpch[1:] if args.tpch[:1] == ["--"] else args.tpch
    why = netns.unavailable()
    if why:
        print(f"bench/python/tpch_netns.py: skipped: {why}", file=sys.stderr)
        return 0
    build = Path(args.build).resolve()
    sluice = build / "bin" / "sluice"
    if not sluice.exists() or not (build / "python").is_dir():
        print(f"bench/python/tpch_netns.py: no {sluice} or {build / 'python'}: build first "
              "(cmake --build build --target sluice_tool sluice_python)", file=sys.stderr)
        return 2
    python = ROOT / ".venv" / "bin" / "python"
    argv = [str(python), str(ROOT / "python" / "examples" / "tpch.py"), *tpch_args]
    env = dict(os.environ, PYTHONPATH=str(build / "python"), SLUICE_TRANSPORT="ofi")
    netns.exit_on_signals()
    with netns.Hosts(args.ranks) as hosts:
        print(f"bench/python/tpch_netns.py: {args.ranks} hosts "
              f"({', '.join(hosts.ip(i) for i in range(args.ranks))}), MTU {hosts.mtu()}; "
              f"{' '.join(argv)}", file=sys.stderr)
        job = netns.run_job(hosts, list(range(args.ranks)), argv, env, registry_host=0,
                            timeout=args.timeout, sluice=str(sluice))
        if not job.ok():
            print(job.describe(), file=sys.stderr)
            return 1
        sys.stdout.write(job.ranks[0].output)
        print(f"CPU seconds of every rank: {job.cpu_seconds():.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
