"""Flows of Arrow record batches, for the tests (3 ranks). Every rank makes
a table of every kind of column batch flows carry (integers, floats,
half floats, booleans, decimals, timestamps with a zone, dates, strings,
large strings, binaries, fixed-size binaries, lists, large lists,
fixed-size lists, structs, maps, dictionaries, a null column; nulls in
each) and pushes it to every rank: half of it routed row by row (by the
program, then by the hash of its int64 key column, then by the hash of a
dictionary-encoded string column and a string column with nulls), the rest
as slices of whole batches, one of them larger than a record (sent as
slices); a target checks every batch it receives against the rows its
source made (Arrow's equality, after Arrow's full validation), exactly
once (every key it should get, once) and without a copy: every buffer of
every column lies in the flow's ring (over shm: in a mapping of its
memfd), and sluice counts no byte copied. A batch kept while the rest of
the flow runs through a small ring many times keeps its contents. A
program that keeps every batch is stopped by a clear InvalidArgument once
a whole ring is held, and goes on once it lets them go. A replicate flow
gives every rank every rank's batch. A push of another schema, a shuffle
push without a target and a union column are refused with
InvalidArgument. Rank 0 prints `OK ...` lines, or a rank exits 1."""

import decimal
import gc
import sys
import threading

import numpy as np
import pyarrow as pa

import sluice
from sluice.batches import key_targets
from report import exit_if_any
from zero_copy import ring_mappings

SCHEMA = pa.schema([
    ("key", pa.int64()),
    ("f64", pa.float64()),
    ("f16", pa.float16()),
    ("flag", pa.bool_()),
    ("dec", pa.decimal128(20, 4)),
    ("ts", pa.timestamp("us", tz="Europe/Paris")),
    ("day", pa.date32()),
    ("name", pa.string()),
    ("big", pa.large_string()),
    ("raw", pa.binary()),
    ("fixed", pa.binary(6)),
    ("ints", pa.list_(pa.int32())),
    ("longs", pa.large_list(pa.int64())),
    ("pair", pa.list_(pa.float32(), 2)),
    ("point", pa.struct([("x", pa.int16()), ("label", pa.string())])),
    ("attrs", pa.map_(pa.string(), pa.int32())),
    ("city", pa.dictionary(pa.int16(), pa.string())),
    ("nothing", pa.null()),
])


def made(rank, n):
    """Rank `rank`'s table: key = rank * n + row; every column a function of it."""
    k = np.arange(n, dtype=np.int64) + rank * n
    rng = np.random.default_rng(rank)
    null = rng.random(n) < 0.1
    cols = [
        pa.array(k),
        pa.array(k * 0.25, mask=null),
        pa.array((k % 100).astype(np.float16)),
        pa.array(k % 3 == 0, mask=null),
        pa.array([decimal.Decimal(int(v)).scaleb(-4) for v in k], pa.decimal128(20, 4)),
        pa.array(k * 1000, pa.timestamp("us", tz="Europe/Paris"), mask=null),
        pa.array((k % 20000).astype(np.int32), pa.date32()),
        pa.array([None if z else "n" * int(v % 13) + str(v) for v, z in zip(k, null)]),
        pa.array([str(v) * int(v % 4) for v in k], pa.large_string()),
        pa.array([bytes([int(v) % 256]) * int(v % 9) for v in k], pa.binary()),
        pa.array([int(v).to_bytes(6, "little") for v in k], pa.binary(6)),
        pa.array([None if z else list(range(int(v % 5))) for v, z in zip(k, null)],
                 pa.list_(pa.int32())),
        pa.array([[int(v)] * int(v % 3) for v in k], pa.large_list(pa.int64())),
        pa.array([[float(v), -float(v)] for v in k], pa.list_(pa.float32(), 2)),
        pa.StructArray.from_arrays([pa.array((k % 30000).astype(np.int16)),
                                    pa.array([f"p{v % 7}" for v in k])],
                                   names=["x", "label"], mask=pa.array(null)),
        pa.array([[(f"a{v % 3}", int(v))] if v % 2 else [] for v in k],
                 pa.map_(pa.string(), pa.int32())),
        pa.array([f"c{v % 5}" for v in k]).dictionary_encode().cast(
            pa.dictionary(pa.int16(), pa.string())),
        pa.nulls(n),
    ]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def buffers_of(array):
    """Every non-empty buffer of an array, its children's and dictionary's."""
    out = [b for b in array.buffers() if b is not None and b.size > 0]
    if pa.types.is_dictionary(array.type):
        out += buffers_of(array.dictionary)
    return out


