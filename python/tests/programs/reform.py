"""A keyed sum in rounds whose flows re-form among the living: the Python
twin of tests/membership/reform_program.cc, for test_membership.py.

Round r's input is SPLITS splits of RECORDS records each, made from (r,
split, i) alone, so any rank can make any split; its keys fall into GROUPS
key groups. KeyGroups give each split and each group an owner among the
current view's members. Each round: the members agree on the round to run
(a view-scoped allgather: a rank back as a new incarnation learns it there),
declare the round's shuffle in the view, push the splits they own to the
owners of the records' groups (explicit targets), sum what arrives per
group, and commit by gathering the sums in the view; every rank checks the
committed sums against the sums of the round's input. A loss at any moment
(ViewChanged, PeerLost, a timeout of a flow whose peer is gone) makes every
member run the round again in the next view (a timeout too, but the tests
require that none happens: the library reports a lost peer as such). Nobody is told which rank dies
or when: the launcher kills it (sluice run --kill).

Prints "MARK round 5 begins" (rank 0, once: for --faults-after), "RETRY rank
R round N epoch E: Kind: why" on a failed attempt (Kind: the exception's
class), "REFORMED rank R epoch E
members M" for every view after the first it runs a round in, and at the
end "DONE rank R incarnation I committed C rounds N checksum X expect Y".
"""

import sys
import threading
import time

import numpy as np

import sluice

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
# --no-reform: the flows and collectives among every rank, outside any view:
# a loss then fails the job (the negative control).
REFORM = "--no-reform" not in sys.argv[2:]
SPLITS, RECORDS, GROUPS = 8, 5000, 16
RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])


def split_records(rnd, split):
    i = np.arange(RECORDS, dtype=np.uint64)
    rec = np.zeros(RECORDS, RECORD)
    rec["key"] = (np.uint64(rnd) * np.uint64(1000003) + np.uint64(split) * np.uint64(7919) + i) % np.uint64(9973)
    rec["value"] = np.uint64(rnd + 1) * (i + np.uint64(split))
    return rec


def group_of(keys):
    return (keys % np.uint64(GROUPS)).astype(np.uint32)


def expected_sums(rnd):
    """Per group (count, total) of round `rnd`'s whole input."""
    counts = np.zeros(GROUPS, np.int64)
    totals = np.zeros(GROUPS, np.uint64)
    for split in range(SPLITS):
        rec = split_records(rnd, split)
        g = group_of(rec["key"])
        counts += np.bincount(g, minlength=GROUPS)
        np.add.at(totals, g, rec["value"])
    return counts, totals


def digest(counts, totals):
    return int((counts.astype(np.uint64) * np.uint64(31) + totals).sum() % np.uint64(2**61 - 1))


with sluice.Cluster.from_env() as cluster:
    me, world = cluster.rank, cluster.world_size
    owners = list(range(world))
    split_groups = sluice.KeyGroups(SPLITS, owners)
    key_groups = sluice.KeyGroups(GROUPS, owners)
    rnd, committed, checksum, expect = 0, 0, 0, 0
    first_epoch = None
    while True:
        view = cluster.view
        try:
            # The round to run: a rank back as a new incarnation learns it here.
            if REFORM:
                rnd = max(cluster.allgather(rnd, view=view, timeout=30).values)
            else:
                rnd = max(cluster.allgather(rnd, timeout=30))
            if rnd >= ROUNDS:
                break
            if first_epoch is None:
                first_epoch = view.epoch
            elif view.epoch != first_epoch:
                print(f"REFORMED rank {me} epoch {view.epoch} members "
                      f"{','.join(map(str, view.members))}", flush=True)
                first_epoch = view.epoch
            if me == 0 and rnd == 5:
                print("MARK round 5 begins", flush=True)
            split_owner = split_groups.assign(view)
            group_owner = key_groups.assign(view)
            name = "py-reform" if REFORM else f"py-reform-{rnd}"
            with cluster.shuffle(name, RECORD, view=view if REFORM else None,
                                 segment_bytes=4096) as flow:
                index = {rank: i for i, (rank, _slot) in enumerate(flow.targets)}
                to = np.array([index[int(r)] for r in group_owner], np.uint32)
                counts = np.zeros(GROUPS, np.int64)
                totals = np.zeros(GROUPS, np.uint64)
                src, tgt = flow.source(), flow.target()
                failed = []

                def push():
                    try:
                        for split in np.flatnonzero(split_owner == me):
                            rec = split_records(rnd, int(split))
                            src.push(rec, to[group_of(rec["key"])], timeout=20)
                        src.close(timeout=20)
                    except sluice.Error as e:
                        failed.append(e)
                        src.abort()

                t = threading.Thread(target=push)
                t.start()
                try:
                    while (batch := tgt.consume(timeout=20)) is not None:
                        g = group_of(batch["key"])
                        counts += np.bincount(g, minlength=GROUPS)
                        np.add.at(totals, g, batch["value"])
                finally:
                    t.join()
                if failed:
                    raise failed[0]
            mine = {int(g): (int(counts[g]), int(totals[g])) for g in np.flatnonzero(group_owner == me)}
            parts = (cluster.allgather(mine, view=view, timeout=30).values if REFORM
                     else cluster.allgather(mine, timeout=30))
            all_counts = np.zeros(GROUPS, np.int64)
            all_totals = np.zeros(GROUPS, np.uint64)
            for part in parts:
                for g, (c, tot) in part.items():
                    all_counts[g] += c
                    all_totals[g] += np.uint64(tot)
            want_counts, want_totals = expected_sums(rnd)
            if not (np.array_equal(all_counts, want_counts) and np.array_equal(all_totals, want_totals)):
                print(f"MISMATCH rank {me} round {rnd}: {all_counts.tolist()} {want_counts.tolist()}",
                      flush=True)
                sys.exit(1)
            checksum = (checksum + digest(all_counts, all_totals)) % (2**61 - 1)
            expect = (expect + digest(want_counts, want_totals)) % (2**61 - 1)
            committed += 1
            rnd += 1
        except (sluice.ViewChanged, sluice.PeerLost, sluice.Timeout) as e:
            print(f"RETRY rank {me} round {rnd} epoch {view.epoch}: {type(e).__name__}: {e}",
                  flush=True)
            if not REFORM:
                print(f"FAILED rank {me} round {rnd}: {e}", flush=True)
                sys.exit(1)
            if cluster.epoch == view.epoch:
                try:
                    cluster.await_view(view.epoch, timeout=10)
                except sluice.Timeout:
                    pass
            time.sleep(0.01)
    print(f"DONE rank {me} incarnation {cluster.incarnation()} committed {committed} rounds "
          f"{ROUNDS} checksum {checksum} expect {expect}", flush=True)
