"""sluice.dataframe's repartition, broadcast and gather on a table of many column kinds
(integers, floats, booleans, decimals, dates, timestamps, strings with
non-ASCII bytes, embedded NULs and empty values, binaries, lists, a
dictionary-encoded column, nulls), keyed by one column, by two and by a
string column with nulls: every row arrives once (rank 0 compares the
union of the partitions with the union of the inputs, row for row), each
key on exactly one rank, the schema kept; a rank with no rows takes part; a
schema that differs on one rank and a key column that cannot be hashed
raise InvalidArgument on every rank, naming them. A pandas DataFrame per
rank (nullable integers, a categorical, datetimes, strings, its own index)
repartitioned by its categorical column comes back, gathered and turned
into pandas again, as the union of the inputs with every dtype kept (the
index is not moved). Rank 0 prints `OK dataframe ...` or the program exits
1."""

import datetime
import decimal
import sys

import pandas as pd
import pyarrow as pa

import sluice
from sluice import dataframe as sdf


def table_of(rank: int, rows: int) -> pa.Table:
    ids = [rank * 1_000_000 + i for i in range(rows)]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "group": pa.array([f"g{i % 7}" if i % 11 else "gé\u00e9" for i in range(rows)],
                          pa.string()),
        "small": pa.array([i % 5 for i in range(rows)], pa.int8()),
        "price": pa.array([decimal.Decimal(i * 37 % 100_000) / 100 for i in range(rows)],
                          pa.decimal128(15, 2)),
        "ratio": pa.array([i / 3 for i in range(rows)], pa.float64()),
        "flag": pa.array([(i % 3 == 0) if i % 13 else None for i in range(rows)], pa.bool_()),
        "day": pa.array([datetime.date(1995, 1, 1) + datetime.timedelta(days=i % 900)
                         for i in range(rows)], pa.date32()),
        "at": pa.array([1_600_000_000_000_000 + i for i in range(rows)], pa.timestamp("us")),
        "note": pa.array([None if i % 17 == 0 else ("" if i % 5 == 0 else "x\0y" * (i % 4))
                          for i in range(rows)], pa.string()),
        "blob": pa.array([bytes([i % 256, 0, 255])[: i % 4] for i in range(rows)], pa.binary()),
        "tags": pa.array([[i, i + 1][: i % 3] if i % 19 else None for i in range(rows)],
                         pa.list_(pa.int32())),
        "kind": pa.array([f"k{i % 4}" for i in range(rows)],
                         pa.string()).dictionary_encode().cast(pa.dictionary(pa.int32(),
                                                                             pa.string())),
    })


def frame_of(rank: int, rows: int) -> pd.DataFrame:
    return pd.DataFrame({
        "id": pd.array([rank * 1_000_000 + i for i in range(rows)], dtype="int64"),
        "city": pd.Categorical([["Oslo", "Lima", "Pune", "Graz"][i % 4] for i in range(rows)],
                               categories=["Graz", "Lima", "Oslo", "Pune"]),
        "score": pd.array([i * 0.25 for i in range(rows)], dtype="float64"),
        "n": pd.array([None if i % 6 == 0 else i for i in range(rows)], dtype="Int64"),
        # (dtypes given: an empty column's would be inferred otherwise, and
        # differ from the other ranks' schema)
        "when": pd.to_datetime([1_700_000_000 + 60 * i for i in range(rows)], unit="s")
        .astype("datetime64[us]"),
        "name": pd.array([f"r{rank}-{i}" for i in range(rows)], dtype="str"),
    }, index=pd.RangeIndex(rank * 10, rank * 10 + rows))


def sorted_rows(t: pa.Table) -> list:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


