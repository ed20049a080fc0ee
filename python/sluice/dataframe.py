"""sluice.dataframe: tables repartitioned by key across the ranks of a job,
and DuckDB SQL on each rank's partition.

Each rank holds a part of a table (an Arrow table, a pandas DataFrame or a
DuckDB relation); ``repartition(cluster, table, by=...)`` moves every row to
the rank that owns its key (a hash of the key columns, the flows' own), so
that rows with equal keys meet on one rank and a GROUP BY or a join on the
key runs there alone::

    import duckdb
    import sluice
    from sluice import dataframe as sdf

    with sluice.Cluster.from_env() as cluster:
        con = duckdb.connect()
        con.execute(f"CALL dbgen(sf=1, children={cluster.world_size}, step={cluster.rank})")
        lineitem = sdf.repartition(cluster, con.sql("SELECT * FROM lineitem"), by="l_orderkey")
        orders = sdf.repartition(cluster, con.sql("SELECT * FROM orders"), by="o_orderkey")
        part = sdf.sql("SELECT count(*) AS n FROM lineitem JOIN orders ON l_orderkey = o_orderkey",
                       lineitem=lineitem, orders=orders)
        everything = sdf.gather(cluster, part)     # rank 0: every rank's rows; others: None

Rows travel as numpy records of one flow (``Cluster.shuffle``): every
column becomes a fixed-width field (integers, floats, booleans, dates,
times, timestamps, durations and decimals as their Arrow values; strings
and binaries as a field as wide as the longest value on any rank, beside
their length), so a long free-text column costs its widest value in every
row: select the columns a query needs before moving them. A column with
nulls on any rank carries a validity field too. Every rank calls each
function in the same order (they are collectives), with tables of the same
schema; ``InvalidArgument`` names a rank whose schema differs and a column
of a type that cannot travel (lists, structs, dictionaries, ...).

Needs pyarrow (and duckdb for ``sql``): ``pip install sluice[dataframe]``.
"""

from __future__ import annotations

import itertools
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import Cluster, InvalidArgument, View

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - the module's one hard need
    raise ImportError("sluice.dataframe needs pyarrow: pip install pyarrow") from e

__all__ = ["repartition", "gather", "sql", "to_table", "exact_mean"]

_KEY = "__sluice_key"
_names = itertools.count()  # flow names, the same sequence on every rank


