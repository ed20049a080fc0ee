#!/usr/bin/env python3
"""The applications' fault soak (issue 37, label `slow`).

Many short sluice-kv and sluice-nam jobs, jobs of the keyed sum whose
flows re-form in each view (tests/membership/reform_program.cc), and jobs
of a ReplayFlow (tests/membership/replay_program.cc), over shm and ofi,
each with one
fault injected from outside by the launcher at a random moment: a random
rank SIGKILLed (`sluice run --kill`), or SIGSTOPped (`--stop`) for less than
every failure detector of the job (a pause, at most 0.3 s) or for longer
than the peer timeout (a rank that goes silent and is killed for it). No rank is told which rank or when.

With recovery on (kv: --keep-going and --restarts 1, --spares 1 or both, its
replicas recover; nam: --keep-going, its clients are recovered, and RSI
and 2PC jobs also --restarts/--spares with --spare-clients 1, a restarted
compute rank running a spare client for the rest of the run, and half of them
elastic, `--max-ranks` one more than they start with and a process that
joins at a random moment and runs the vacancy's client; the keyed
sum and the ReplayFlow: as kv) every job must end with the result of an
undisturbed run (kv:
every operation exactly once, replicas identical, its own verdict and
porcupine's: linearizable; nam: the invariants hold and no record stays
locked, and a spare client that ran is counted in the report; the keyed sum: every survivor commits every round once with its
input's sums; the ReplayFlow: every rank's last process consumed every
record of every rank once, in position order), unless the victim is a role the docs declare
fail-stop (a nam memory server; a kv client rank, whose operations never
complete), which may fail the job cleanly. Never a hang, never a wrong
result. With --no-recovery (the negative control: the launcher's default
policy, which stops the job when a rank fails once its grace period is
over; the keyed sum without re-forming, sluice-nam without its recovery of
lost clients), the faults that landed must show up as failed jobs.

Prints one line per job and a summary:
  jobs 200: finished-correct 170 (121 with the fault landed while the job ran),
  failed-clean 30, hung 0, wrong 0
Exit status 0 when the soak holds, 1 when it does not.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

PEER_TIMEOUT_MS = 1000


def job_shape(app, transport):
    """(ranks, program args, expected seconds, fail-stop ranks) of one job."""
    if app.startswith("kv-"):
        ops = "40000" if transport == "shm" else "12000"
        args = ["run", "--protocol", app[3:], "--ops", ops, "--keys", "50", "--retry-ms", "500"]
        return 5, "sluice-kv", args, 1.5, {3, 4}
    if app == "reform":
        # The keyed sum whose flows re-form in each view (Cluster::declare(
        # view, spec), KeyGroups): every rank may die; none is fail-stop.
        args = ["--rounds", "60", "--records", "20000", "--interval-ms", "5"]
        return 4, "sluice-test-reform-program", args, 1.0 if transport == "shm" else 4.0, set()
    if app == "replay":
        # Exactly once through a rank's death and return (sluice::ReplayFlow,
        # tests/membership/replay_program.cc): every rank may die; none is
        # fail-stop. Its state directory is per job (main() adds it).
        args = ["--records", "300000" if transport == "shm" else "100000"]
        return 3, "sluice-test-replay-program", args, 1.0 if transport == "shm" else 2.0, set()
    if app == "nam-rsi":
        args = ["--products", "200", "--record-bytes", "32", "--txns", "0", "--seconds", "3",
                "--think-us", "200", "--recovery-timeout-ms", "500", "--json"]
        return 3, "sluice-nam", args, 3.0, {0}
    args = ["--protocol", "2pc", "--memory-servers", "2", "--products", "200", "--record-bytes",
            "32", "--txns", "0", "--seconds", "3", "--think-us", "200", "--json"]
    return 4, "sluice-nam", args, 3.0, {0, 1}


def classify(app, out, rc, timed_out, victim, fail_stop, porcupine, history, recovery):
    """One of: correct, failed-clean, hung, wrong; and why. Without recovery
    any rank's loss may fail the job cleanly (no result, no wrong one)."""
    if timed_out or rc == 124:
        return "hung", "no end within the limit"
    if app == "reform":
        # Every survivor of the first processes committed all 60 rounds with
        # its input's sums; a restarted process, the rounds from its return.
        done = re.findall(r"DONE rank (\d+) incarnation (\d+) committed (\d+) rounds (\d+) "
                          r"checksum (\d+) expect (\d+)", out)
        if "MISMATCH" in out or any(d[4] != d[5] for d in done):
            return "wrong", "a round's sums differ from its input's"
        if re.search(r"RETRY .*Timeout", out):
            # A survivor waited out its own deadline: the library did not
            # tell it of the loss.
            return "wrong", "a rank learnt of a loss only from its deadline"
        silent = "stopped heart-beating" in out
        first = {d[0] for d in done if d[1] == "0" and d[2] == "60" and d[3] == "60"}
        survivors = {str(r) for r in range(4)} - {str(victim)}
        if (rc == 0 or silent) and "FAILED" not in out and survivors <= first:
            return "correct", ""
    elif app == "replay":
        # Every rank's last process consumed every record of every rank once
        # and in position order (its DONE line: counts and digests equal).
        done = re.findall(r"DONE rank (\d+) incarnation (\d+) received (\d+) expect (\d+) "
                          r"digest (\d+) expect (\d+)", out)
        if "MISMATCH" in out or any(d[2] != d[3] or d[4] != d[5] for d in done):
            return "wrong", "a record lost, doubled or out of place"
        silent = "stopped heart-beating" in out
        if (rc == 0 or silent) and {d[0] for d in done} == {"0", "1", "2"}:
            return "correct", ""
    elif app.startswith("kv-"):
        verdict = ("job: every operation completed exactly once; replicas identical; "
                   "history linearizable") in out
        if rc == 0 and verdict and "MISMATCH" not in out:
            if porcupine:
                p = subprocess.run([porcupine, "-timeout", "100s", history], capture_output=True,
                                   text=True)
                if p.returncode != 0 or "linearizable" not in p.stdout or "not linearizable" in \
                        p.stdout:
                    return "wrong", "porcupine: " + (p.stdout + p.stderr).strip()[-300:]
            return "correct", ""
        if "MISMATCH" in out or "not linearizable" in out:
            return "wrong", "a wrong result"
    else:
        ok = "invariants: OK" in out and '"locked":0' in out and "FAILED" not in out
        # A restarted compute rank that ran a spare client: the report
        # waited for it and counted it.
        ran_spare = re.search(r"incarnation \d+ runs spare client", out) is not None
        if ok and ran_spare and re.search(r'"spare_clients_run":[1-9]', out) is None:
            return "wrong", "a spare client ran but the report did not count it"
        if ok:
            # A rank stopped past the peer timeout is killed for it, and the
            # launcher counts that (137) though the survivors finished.
            silent = "stopped heart-beating" in out
            if rc == 0 or silent:
                return "correct", ""
        if "invariants: FAILED" in out or re.search(r'"locked":[1-9]', out):
            return "wrong", "the invariants do not hold"
    if victim in fail_stop:
        return "failed-clean", "a fail-stop role was lost (exit %d)" % rc
    if not recovery:
        return "failed-clean", "recovery off (exit %d)" % rc
    return "wrong", "exit %d without the result" % rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the build's bin directory")
    ap.add_argument("--porcupine", default="", help="kv-porcupine, to check kv histories")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("SLUICE_SOAK_JOBS", "200")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("SLUICE_SOAK_SEED", "37")))
    ap.add_argument("--transport", choices=["shm", "ofi", "both"], default="both")
    ap.add_argument("--no-recovery", action="store_true",
                    help="the negative control: the launcher stops the job when a rank fails")
    ap.add_argument("--apps", default="kv-multipaxos,kv-nopaxos,nam-rsi,nam-2pc,reform,replay",
                    help="the kinds of job to draw from, comma-separated")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    sluice = os.path.join(a.bin, "sluice")
    apps = a.apps.split(",")
    counts = {"correct": 0, "failed-clean": 0, "hung": 0, "wrong": 0}
    landed_correct = 0
    landed_failed = 0
    landed = 0
    spare_clients = 0  # nam jobs in which a restarted rank ran a spare client
    tmp = tempfile.mkdtemp(prefix="sluice-app-soak-")
    history = os.path.join(tmp, "history.jsonl")
    start = time.time()
    for i in range(a.jobs):
        transport = a.transport if a.transport != "both" else ("shm" if i % 2 == 0 else "ofi")
        app = apps[rng.randrange(len(apps))]
        ranks, program, args, seconds, fail_stop = job_shape(app, transport)
        victim = rng.randrange(ranks)
        fault = rng.choice(["kill", "kill", "pause", "silence"])
        at = round(rng.uniform(0.05, 0.9) * seconds, 2)
        if fault == "kill":
            inject = ["--kill", "%d@%g" % (victim, at)]
        elif fault == "pause":
            # Shorter than every failure detector of the jobs (the peer
            # timeout, kv's election and retry timeouts, nam's recovery
            # timeout of 500 ms): a pause that must change nothing.
            inject = ["--stop", "%d@%g:%g" % (victim, at, round(rng.uniform(0.05, 0.3), 2))]
        else:
            inject = ["--stop", "%d@%g:%g" % (victim, at, 3 * PEER_TIMEOUT_MS / 1000)]
        policy = []
        if not a.no_recovery:
            # A lost kv replica or keyed-sum rank comes back: started again,
            # or a spare waiting since the start takes its place, or both (a
            # used spare is then replaced by a new one).
            comes_back = []
            if app.startswith(("kv-", "nam-")) or app in ("reform", "replay"):
                comes_back = rng.choice([["--restarts", "1"], ["--spares", "1"],
                                         ["--spares", "1", "--restarts", "1"]])
            policy = ["--keep-going"] + comes_back
        elif app == "reform":
            args = args + ["--no-reform"]
        elif app.startswith("nam-"):
            # (nam recovers a lost client itself, and a short job finishes
            # within the launcher's grace period: recovery off is its own.)
            args = args + ["--no-recovery"]
        if app.startswith("kv-"):
            args = args + ["--history", history]
        joins = False
        if app.startswith("nam-") and not a.no_recovery:
            args = args + ["--spare-clients", "1"]
            # Half of them grow while they run: one more rank number than
            # they start with, and a process that joins into it.
            if rng.random() < 0.5:
                joins = True
                policy = policy + ["--max-ranks", str(ranks + 1), "--join",
                                   "%g" % round(rng.uniform(0.05, 0.9) * seconds, 2)]
        if app == "replay":
            args = args + ["--state-dir", tempfile.mkdtemp(prefix="replay-", dir=tmp)]
        argv = [sluice, "run", "-n", str(ranks), "--timeout", "120", "--stacks-on-timeout",
                "--grace", "20"] + policy + inject + ["--", os.path.join(a.bin, program)] + args
        env = dict(os.environ, SLUICE_TRANSPORT=transport, SLUICE_PEER_TIMEOUT_MS=str(
            PEER_TIMEOUT_MS))
        t0 = time.time()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
            out, rc, timed_out = p.stdout + p.stderr, p.returncode, False
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (
                e.stdout or "")
            rc, timed_out = -1, True
        took = time.time() - t0
        injected = "sluice run: injecting " in out
        landed += injected
        kind, why = classify(app, out, rc, timed_out, victim, fail_stop, a.porcupine, history,
                             not a.no_recovery)
        counts[kind] += 1
        if injected:
            if kind == "correct":
                landed_correct += 1
            else:
                landed_failed += 1
        spare = (" (a spare waits)" if "--spares" in policy else "") + (
            " (a process joins)" if joins else "")
        ran_spare = re.search(r'"spare_clients_run":[1-9]', out) is not None
        spare_clients += ran_spare
        print("job %d: %s %s%s, %s of rank %d at %g s (%s): %s%s, exit %d, %.1f s" % (
            i, app, transport, spare, fault, victim, at,
            "landed" if injected else "after the job ended", kind,
            (" (" + why + ")") if why else "", rc, took) +
            ("; a restarted rank ran a spare client" if ran_spare else ""), flush=True)
        if kind in ("hung", "wrong"):
            print("---- job %d's output (its last 6000 characters):\n%s\n----" % (i, out[-6000:]),
                  flush=True)
    print("jobs %d (seed %d, %s%s, %.0f s): finished-correct %d (%d with the fault landed while "
          "the job ran), failed-clean %d, hung %d, wrong %d; faults landed: %d; nam jobs in "
          "which a restarted rank ran a spare client: %d" % (
              a.jobs, a.seed, a.transport, ", no recovery" if a.no_recovery else "",
              time.time() - start, counts["correct"], landed_correct, counts["failed-clean"],
              counts["hung"], counts["wrong"], landed, spare_clients))
    if a.no_recovery:
        # The negative control: faults that landed must fail jobs (cleanly:
        # never a hang or a wrong result).
        if landed_failed == 0:
            print("FAILED: without recovery, no landed fault failed its job")
            return 1
        if counts["hung"] or counts["wrong"]:
            print("FAILED: without recovery, %d hung, %d wrong" % (counts["hung"], counts["wrong"]))
            return 1
        return 0
    if counts["hung"] or counts["wrong"]:
        print("FAILED: %d hung, %d wrong" % (counts["hung"], counts["wrong"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
