"""Receiving without a copy, for the tests (2 ranks): every batch consume()
returns is a numpy view of the ring itself (its address lies in a mapping of
the flow's shared-memory ring, a memfd named sluice:<job>:<flow> in
/proc/self/maps), and sluice counts
no byte copied. A batch kept while the rest of the flow runs through the
ring many times keeps its contents (it pins its segment). A program that
keeps every batch is stopped by a clear InvalidArgument once a whole ring of
one source is held, and goes on once it lets them go. A field of a batch
exported through DLPack (np.from_dlpack, torch.from_dlpack) is the same
memory, read-only, and pins the segment as the batch does. Once every rank
let a flow go and no batch of it is alive, its rings are unmapped (no leaked
mapping). Exactly once: counts
and order-independent checksums against what every rank pushed. Rank 0
prints `OK ...` lines, or a rank exits 1."""

import gc
import sys
import threading
import time

import numpy as np

import sluice

RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])


def ring_mappings(flow_name):
    """The address ranges of this process's mappings of the flow's shared
    memory rings (memfd files named sluice:<job>:<flow>)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/memfd:sluice:") and \
                    parts[5].endswith(":" + flow_name):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def unmapped_late(cluster, flow_name):
    """Whether this process still maps the flow's rings 10 s after every
    rank let the flow go. A flow is let go of in the background once every
    participant withdrew it (here within about 20 ms): a ring mapped for
    longer leaked."""
    gc.collect()
    cluster.barrier()
    give_up = time.monotonic() + 10
    while ring_mappings(flow_name) and time.monotonic() < give_up:
        time.sleep(0.01)
    return bool(ring_mappings(flow_name))


def checksum(records):
    per = records["key"] * np.uint64(0x9E3779B97F4A7C15) ^ records["value"]
    return int(per.sum(dtype=np.uint64))


def pushing(src, made, failure):
    try:
        with src:
            for start in range(0, len(made), 5000):
                src.push(made[start:start + 5000])
    except Exception as e:  # noqa: BLE001 (reported by the caller)
        failure.append(e)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    # over ofi the rings are registered memory, not memfd files
    check_mapping = (sys.argv[2] if len(sys.argv) > 2 else "shm") == "shm"
    errors = []
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        made = np.zeros(n, RECORD)
        made["key"] = np.arange(n, dtype=np.uint64) * np.uint64(world) + np.uint64(me)
        made["value"] = made["key"] * np.uint64(7) + np.uint64(1)

        # 1. views of the ring, one kept throughout
        copied_before = sluice.copied_bytes()
        with cluster.shuffle("py-views", RECORD, key="key") as flow:
            src, tgt = flow.source(), flow.target()
            failure = []
            t = threading.Thread(target=pushing, args=(src, made, failure))
            t.start()
            got, total, batches, outside = 0, 0, 0, 0
            kept, kept_copy = None, None
            dl_kept, dl_copy = None, None
            for batch in tgt:
                if check_mapping and batches < 50:  # (the first ones: mappings change later)
                    addr = batch.__array_interface__["data"][0]
                    if not any(lo <= addr < hi for lo, hi in ring_mappings("py-views")):
                        outside += 1
                if batch.flags.writeable:
                    errors.append("a batch over the ring is writable")
                # Keep the first batch while the next 12 arrive (its source
                # writes on into the other 15 segments of its ring meanwhile),
                # then check it never changed.
                if batches == 0:
                    kept, kept_copy = batch, batch.copy()
                elif batches == 1:
                    # DLPack (torch.from_dlpack and the like take the same
                    # capsule): a field of the batch, no copy, read-only,
                    # and only the exported array is kept: it pins the
                    # segment as the batch does.
                    dl = np.from_dlpack(batch["value"])
                    if not np.shares_memory(dl, batch) or dl.flags.writeable:
                        errors.append("a DLPack export copied the batch or made it writable")
                    dl_kept, dl_copy = dl, dl.copy()
                    del dl
                elif batches == 12:
                    if not np.array_equal(kept, kept_copy):
                        errors.append("a kept batch changed while the flow ran on")
                    if not np.array_equal(dl_kept, dl_copy):
                        errors.append("an array kept through DLPack changed while the flow ran on")
                    kept = dl_kept = None
                got += len(batch)
                total = (total + checksum(batch)) % 2**64
                batches += 1
            t.join()
            if failure:
                raise failure[0]
            if batches <= 12:
                errors.append(f"only {batches} batches: too few to check a kept one")
            del batch
            if outside:
                errors.append(f"{outside} of the first batches lie outside the flow's rings")
        # The flow ended and no batch of it is alive: its rings are unmapped.
        if unmapped_late(cluster, "py-views"):
            errors.append("the flow's rings are still mapped 10 s after every rank let it go")
        copied = sluice.copied_bytes() - copied_before
        if copied:
            errors.append(f"{copied} bytes copied on receive")
        facts = cluster.allgather((n, checksum(made), got, total, batches))
        if me == 0:
            made_n = sum(f[0] for f in facts)
            made_sum = sum(f[1] for f in facts) % 2**64
            got_n = sum(f[2] for f in facts)
            got_sum = sum(f[3] for f in facts) % 2**64
            if (made_n, made_sum) != (got_n, got_sum):
                errors.append(f"made {made_n} ({made_sum}), got {got_n} ({got_sum})")
            else:
                print(f"OK views records={got_n} batches={sum(f[4] for f in facts)} "
                      f"copied={copied}", flush=True)

        # 2. keeping every batch: stopped with a clear error, then goes on
        with cluster.shuffle("py-hoard", RECORD, key="key", ring_segments=4) as flow:
            src, tgt = flow.source(), flow.target()
            failure = []
            t = threading.Thread(target=pushing, args=(src, made, failure))
            t.start()
            hoard, refused, got, total, changed = [], 0, 0, 0, 0

            def let_go():
                # Every batch held is as it was received (a ring whose kept
                # segments were reused would show the source's later records
                # here), then they go: their segments return to the sources.
                nonlocal changed
                changed += sum(not np.array_equal(b, c) for b, c in hoard)
                hoard.clear()
                gc.collect()

            while True:
                try:
                    batch = tgt.consume()
                except sluice.InvalidArgument as e:
                    if "held by arrays still alive" not in str(e):
                        raise
                    refused += 1
                    let_go()
                    continue
                if batch is None:
                    break
                got += len(batch)
                total = (total + checksum(batch)) % 2**64
                hoard.append((batch, batch.copy()))
                del batch
            t.join()
            if failure:
                raise failure[0]
            let_go()
            if changed:
                errors.append(f"{changed} held batches changed: their segments were reused")
        if unmapped_late(cluster, "py-hoard"):
            errors.append("the hoarding flow's rings are still mapped 10 s after every rank let "
                          "it go")
        facts = cluster.allgather((n, checksum(made), got, total, refused))
        if me == 0:
            ok = (sum(f[0] for f in facts), sum(f[1] for f in facts) % 2**64) == (
                sum(f[2] for f in facts), sum(f[3] for f in facts) % 2**64)
            refusals = sum(f[4] for f in facts)
            if not ok:
                errors.append(f"hoarding lost or doubled records: {facts}")
            elif refusals == 0:
                errors.append("keeping every batch was never refused")
            else:
                print(f"OK hoard records={sum(f[2] for f in facts)} refusals={refusals}",
                      flush=True)
    for e in errors:
        print(f"rank {me}: {e}", flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
