#!/usr/bin/env python3
"""Elastic jobs under random joins, departures and kills (label slow).

Each job is sluice-test-reform-program (a keyed sum in rounds whose flows
are declared in the membership view, KeyGroups over every rank number)
launched with 2 ranks of a job of 3 or 4 rank numbers (sluice run
--max-ranks), with, at random: 1 to 3 processes joining at random moments
after round 5 began (--join), rank 1 leaving after a random round
(Cluster::leave), and a random rank other than 0 killed from outside at a
random moment (--kill, with --keep-going). No rank is told who comes, goes
or dies, or when. Every job must exit 0 within its limit (an injected death
does not count against it), print no MISMATCH or FAILED line, and every
DONE line's checksum must equal the sums of its rounds' input; rank 0, which
never leaves or dies, must commit every round. Prints one line per job and
the counts; exits 1 if any job broke a rule.

  tests/soak/elastic_soak.py --bin build/bin [--jobs 40] [--seed 1]

Negative control (--no-reform): the same jobs with the program's flows
declared among every rank number, outside any view; every job must then
fail (a non-zero exit naming the vacancy or the lost rank), never hang and
never pass.
"""

import argparse
import os
import random
import re
import subprocess
import sys
import time

ROUNDS = 80
DONE = re.compile(r"DONE rank (\d+) incarnation (\d+) committed (\d+) rounds (\d+) "
                  r"checksum (\d+) expect (\d+)")


def job_args(rng, no_reform):
    max_ranks = rng.choice([3, 4])
    launcher = ["-n", "2", "--max-ranks", str(max_ranks), "--keep-going", "--timeout", "120",
                "--faults-after", "MARK round 5 begins"]
    joins = rng.randint(1, max_ranks - 1)
    for _ in range(joins):
        launcher += ["--join", f"{rng.uniform(0, 0.8):.2f}"]
    program = ["--rounds", str(ROUNDS), "--records", "5000", "--interval-ms", "10",
               "--mark-round", "5"] + (["--no-reform"] if no_reform else [])
    story = [f"max {max_ranks}", f"{joins} join(s)"]
    if rng.random() < 0.5:
        after = rng.randint(10, 60)
        program += ["--leave-rank", "1", "--leave-after", str(after)]
        story.append(f"rank 1 leaves after round {after}")
    if rng.random() < 0.4:
        victim = rng.randint(1, max_ranks - 1)
        at = rng.uniform(0, 1.0)
        launcher += ["--kill", f"{victim}@{at:.2f}"]
        story.append(f"kill {victim}@{at:.2f}")
    return launcher, program, ", ".join(story)


def check(out, status):
    """What the job broke, or []."""
    broken = []
    if status != 0:
        broken.append(f"exit status {status}")
    if "MISMATCH" in out:
        broken.append("a MISMATCH")
    if re.search(r"^\[\d+\] FAILED", out, re.M):
        broken.append("a FAILED line")
    done = DONE.findall(out)
    for rank, inc, committed, rounds, got, want in done:
        if got != want:
            broken.append(f"rank {rank} incarnation {inc}: checksum {got}, expected {want}")
        if int(rounds) != ROUNDS and int(rounds) > ROUNDS:
            broken.append(f"rank {rank}: {rounds} rounds")
    # (A joiner may take rank 0's number once it left at the end: that is
    # incarnation 1, which finds every round committed.)
    rank0 = [d for d in done if d[0] == "0" and d[1] == "0"]
    if len(rank0) != 1 or int(rank0[0][2]) != ROUNDS:
        broken.append(f"rank 0 did not commit all {ROUNDS} rounds once: {rank0}")
    return broken


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the build's bin directory")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("SLUICE_SOAK_JOBS", "40")))
    p.add_argument("--seed", type=int, default=int(os.environ.get("SLUICE_SOAK_SEED", "1")))
    p.add_argument("--no-reform", action="store_true",
                   help="the negative control: flows outside views; every job must fail")
    args = p.parse_args()
    rng = random.Random(args.seed)
    sluice = os.path.join(args.bin, "sluice")
    program = os.path.join(args.bin, "sluice-test-reform-program")
    env = dict(os.environ, SLUICE_PEER_TIMEOUT_MS="1000")
    bad, joined, left, killed = 0, 0, 0, 0
    for i in range(args.jobs):
        launcher, prog, story = job_args(rng, args.no_reform)
        start = time.monotonic()
        try:
            r = subprocess.run([sluice, "run", *launcher, "--", program, *prog], env=env,
                               capture_output=True, text=True, timeout=180)
            out, status = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
                errors="replace")
            status = "hung"
        broken = check(out, status)
        if args.no_reform:  # the control: a job must fail, not hang and not pass
            broken = (["hung"] if status == "hung" else
                      [] if status != 0 and re.search(r"FAILED", out) else ["it passed"])
        joined += len(re.findall(r"joined the running job as rank", out))
        left += len(re.findall(r"DONE rank 1 incarnation 0 committed \d+ rounds", out)) if \
            "--leave-rank" in prog else 0
        killed += out.count("injecting --kill")
        print(f"job {i}: {story}: {time.monotonic() - start:.1f} s, "
              f"{'ok' if not broken else 'BROKEN: ' + '; '.join(broken)}", flush=True)
        if broken:
            bad += 1
            print(out[-6000:], flush=True)
    print(f"elastic_soak: {args.jobs} jobs (seed {args.seed}), {joined} joins landed, {left} "
          f"departures, {killed} kills; {args.jobs - bad} "
          f"{'failed as the control must' if args.no_reform else 'correct'}, {bad} broken",
          flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