def routed(table, n):
    """Each row's target: its key's hash over the ranks."""
    return ((table.column("key").to_numpy() * 2654435761) >> 7) % n


class Checker:
    def __init__(self, me, world, rows, shm):
        self.me, self.world, self.rows, self.shm = me, world, rows, shm
        self.tables = [made(r, rows) for r in range(world)]
        self.keys = []
        self.errors = []

    def expected_keys(self):
        """The keys rank `me` must receive: every row of the first quarter
        routed to it by the program, every row of the next eighth whose
        key's hash names it (as a numpy flow keyed by an int64 field
        routes), every row of the eighth after whose (city, name) hash names
        it, and every row of the second half of every source (whole
        batches, sent to every rank)."""
        out = []
        for t in self.tables:
            quarter, eighth, half = t.num_rows // 4, t.num_rows // 8, t.num_rows // 2
            first = t.slice(0, quarter)
            by_key = t.slice(quarter, eighth)
            by_names = t.slice(quarter + eighth, half - quarter - eighth)
            out.append(first.column("key").to_numpy()[routed(first, self.world) == self.me])
            keys = np.ascontiguousarray(by_key.column("key").to_numpy())
            owner = sluice._sluice.route_rows(keys.view(np.uint8), 8, 0, 8, self.world)
            out.append(keys[owner == self.me])
            batch = by_names.combine_chunks().to_batches()[0]
            owner = key_targets(batch, ["city", "name"], self.world)
            out.append(batch.column("key").to_numpy()[owner == self.me])
            out.append(t.column("key").to_numpy()[half:])
        return np.sort(np.concatenate(out))

    def check(self, batch, rings):
        batch.validate(full=True)
        keys = batch.column("key").to_numpy().copy()  # (a view would keep the segment)
        src = int(keys[0]) // self.rows
        idx = keys - src * self.rows
        expected = self.tables[src].take(pa.array(idx)).combine_chunks().to_batches()
        expected = expected[0] if expected else None
        if expected is None or not batch.equals(expected):
            self.errors.append(f"rows of source {src} differ from what it made")
        if self.shm:
            for col in batch.columns:
                for buf in buffers_of(col):
                    if not any(lo <= buf.address < hi for lo, hi in rings):
                        self.errors.append(f"a buffer of {col.type} at {buf.address:#x} lies "
                                           "outside the flow's ring")
                        return
        self.keys.append(keys)


def push_all(src, tables, me, world, big_from, failure):
    try:
        with src:
            t = tables[me]
            quarter, eighth, half = t.num_rows // 4, t.num_rows // 8, t.num_rows // 2
            for lo, hi, by in ((0, quarter, None), (quarter, quarter + eighth, "key"),
                               (quarter + eighth, half, ["city", "name"])):
                for start in range(lo, hi, 700):
                    part = t.slice(start, min(700, hi - start)).combine_chunks().to_batches()[0]
                    src.push(part, to=by if by is not None else routed(part, world))
            rest = t.slice(half).combine_chunks().to_batches()[0]
            for target in range(world):
                # one batch larger than a record (it goes as slices), then
                # slices with offsets into the buffers of the whole batch
                src.push(rest.slice(0, big_from), to=target)
                for start in range(big_from, rest.num_rows, 333):
                    src.push(rest.slice(start, 333), to=target)
    except Exception as e:  # noqa: BLE001 (reported by the caller)
        failure.append(e)


