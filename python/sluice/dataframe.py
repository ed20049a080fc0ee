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

Rows travel as Arrow IPC streams, one from every rank to every rank
(``Cluster.alltoallv``, through a flow of byte records, not the registry),
so any Arrow type goes (lists, structs, dictionaries, nulls); a received
table's buffers are views of the bytes that arrived (one copy out of the
flow's rings, none after). The key columns are hashed as one fixed-size
record: integers, floats, booleans, dates, times, timestamps, durations,
decimals, strings and binaries can be keys (a string as wide as the longest
key value on any rank, agreed first), and tables to be joined on a key must
give it the same type on both sides. Every rank calls each function in the
same order (they are collectives), with tables of the same schema;
``InvalidArgument`` names a rank whose schema differs and a key column of a
type that cannot be hashed.

Needs pyarrow (and duckdb for ``sql``): ``pip install sluice[dataframe]``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import Cluster, InvalidArgument, View, _sluice

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - the module's one hard need
    raise ImportError("sluice.dataframe needs pyarrow: pip install pyarrow") from e

__all__ = ["repartition", "gather", "sql", "to_table", "exact_mean"]


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


# How a key column is hashed: "fixed" (its values' bytes), "bool" (a byte
# per value), "string" (a fixed-width field and a length). A dictionary-
# encoded column (a pandas categorical) is hashed by its values, decoded
# (_key_columns): its indices differ from rank to rank.
def _key_kind(name: str, t: "pa.DataType") -> Tuple[str, Optional[np.dtype]]:
    if pa.types.is_dictionary(t):
        return _key_kind(name, t.value_type)
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
    raise InvalidArgument(f"sluice.dataframe: key column {name!r} is of type {t}, which cannot "
                          "be hashed (keys of fixed-width values, decimals, booleans, strings "
                          "and binaries can)")


def _bits(buf: Optional["pa.Buffer"], offset: int, n: int) -> Optional[np.ndarray]:
    if buf is None:
        return None
    return np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")[offset:offset + n] \
        .astype(bool)


class _KeyLayout:
    """The key columns of a row as one fixed-size record that every rank
    builds alike (strings as wide as the longest on any rank, beside their
    length; a validity byte where any rank has nulls; a null's bytes
    zeroed), so that equal keys are equal bytes and hash to one rank."""

    def __init__(self, schema: "pa.Schema", widths: dict, nullable: set):
        self.columns = []  # (name, type, kind, field dtype, width, nullable)
        fields = []
        for f in schema:
            kind, dt = _key_kind(f.name, f.type)
            width = 0
            if kind == "string":
                width = max(1, widths.get(f.name, 0))
                dt = np.dtype(f"S{width}")
            fields.append((f.name, dt))
            if kind == "string":
                fields.append((f"{f.name}.len", np.dtype("<u4")))
            if f.name in nullable:
                fields.append((f"{f.name}.valid", np.dtype("?")))
            self.columns.append((f.name, f.type, kind, dt, width, f.name in nullable))
        self.dtype = np.dtype(fields)

    def records(self, table: "pa.Table") -> np.ndarray:
        n = table.num_rows
        rec = np.zeros(n, self.dtype)
        if n == 0:
            return rec
        for (name, t, kind, dt, width, nullable), col in zip(self.columns, table.columns):
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            bufs = arr.buffers()
            valid = _bits(bufs[0], arr.offset, n)
            if kind == "bool":
                rec[name] = _bits(bufs[1], arr.offset, n)
            elif kind == "fixed":
                rec[name] = np.frombuffer(bufs[1], dt, count=n, offset=arr.offset * dt.itemsize)
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
                rec[name] = mat.view(dt).reshape(n)
                rec[f"{name}.len"] = lengths
            if nullable:
                rec[f"{name}.valid"] = True if valid is None else valid
                if valid is not None and kind != "string":
                    # Arrow leaves a null's value undefined: zeros, so that
                    # equal keys are equal bytes.
                    rec[name][~valid] = np.zeros(1, rec[name].dtype)[0]
        return rec