with sluice.Cluster.from_env() as cluster:
    me, world = cluster.rank, cluster.world_size
    errors = []
    # The last rank has no rows: it takes part all the same.
    # (Schema metadata that differs from rank to rank, as pandas' does, is
    # not a different schema.)
    mine = table_of(me, 0 if me == world - 1 else 3000 + 500 * me).replace_schema_metadata(
        {"made by": f"rank {me}"})
    everyone = cluster.allgather(mine.to_pylist())

    for by in (["group"], ["small", "day"], ["note"]):
        part = sdf.repartition(cluster, mine, by=by)
        if part.schema != mine.schema:
            errors.append(f"by {by}: schema {part.schema} instead of {mine.schema}")
        keys = {tuple(r[k] for k in by) for r in part.to_pylist()}
        all_keys = cluster.allgather(keys)
        for r in range(world):
            for s in range(r + 1, world):
                if all_keys[r] & all_keys[s]:
                    errors.append(f"by {by}: keys {sorted(all_keys[r] & all_keys[s])[:3]} on "
                                  f"ranks {r} and {s}")
        got = sdf.gather(cluster, part, root=world - 1)
        if (got is None) != (me != world - 1):
            errors.append(f"by {by}: gather gave {type(got)} on rank {me}")
        if me == world - 1:
            want = sorted((row for rows in everyone for row in rows), key=lambda r: r["id"])
            have = sorted_rows(got)
            if have != want:
                diff = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), None)
                errors.append(f"by {by}: {len(have)} rows gathered, {len(want)} made; first "
                              f"difference at {diff}")
            else:
                print(f"rows by {by}: {len(have)}", flush=True)

    # Broadcast: every rank gets every rank's rows once (its own included),
    # with the schema kept.
    every = sdf.broadcast(cluster, mine)
    want = sorted((row for rows in everyone for row in rows), key=lambda r: r["id"])
    if every.schema != mine.schema:
        errors.append(f"broadcast: schema {every.schema} instead of {mine.schema}")
    have = sorted_rows(every)
    if have != want:
        diff = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), None)
        errors.append(f"broadcast: rank {me} got {len(have)} rows, {len(want)} made; first "
                      f"difference at {diff}")
    elif me == 0:
        print(f"broadcast rows on every rank: {len(have)}", flush=True)

    # pandas in, pandas back.
    frames = [frame_of(r, 0 if r == world - 1 else 200 + 10 * r) for r in range(world)]
    part = sdf.repartition(cluster, frames[me], by="city")
    cities = cluster.allgather(set(part.to_pandas()["city"].astype(str)))
    for r in range(world):
        for s in range(r + 1, world):
            if cities[r] & cities[s]:
                errors.append(f"pandas: cities {sorted(cities[r] & cities[s])} on ranks {r}, {s}")
    got = sdf.gather(cluster, part, root=0)
    if me == 0:
        have = got.to_pandas().sort_values("id").reset_index(drop=True)
        want = pd.concat(frames, ignore_index=True).sort_values("id").reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(have, want, check_dtype=True, check_categorical=True)
            print(f"pandas rows by city: {len(have)}, dtypes {dict(have.dtypes.astype(str))}",
                  flush=True)
        except AssertionError as e:
            errors.append(f"pandas: {e}")

    # A schema that differs on one rank: every rank refuses, naming it.
    odd = mine if me != 1 else mine.drop_columns(["blob"])
    try:
        sdf.repartition(cluster, odd, by="id")
        errors.append("a differing schema was not refused")
    except sluice.InvalidArgument as e:
        if "rank 1's table has another schema" not in str(e) and me != 1:
            errors.append(f"the differing schema's error: {e}")
    # A key column that cannot be hashed.
    try:
        sdf.repartition(cluster, pa.table({"k": [1], "l": pa.array([[1, 2]])}), by="l")
        errors.append("a list key was not refused")
    except sluice.InvalidArgument as e:
        if "key column 'l' is of type list<item: int64>" not in str(e):
            errors.append(f"the list key's error: {e}")

    errors = [e for errs in cluster.allgather(errors) for e in errs]
    if me == 0:
        if errors:
            print("MISMATCH " + "; ".join(errors), flush=True)
            sys.exit(1)
        print(f"OK dataframe world={world}", flush=True)
