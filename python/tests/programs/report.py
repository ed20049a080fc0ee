"""What the test programs share: how a job reports what went wrong."""

import sys


def exit_if_any(failed):
    """`failed`: every rank's list of errors (an allgather). Prints each as
    a MISMATCH line and exits 1 if there is any."""
    if any(failed):
        for rank, errs in enumerate(failed):
            for e in errs:
                print(f"MISMATCH rank {rank}: {e}", flush=True)
        sys.exit(1)