def _key_columns(table: "pa.Table", by: Sequence[str]) -> "pa.Table":
    """The key columns of `table`, dictionary-encoded ones decoded."""
    keys = table.select(by)
    for i, f in enumerate(keys.schema):
        if pa.types.is_dictionary(f.type):
            keys = keys.set_column(i, pa.field(f.name, f.type.value_type, f.nullable),
                                   keys.column(i).cast(f.type.value_type))
    return keys


def _describe(table: "pa.Table", by: Sequence[str]) -> dict:
    widths, nulls = {}, []
    keys = _key_columns(table, by)
    for k in by:
        col = keys.column(k)
        if col.null_count:
            nulls.append(k)
        if _key_kind(k, col.type)[0] == "string" and table.num_rows:
            import pyarrow.compute as pc
            longest = pc.max(pc.binary_length(col)).as_py()
            widths[k] = int(longest or 0)
    # (compared without metadata: pandas' differs from rank to rank)
    return {"schema": table.schema.remove_metadata().serialize().to_pybytes(), "widths": widths,
            "nulls": nulls}


def _agree(cluster: Cluster, table: "pa.Table", by: Sequence[str],
           view: Optional[View]) -> _KeyLayout:
    mine = _describe(table, by)
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
    return _KeyLayout(_key_columns(table.slice(0, 0), by).schema, widths, nulls)


def _ipc(table: "pa.Table") -> Any:
    if table.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _exchange(cluster: Cluster, table: "pa.Table", by: Sequence[str], root: Optional[int],
              view: Optional[View]) -> "pa.Table":
    keys = _agree(cluster, table, by, view)
    ranks = list(view.members) if view is not None else list(range(cluster.world_size))
    n = len(ranks)
    if root is not None:
        parts = [table.slice(0, 0)] * n
        parts[ranks.index(root)] = table
    else:
        rec = keys.records(_key_columns(table, by))
        targets = _sluice.route_rows(rec.view(np.uint8), rec.dtype.itemsize, 0,
                                     rec.dtype.itemsize, n)
        order = np.argsort(targets, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(targets, minlength=n))])
        ordered = table.take(pa.array(order)) if table.num_rows else table
        parts = [ordered.slice(starts[i], starts[i + 1] - starts[i]) for i in range(n)]
    got = cluster.alltoallv([_ipc(p) for p in parts], view=view)
    # Each stream is read where it landed: the tables' buffers are views of
    # the received bytes.
    tables = [pa.ipc.open_stream(pa.py_buffer(b)).read_all().replace_schema_metadata(
        table.schema.metadata) for b in got if len(b)]
    return pa.concat_tables([table.slice(0, 0)] + tables) if tables else table.slice(0, 0)


def repartition(cluster: Cluster, data: Any, by: Union[str, Sequence[str]],
                view: Optional[View] = None) -> "pa.Table":
    """This rank's partition of the job's table by the key columns ``by``:
    every rank passes its part of the table (same schema everywhere) and
    gets back the rows whose key it owns (a hash of the key columns'
    values, so equal keys meet on one rank), as an Arrow table. A
    collective: every rank calls it (with ``view``: every member of the
    view, the exchange among them; ``ViewChanged`` as for
    ``Cluster.alltoallv``)."""
    table = to_table(data)
    by = [by] if isinstance(by, str) else list(by)
    if not by:
        raise InvalidArgument("sluice.dataframe.repartition: by names no column")
    for k in by:
        if k not in table.schema.names:
            raise InvalidArgument(f"sluice.dataframe.repartition: by names {k!r}, which is not "
                                  f"a column of the table ({', '.join(table.schema.names)})")
        _key_kind(k, table.schema.field(k).type)
    return _exchange(cluster, table, by, None, view)


def gather(cluster: Cluster, data: Any, root: int = 0,
           view: Optional[View] = None) -> Optional["pa.Table"]:
    """Every rank's rows on rank ``root`` (in no promised order), as an
    Arrow table; None on the other ranks. A collective, as ``repartition``."""
    table = to_table(data)
    got = _exchange(cluster, table, [], root, view)
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
