"""A job that runs until a rank is killed from outside: every rank pushes
records to every other in a thread, in rounds, and consumes what arrives.
When `sluice run --kill` ends one of them, every survivor's consume() (or
push()) raises sluice.PeerLost; each prints the rank it names and exits 0.
No rank is told which rank will die, or when."""

import sys
import threading
import time

import numpy as np

import sluice

RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])

with sluice.Cluster.from_env() as cluster:
    me = cluster.rank
    with cluster.shuffle("py-lost", RECORD, key="key") as flow:
        src, tgt = flow.source(), flow.target()
        lost = []

        def pusher():
            batch = np.zeros(256, RECORD)
            batch["key"] = np.arange(256)
            try:
                while not lost:
                    src.push(batch)
                    src.flush()
                    time.sleep(0.01)
            except sluice.PeerLost as e:
                lost.append(e.rank)
            except sluice.Error:
                pass

        t = threading.Thread(target=pusher, daemon=True)
        t.start()
        print(f"rank {me}: pushing", flush=True)
        try:
            for _ in tgt:
                pass
            print(f"rank {me}: the flow ended without a loss", flush=True)
            sys.exit(1)
        except sluice.PeerLost as e:
            lost.append(e.rank)
            print(f"rank {me}: PeerLost rank={e.rank}: {e}", flush=True)
        t.join(timeout=30)  # the flow outlives the calls in it
    sys.exit(0)