def drain(src, tgt):
    """Closes `src` (from a thread: close waits until the targets took the
    end) while `tgt` is read to the end."""
    closing = threading.Thread(target=src.close)
    closing.start()
    for _ in tgt:
        pass
    closing.join()


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    shm = (sys.argv[2] if len(sys.argv) > 2 else "shm") == "shm"
    errors = []
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        check = Checker(me, world, rows, shm)
        copied_before = sluice._sluice.batch_copied_bytes()

        # Every kind of column, shuffled; the first batch received is kept
        # while 8 more of its source arrive (its source writes on into the
        # other segments of the ring meanwhile), then checked.
        with cluster.batches("rows", SCHEMA, segment_bytes=64 * 1024) as flow:
            tgt, src = flow.target(), flow.source()
            failure = []
            pusher = threading.Thread(target=push_all,
                                      args=(src, check.tables, me, world, 1200, failure))
            pusher.start()
            rings = ring_mappings("rows") if shm else []
            kept, kept_checked, since = None, False, 0
            batches = 0
            for batch in tgt:
                check.check(batch, rings)
                batches += 1
                source = int(batch.column("key")[0].as_py()) // rows
                if kept is None and not kept_checked:
                    kept = (batch, check.tables[source], source)
                elif kept is not None and source == kept[2]:
                    since += 1
                    if since == 8:
                        keys = kept[0].column("key").to_numpy() % rows
                        like = kept[1].take(pa.array(keys)).combine_chunks().to_batches()[0]
                        if not kept[0].equals(like):
                            errors.append("a kept batch changed while the flow ran on")
                        kept, kept_checked = None, True
            pusher.join()
            errors += [f"push: {e!r}" for e in failure]
            got = np.sort(np.concatenate(check.keys))
            want = check.expected_keys()
            if got.shape != want.shape or not np.array_equal(got, want):
                errors.append(f"received {got.size} keys, expected {want.size} "
                              f"({np.setdiff1d(want, got).size} missing, "
                              f"{got.size - np.unique(got).size} twice)")
            if not kept_checked:
                errors.append("too few batches from one source to check a kept one")
            copied = sluice._sluice.batch_copied_bytes() - copied_before
            if copied:
                errors.append(f"{copied} bytes copied out of the ring")
            errors += check.errors
            totals = cluster.allgather((len(got), batches))
            del batch, kept
            if me == 0:
                print(f"OK rows keys={sum(t[0] for t in totals)} "
                      f"batches={sum(t[1] for t in totals)} copied={copied}", flush=True)

        # Keeping a whole ring: a clear error, and on once they are let go.
        small = pa.schema([("key", pa.int64())])
        if me in (0, 1):
            flow = cluster.batches("hold", small, segment_bytes=4096, ring_segments=2,
                                   sources=[(0, 0)], targets=[(1, 0)])
            if me == 0:
                with flow.source() as s:
                    for i in range(40):
                        s.push(pa.record_batch([pa.array(np.arange(100) + i * 100)],
                                               schema=small), to=0)
            elif me == 1:
                tgt = flow.target()
                held, refused, total = [], False, 0
                while True:
                    try:
                        b = tgt.consume()
                    except sluice.InvalidArgument as e:
                        if "held by record batches still alive" not in str(e):
                            errors.append(f"hold: {e}")
                            break
                        refused = True
                        total += sum(h.num_rows for h in held)
                        held = []
                        gc.collect()
                        continue
                    if b is None:
                        break
                    held.append(b)
                total += sum(h.num_rows for h in held)
                if not refused or total != 4000:
                    errors.append(f"hold: refused={refused} rows={total}")
                else:
                    print(f"OK hold rows={total} refused=True", flush=True)
            flow.destroy()
        cluster.barrier()

        # Replicate: every rank's batch at every rank.
        with cluster.batches("all", SCHEMA, replicate=True) as flow:
            tgt, src = flow.target(), flow.source()
            mine = check.tables[me].slice(0, 50).combine_chunks().to_batches()[0]
            t = threading.Thread(target=lambda: (src.push(mine), src.close()))
            t.start()
            seen = sorted(int(b.column("key")[0].as_py()) // rows for b in tgt)
            t.join()
            if seen != list(range(world)):
                errors.append(f"replicate: batches from sources {seen}")
            elif me == 0:
                print(f"OK replicate sources={world}", flush=True)

        # Refusals, each naming what was wrong.
        with cluster.batches("refuse", small) as flow:
            src, tgt = flow.source(), flow.target()
            other = pa.record_batch([pa.array([1.5])], names=["key"])
            for call, want in ((lambda: src.push(other, to=0), "carries batches of schema"),
                               (lambda: src.push(pa.record_batch([pa.array([1])], schema=small)),
                                "needs its target")):
                try:
                    call()
                    errors.append(f"refuse: no error for {want!r}")
                except sluice.InvalidArgument as e:
                    if want not in str(e):
                        errors.append(f"refuse: {e}")
            drain(src, tgt)
        union = pa.schema([("u", pa.dense_union([pa.field("a", pa.int32())]))])
        with cluster.batches("union", union) as flow:
            src, tgt = flow.source(), flow.target()
            arr = pa.UnionArray.from_dense(pa.array([0], pa.int8()), pa.array([0], pa.int32()),
                                           [pa.array([7], pa.int32())], ["a"])
            try:
                src.push(pa.record_batch([arr], schema=union), to=0)
                errors.append("union: pushed")
            except sluice.InvalidArgument as e:
                if "column 'u'" not in str(e):
                    errors.append(f"union: {e}")
            drain(src, tgt)
        if me == 0 and not errors:
            print("OK refusals", flush=True)
        failed = cluster.allgather(errors)
    exit_if_any(failed)


if __name__ == "__main__":
    main()
