"""Exactly once through a rank's death and return with sluice.ReplayFlow,
for the tests (3 ranks, `sluice run --restarts 1`). Every rank sends
`records` records to every rank, record `pos` to rank t made from (rank,
t, pos) alone, and checks that it consumes every rank's records once each
and in position order (a record out of place prints MISMATCH and exits 3).
Every 20 ms it writes its state (positions and an order-independent digest
per source) to <state dir>/rank-R, then commit()s; a restarted process
reads it back, restore()s the flow and makes its records again from the
positions it saved. Nobody is told which rank dies or when: every rank
prints "MARK rank R consumed N" once it consumed N records and saved its
state since, and the launcher kills a rank after such a line (the tests:
rank 1's own, so that a restarted rank 1 always has a state to restore).
Prints "RESTORED rank R ..."
after a restart and "DONE rank R incarnation I received X expect Y digest D
expect D'" at the end. --no-replay: nothing is sent again after a view
change (the negative control)."""

import argparse
import json
import os
import time

import numpy as np

import sluice

REC = np.dtype([("source", "<u8"), ("position", "<u8"), ("value", "<u8")])
MIX = np.uint64(0x9E3779B97F4A7C15)


def values(source, target, positions):
    with np.errstate(over="ignore"):
        x = (np.uint64(source) << np.uint64(48)) ^ (np.uint64(target) << np.uint64(40)) ^ positions
        x = x * MIX
        return x ^ (x >> np.uint64(29))


def make(source, target, start, count):
    pos = np.arange(start, start + count, dtype=np.uint64)
    out = np.empty(count, REC)
    out["source"] = source
    out["position"] = pos
    out["value"] = values(source, target, pos)
    return out


def digest(batch):
    with np.errstate(over="ignore"):
        return int(((batch["value"] ^ batch["position"]) * MIX).sum(dtype=np.uint64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=30000)
    ap.add_argument("--mark", type=int, default=6000)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--no-replay", action="store_true")
    args = ap.parse_args()
    cluster = sluice.Cluster.from_env()
    me, n = cluster.rank, cluster.world_size
    incarnation = cluster.incarnation(me)
    path = os.path.join(args.state_dir, f"rank-{me}")
    flow = cluster.replay_flow("py-replayed", REC, replay=not args.no_replay)
    state = {"received": [0] * n, "resume_at": [0] * n, "digest": [0] * n}
    if incarnation > 0 and os.path.exists(path):
        with open(path) as f:
            state = json.load(f)
        flow.restore(state["received"], state["resume_at"])
        print(f"RESTORED rank {me} incarnation {incarnation} received "
              f"{','.join(map(str, state['received']))}", flush=True)
    nxt = list(state["resume_at"])  # the next record to make, per target
    consumed, marked, mark_due = 0, False, False
    last_commit = time.monotonic()

    def commit():
        nonlocal last_commit, marked
        state["resume_at"] = [flow.acknowledged(t) for t in range(n)]
        state["received"] = [flow.received(s) for s in range(n)]
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)  # whole or not at all
        flow.commit()
        last_commit = time.monotonic()
        if mark_due and not marked:
            marked = True
            print(f"MARK rank {me} consumed {args.mark}", flush=True)

    view = cluster.view
    while True:
        try:
            flow.open(view, timeout=60)
            ended = False
            while True:
                if cluster.epoch != flow.epoch:
                    raise sluice.ViewChanged("the view changed")
                all_made = True
                for t in range(n):
                    if nxt[t] < args.records:
                        batch = make(me, t, nxt[t], min(512, args.records - nxt[t]))
                        try:
                            nxt[t] += flow.push(batch, t, timeout=0.002)
                        except (sluice.ViewChanged, sluice.PeerLost) as e:
                            nxt[t] += e.pushed
                            raise
                    all_made = all_made and nxt[t] == args.records
                try:
                    if all_made:
                        flow.close(timeout=0.002)
                    else:
                        flow.flush(timeout=0.002)
                except sluice.Timeout:
                    pass
                for _ in range(64):
                    if ended:
                        break
                    try:
                        got = flow.consume(timeout=0.001)
                    except sluice.Timeout:
                        break
                    if got is None:
                        ended = True
                        break
                    src, batch = got
                    first = flow.received(src) - len(batch)
                    want = make(src, me, first, len(batch))
                    if not np.array_equal(batch, want):
                        bad = int(np.argmax(batch != want))
                        print(f"MISMATCH rank {me}: from rank {src} expected position "
                              f"{first + bad}, got {int(batch['position'][bad])}", flush=True)
                        os._exit(3)
                    state["digest"][src] = (state["digest"][src] + digest(batch)) % 2**64
                    consumed += len(batch)
                    if consumed >= args.mark:
                        mark_due = True
                if time.monotonic() - last_commit > 0.02:
                    commit()
                if ended and all_made:
                    commit()
                    flow.finish(timeout=60)
                    break
            break
        except (sluice.ViewChanged, sluice.PeerLost):
            view = cluster.await_view(max(view.epoch, flow.epoch), timeout=60)

    received = sum(flow.received(s) for s in range(n))
    got_digest = sum(state["digest"]) % 2**64
    want_digest = sum(digest(make(s, me, 0, args.records)) for s in range(n)) % 2**64
    print(f"DONE rank {me} incarnation {incarnation} received {received} expect "
          f"{args.records * n} digest {got_digest} expect {want_digest}", flush=True)
    flow.destroy()
    cluster.leave(timeout=10)
    raise SystemExit(0 if received == args.records * n and got_digest == want_digest else 3)


if __name__ == "__main__":
    main()