def to_table(data: Any) -> "pa.Table":
    """``data`` as an Arrow table: an Arrow table or record batch, a DuckDB
    relation (``.arrow()``) or a pandas DataFrame (its index dropped)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "arrow") and callable(data.arrow):  # a DuckDB relation
        t = data.arrow()
        return t if isinstance(t, pa.Table) else t.read_all()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise InvalidArgument(f"sluice.dataframe takes an Arrow table or record batch, a DuckDB "
                          f"relation or a pandas DataFrame, not {type(data).__name__}")


# How one column travels: "fixed" (its values' bytes), "bool" (a byte per
# value), "string" (a fixed-width field and a length).
def _kind(name: str, t: "pa.DataType") -> Tuple[str, Optional[np.dtype]]:
    if pa.types.is_boolean(t):
        return "bool", np.dtype("?")
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return "string", None
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return "string", None
    if pa.types.is_decimal(t) or (pa.types.is_fixed_size_binary(t)):
        return "fixed", np.dtype(f"V{t.byte_width}")
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)) and \
            t.bit_width % 8 == 0:
        return "fixed", np.dtype(f"V{t.bit_width // 8}")
    raise InvalidArgument(f"sluice.dataframe: column {name!r} is of type {t}, which cannot "
                          "travel (fixed-width values, decimals, booleans, strings and "
                          "binaries can)")


def _bits(buf: Optional["pa.Buffer"], offset: int, n: int) -> Optional[np.ndarray]:
    if buf is None:
        return None
    return np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")[offset:offset + n] \
        .astype(bool)


class _Layout:
    """The record every rank agreed on for one table: its numpy dtype and
    how each column fills and is rebuilt from it."""

    def __init__(self, schema: "pa.Schema", by: Sequence[str], widths: dict, nullable: set):
        self.schema = schema
        self.by = list(by)
        self.columns = []  # (name, type, kind, field dtype, width, nullable)
        key_fields, body_fields = [], []
        for f in schema:
            kind, dt = _kind(f.name, f.type)
            width = 0
            if kind == "string":
                width = max(1, widths.get(f.name, 0))
                dt = np.dtype(f"S{width}")
            fields = [(f.name, dt)]
            if kind == "string":
                fields.append((f"{f.name}.len", np.dtype("<u4")))
            if f.name in nullable:
                fields.append((f"{f.name}.valid", np.dtype("?")))
            (key_fields if f.name in self.by else body_fields).extend(fields)
            self.columns.append((f.name, f.type, kind, dt, width, f.name in nullable))
        if self.by:
            # The key columns side by side in one field, which the flow hashes.
            self.dtype = np.dtype([(_KEY, np.dtype(key_fields))] + body_fields)
        else:
            self.dtype = np.dtype(body_fields)

    def _place(self, rec: np.ndarray, name: str) -> np.ndarray:
        return rec[_KEY][name] if name in self.by else rec[name]

    def records(self, table: "pa.Table") -> np.ndarray:
        n = table.num_rows
        rec = np.zeros(n, self.dtype)
        for (name, t, kind, dt, width, nullable), col in zip(self.columns, table.columns):
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            if n == 0:
                continue
            bufs = arr.buffers()
            valid = _bits(bufs[0], arr.offset, n)
            dest = rec[_KEY] if name in self.by else rec
            if kind == "bool":
                dest[name] = _bits(bufs[1], arr.offset, n)
            elif kind == "fixed":
                dest[name] = np.frombuffer(bufs[1], dt, count=n, offset=arr.offset * dt.itemsize)
            else:
                wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
                offsets = np.frombuffer(bufs[1], np.int64 if wide else np.int32, count=n + 1,
                                        offset=arr.offset * (8 if wide else 4)).astype(np.int64)
                lengths = np.diff(offsets)
                if valid is not None:
                    lengths = np.where(valid, lengths, 0)
                data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else \
                    np.empty(0, np.uint8)
                # Row i's field: the `width` bytes from its offset (a window
                # of the data, read past its end into the next values, then
                # zeroed past its length).
                padded = np.concatenate([data[:offsets[-1]], np.zeros(width, np.uint8)])
                windows = np.lib.stride_tricks.sliding_window_view(padded, width)
                mat = windows[offsets[:-1]]
                mat[np.arange(width)[None, :] >= lengths[:, None]] = 0
                dest[name] = mat.view(dt).reshape(n)
                dest[f"{name}.len"] = lengths
            if nullable:
                dest[f"{name}.valid"] = True if valid is None else valid
                if valid is not None and kind != "string":
                    # Arrow leaves a null's value undefined: zeros, so that
                    # equal keys are equal bytes.
                    dest[name][~valid] = np.zeros(1, dest[name].dtype)[0]
        return rec

    def table(self, rec: np.ndarray) -> "pa.Table":
        n = len(rec)
        arrays = []
        for name, t, kind, dt, width, nullable in self.columns:
            src = rec[_KEY] if name in self.by else rec
            validity = None
            if nullable:
                validity = pa.py_buffer(np.packbits(src[f"{name}.valid"], bitorder="little"))
            if kind == "bool":
                data = pa.py_buffer(np.packbits(src[name], bitorder="little"))
                arrays.append(pa.Array.from_buffers(t, n, [validity, data]))
            elif kind == "fixed":
                data = pa.py_buffer(np.ascontiguousarray(src[name]))
                arrays.append(pa.Array.from_buffers(t, n, [validity, data]))
            else:
                wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
                lengths = src[f"{name}.len"].astype(np.int64)
                offsets = np.zeros(n + 1, np.int64)
                np.cumsum(lengths, out=offsets[1:])
                if not wide and offsets[-1] > np.iinfo(np.int32).max:
                    raise InvalidArgument(f"sluice.dataframe: column {name!r} holds more than "
                                          f"2 GiB on this rank; make it {t} -> large_{t}")
                mat = np.ascontiguousarray(src[name]).view(np.uint8).reshape(n, width)
                data = mat[np.arange(width)[None, :] < lengths[:, None]]
                arrays.append(pa.Array.from_buffers(
                    t, n, [validity, pa.py_buffer(offsets.astype(np.int64 if wide else np.int32)),
                           pa.py_buffer(np.ascontiguousarray(data))]))
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _describe(table: "pa.Table") -> dict:
    widths, nulls = {}, []
    for f, col in zip(table.schema, table.columns):
        if col.null_count:
            nulls.append(f.name)
        if _kind(f.name, f.type)[0] == "string" and table.num_rows:
            import pyarrow.compute as pc
            longest = pc.max(pc.binary_length(col)).as_py()
            widths[f.name] = int(longest or 0)
    return {"schema": table.schema.serialize().to_pybytes(), "widths": widths, "nulls": nulls}


def _agree_layout(cluster: Cluster, table: "pa.Table", by: Sequence[str],
                  view: Optional[View]) -> _Layout:
    mine = _describe(table)
    got = cluster.allgather(mine, view=view)
    parts = list(got.values) if view is not None else got
    ranks = list(got.ranks) if view is not None else list(range(len(parts)))
    widths, nulls = {}, set()
    for rank, p in zip(ranks, parts):
        if p["schema"] != mine["schema"]:
            theirs = pa.ipc.read_schema(pa.py_buffer(p["schema"]))
            raise InvalidArgument(f"sluice.dataframe: rank {rank}'s table has another schema "
                                  f"({theirs.to_string(show_schema_metadata=False)!r}) than "
                                  f"rank {cluster.rank}'s "
                                  f"({table.schema.to_string(show_schema_metadata=False)!r})")
        for k, w in p["widths"].items():
            widths[k] = max(widths.get(k, 0), w)
        nulls.update(p["nulls"])
    return _Layout(table.schema, by, widths, nulls)


def _exchange(cluster: Cluster, table: "pa.Table", by: Sequence[str], root: Optional[int],
              name: Optional[str], view: Optional[View]) -> "pa.Table":
    layout = _agree_layout(cluster, table, by, view)
    rec = layout.records(table)
    flow_name = name or f"sluice.dataframe.{next(_names)}"
    seg = max(1 << 16, layout.dtype.itemsize)
    with cluster.shuffle(flow_name, layout.dtype, key=_KEY if by else None, segment_bytes=seg,
                         view=view) as flow:
        targets = None
        if root is not None:
            targets = np.full(len(rec), flow.targets.index((root, 0)), np.uint32)
        got = flow.exchange(rec, targets)
    return layout.table(got)


def repartition(cluster: Cluster, data: Any, by: Union[str, Sequence[str]],
                name: Optional[str] = None, view: Optional[View] = None) -> "pa.Table":
    """This rank's partition of the job's table by the key columns ``by``:
    every rank passes its part of the table (same schema everywhere) and
    gets back the rows whose key it owns (a hash of the key columns'
    values, so equal keys meet on one rank), as an Arrow table. A
    collective: every rank calls it (with ``view``: every member of the
    view, the flow re-formed among them; ``ViewChanged`` as for
    ``Cluster.shuffle``)."""
    table = to_table(data)
    by = [by] if isinstance(by, str) else list(by)
    if not by:
        raise InvalidArgument("sluice.dataframe.repartition: by names no column")
    for k in by:
        if k not in table.schema.names:
            raise InvalidArgument(f"sluice.dataframe.repartition: by names {k!r}, which is not "
                                  f"a column of the table ({', '.join(table.schema.names)})")
    return _exchange(cluster, table, by, None, name, view)


def gather(cluster: Cluster, data: Any, root: int = 0, name: Optional[str] = None,
           view: Optional[View] = None) -> Optional["pa.Table"]:
    """Every rank's rows on rank ``root`` (in no promised order), as an
    Arrow table; None on the other ranks. A collective, as ``repartition``."""
    table = to_table(data)
    got = _exchange(cluster, table, [], root, name, view)
    return got if cluster.rank == root else None


def exact_mean(sums: Any, counts: Any) -> "pa.Array":
    """The means of exact sums (``sums``: decimals or integers, e.g. the sum
    of per-rank partial sums) over ``counts``, as DuckDB's ``avg`` computes
    them: the sum's unscaled integer divided once by count x 10^scale in
    long double and rounded to double, so that a mean recombined from
    partials equals DuckDB's ``avg`` over the whole data bit for bit (where
    the sums' unscaled values stay within 64 bits). A float64 Arrow array."""
    sums = pa.chunked_array([sums]).combine_chunks() if not isinstance(sums, pa.ChunkedArray) \
        else sums.combine_chunks()
    counts = np.asarray(counts.to_numpy() if hasattr(counts, "to_numpy") else counts)
    n = len(sums)
    if pa.types.is_decimal(sums.type):
        if sums.type.byte_width != 16:
            raise InvalidArgument(f"sluice.dataframe.exact_mean: {sums.type} (decimal128 only)")
        words = np.frombuffer(sums.buffers()[1], np.int64, count=2 * n, offset=sums.offset * 16)
        lo, hi = words[0::2], words[1::2]
        # Within 64 bits the high word is the low word's sign: the low word
        # alone is the value, exactly representable in long double.
        unscaled = lo.astype(np.longdouble)
        wide = hi != (lo >> 63)
        if wide.any():
            unscaled[wide] = hi[wide].astype(np.longdouble) * np.longdouble(2.0**64) + \
                lo[wide].view(np.uint64).astype(np.longdouble)
        scale = np.longdouble(float(10**sums.type.scale))
    elif pa.types.is_integer(sums.type):
        unscaled = sums.to_numpy(zero_copy_only=False).astype(np.longdouble)
        scale = np.longdouble(1.0)
    else:
        raise InvalidArgument(f"sluice.dataframe.exact_mean: sums of {sums.type} (decimals or "
                              "integers; a float sum has no exact mean)")
    divisor = counts.astype(np.longdouble) * scale
    means = (unscaled / divisor).astype(np.float64)
    validity = sums.buffers()[0]
    return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(means)])


def sql(query: str, **tables: Any) -> "pa.Table":
    """Runs ``query`` with DuckDB on this rank alone, over the tables passed
    by name (``sql("SELECT ... FROM t", t=table)``), and returns the result
    as an Arrow table."""
    import duckdb

    con = duckdb.connect()
    try:
        for table_name, data in tables.items():
            con.register(table_name, to_table(data))
        return to_table(con.sql(query))
    finally:
        con.close()
