#!/usr/bin/env python3
"""CPU per test: runs every test `ctest` would run (its command, environment
and working directory, as `ctest --show-only=json-v1` lists them), J at a
time, and writes one line per test with the CPU-seconds of the test and
every process it started and reaped (wait4's rusage: user + system), user,
system, wall seconds, minor page faults, exit status and name. What
`make test`'s budget spends is CPU on a 2-core machine, so this says where
it goes; the sum is close to /usr/bin/time's for the whole ctest run.

    scripts/test-env.sh bench/ci/test_cpu.py --build build --jobs 3 --out /tmp/cpu.tsv [-- CTEST_ARGS]
    sort -rn /tmp/cpu.tsv | head -30

(scripts/test-env.sh runs the tests as make test does: /proc/kallsyms
hidden.)

CTEST_ARGS default to -LE 'slow|fuzz' (make test's selection). Processes a
test leaves behind unreaped (a daemonized broker) are not counted.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the CMake build directory")
    ap.add_argument("--jobs", type=int, default=3, help="tests at a time")
    ap.add_argument("--out", default="-", help="the TSV to write (- for stdout)")
    ap.add_argument("ctest_args", nargs="*", default=["-LE", "slow|fuzz"])
    a = ap.parse_args()
    listing = json.loads(subprocess.check_output(
        ["ctest", "--show-only=json-v1", *a.ctest_args], cwd=a.build))
    tests = []
    for t in listing["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(os.environ)
        for kv in props.get("ENVIRONMENT", []):
            k, v = kv.split("=", 1)
            env[k] = v
        tests.append((t["name"], t["command"], env, props.get("WORKING_DIRECTORY", a.build)))
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    running, i = {}, 0
    while i < len(tests) or running:
        while i < len(tests) and len(running) < a.jobs:
            name, cmd, env, wd = tests[i]
            i += 1
            p = subprocess.Popen(cmd, env=env, cwd=wd, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            running[p.pid] = (name, time.time())
        pid, status, ru = os.wait4(-1, 0)
        if pid not in running:
            continue
        name, t0 = running.pop(pid)
        out.write(f"{ru.ru_utime + ru.ru_stime:.2f}\t{ru.ru_utime:.2f}\t{ru.ru_stime:.2f}\t"
                  f"{time.time() - t0:.2f}\t{ru.ru_minflt}\t{status}\t{name}\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
