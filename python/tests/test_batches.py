"""Flows of Arrow record batches: every kind of column exactly once and
equal to what its source made, received without a copy (buffers in the
ring, no byte copied), kept batches unchanged while the ring cycles, a
clear error when a whole ring is held, replicate, and the refusals (3
ranks, shm; ofi and ofi without RMA under slow). And the codec alone: a
batch (sliced anywhere) decodes to itself, and damaged records are refused
or decode to batches Arrow's validation accepts: never a read out of
bounds."""

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_job

pa = pytest.importorskip("pyarrow")

from sluice import InvalidArgument, _sluice  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))
from batches import SCHEMA, made  # noqa: E402


@pytest.mark.parametrize("transport,env", [
    ("shm", {}),
    pytest.param("ofi", {}, marks=pytest.mark.slow),
    pytest.param("ofi", {"SLUICE_OFI_RMA": "0"}, marks=pytest.mark.slow),
])
def test_batches_of_every_column_kind_arrive_once_without_a_copy(sluice_bin, transport, env,
                                                                   monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    status, out = run_job("batches.py", 3, "6000", transport, transport=transport)
    assert status == 0, out
    assert "OK rows keys=36000 " in out and " copied=0" in out, out
    assert "OK hold rows=4000 refused=True" in out, out
    assert "OK replicate sources=3" in out, out
    assert "OK refusals" in out, out
    assert "MISMATCH" not in out, out


def decode(record, schema=SCHEMA):
    return pa.RecordBatch._import_from_c(_sluice._batch_decode(record, schema), schema)


def test_the_codec_round_trips_every_column_kind_and_any_slice():
    whole = made(1, 400).combine_chunks().to_batches()[0]
    for start, length in ((0, 400), (1, 1), (3, 250), (7, 0), (8, 64), (13, 387), (399, 1)):
        part = whole.slice(start, length)
        got = decode(_sluice._batch_encode(part))
        got.validate(full=True)
        assert got.equals(part), (start, length)
        # a slice's record holds what the slice uses, not its parent's buffers
        if length < 100:
            assert len(_sluice._batch_encode(part)) < len(_sluice._batch_encode(whole)) // 3


def test_damaged_records_are_refused_or_decode_to_valid_batches():
    whole = made(2, 120).combine_chunks().to_batches()[0]
    records = [_sluice._batch_encode(whole.slice(s, n)) for s, n in ((0, 120), (5, 40), (9, 1))]
    rng = random.Random(7)
    refused = accepted = 0
    for i in range(3000):
        rec = bytearray(rng.choice(records))
        kind = i % 4
        if kind == 0:  # a few bytes changed anywhere
            for _ in range(rng.randint(1, 4)):
                rec[rng.randrange(len(rec))] = rng.randrange(256)
        elif kind == 1:  # a byte of the tables (sizes, offsets, counts)
            rec[rng.randrange(4, min(len(rec), 900))] ^= 1 << rng.randrange(8)
        elif kind == 2:  # cut short, or grown
            rec = rec[:rng.randrange(len(rec))] if rng.random() < 0.7 else rec + b"\0" * 64
        else:  # an 8-byte word of the tables set to a large or negative number
            at = rng.randrange(4, min(len(rec) - 8, 900)) & ~7 | 4
            rec[at:at + 8] = rng.choice([2**31, 2**63 - 1, -1 & (2**64 - 1), 10**6]).to_bytes(
                8, "little")
        try:
            batch = decode(bytes(rec))
        except InvalidArgument:
            refused += 1
            continue
        accepted += 1
        batch.validate()
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as e:
            # Bytes changed inside values are still in bounds: only the
            # values can be wrong (a string's UTF-8, a decimal's precision).
            text = str(e).lower()
            assert "utf8" in text or "utf-8" in text or "decimal value" in text, e
            continue
        batch.serialize()  # reads every buffer over the sizes Arrow derived
        try:
            batch.to_pylist()
        except (OverflowError, ValueError):  # a value Python cannot hold (a date past 9999)
            pass
    assert refused > 500 and accepted > 100, (refused, accepted)


def test_a_column_type_batch_flows_do_not_carry_is_named():
    union = pa.schema([("u", pa.dense_union([pa.field("a", pa.int32())]))])
    arr = pa.UnionArray.from_dense(pa.array([0], pa.int8()), pa.array([0], pa.int32()),
                                   [pa.array([7], pa.int32())], ["a"])
    with pytest.raises(InvalidArgument, match="column 'u' has Arrow format '\\+ud"):
        _sluice._batch_encode(pa.record_batch([arr], schema=union))
    # a record decoded under another schema than it was made with
    rec = _sluice._batch_encode(pa.record_batch([pa.array(np.arange(5))], names=["x"]))
    with pytest.raises(InvalidArgument):
        decode(rec, pa.schema([("x", pa.string())]))


def test_rows_route_by_the_hash_of_their_key_columns_as_numpy_flows_do():
    from sluice.batches import key_targets
    batch = made(0, 500).combine_chunks().to_batches()[0].slice(7, 300)
    keys = np.ascontiguousarray(batch.column("key").to_numpy())
    assert np.array_equal(key_targets(batch, ["key"], 5),
                          _sluice.route_rows(keys.view(np.uint8), 8, 0, 8, 5))
    # two columns: their bytes packed in the order named
    two = key_targets(batch, ["key", "day"], 4)
    packed = np.empty(300, [("k", "<i8"), ("d", "<i4")])
    packed["k"] = keys
    packed["d"] = batch.column("day").cast(pa.int32()).to_numpy()
    assert np.array_equal(two, _sluice.route_rows(packed.view(np.uint8), 12, 0, 12, 4))
    with pytest.raises(InvalidArgument, match="route by integers"):
        key_targets(batch, ["ints"], 3)
    with pytest.raises(InvalidArgument, match="not a column"):
        key_targets(batch, ["nope"], 3)


def row_key_bytes(batch, by):
    """Row i's key as key_targets defines it, built in Python from the
    columns' values: each value's bytes in the order named (strings UTF-8,
    no length), nothing for a null."""
    out = []
    for i in range(batch.num_rows):
        key = b""
        for name in by:
            v = batch.column(name)[i]
            if not v.is_valid:
                continue
            t = v.type.value_type if pa.types.is_dictionary(v.type) else v.type
            py = v.as_py()
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                key += py.encode()
            elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
                key += py
            elif pa.types.is_boolean(t):
                key += bytes([int(py)])
            elif pa.types.is_floating(t):
                key += np.array([py], dtype=t.to_pandas_dtype()).tobytes()
            else:  # integers, dates: the value as a little-endian integer
                if pa.types.is_temporal(t):
                    py = v.cast(pa.int32() if t.bit_width == 32 else pa.int64()).as_py()
                key += py.to_bytes(t.bit_width // 8, "little", signed=True)
        out.append(key)
    return out


def test_rows_route_by_string_binary_dictionary_and_nullable_keys():
    """Variable-width and nullable keys route by the hash of the row's key
    bytes: the target route_rows (the numpy flows' routing) gives a record
    of exactly those bytes, row by row; a null contributes no bytes, so
    rows with null keys meet on one target; and the same keys route alike
    whether sliced, dictionary-encoded, large or not."""
    from sluice.batches import key_targets
    batch = made(3, 700).combine_chunks().to_batches()[0].slice(11, 600)
    assert batch.column("name").null_count > 0 and batch.column("f64").null_count > 0
    for by in (["name"], ["big"], ["raw"], ["city"], ["f64"], ["flag"], ["name", "key"],
               ["key", "raw", "day"], ["city", "name", "flag"]):
        got = key_targets(batch, by, 7)
        want = []
        for key in row_key_bytes(batch, by):
            if not key:  # route_rows takes records of at least a byte
                want.append(int(key_targets(pa.record_batch(
                    [pa.array([None], pa.string())], names=["k"]), ["k"], 7)[0]))
                continue
            rec = np.frombuffer(key, np.uint8)
            want.append(int(_sluice.route_rows(rec, len(key), 0, len(key), 7)[0]))
        assert got.tolist() == want, by
    # a key of up to 8 bytes hashes as its zero-extended value: a string
    # key routes as a uint64 key of the same bytes (the C++ hash's rule)
    short = pa.array(["", "a", "ab", "hello", "12345678"])
    packed = np.zeros(5, "<u8")
    for i, v in enumerate(short.to_pylist()):
        packed[i] = int.from_bytes(v.encode(), "little")
    assert np.array_equal(key_targets(pa.record_batch([short], names=["s"]), ["s"], 5),
                          _sluice.route_rows(packed.view(np.uint8), 8, 0, 8, 5))
    # nulls of any type meet where an empty key goes
    nulls = pa.record_batch([pa.array([None, 5, None], pa.int64()),
                             pa.array([None, "x", None])], names=["i", "s"])
    i_t, s_t = key_targets(nulls, ["i"], 9), key_targets(nulls, ["s"], 9)
    assert i_t[0] == i_t[2] == s_t[0] == s_t[2]
    # one key routes alike in every encoding of it
    words = [f"w{v % 37}" * (v % 5) for v in range(500)]
    plain = key_targets(pa.record_batch([pa.array(words)], names=["w"]), ["w"], 6)
    for arr in (pa.array(words, pa.large_string()), pa.array(words).dictionary_encode(),
                pa.array([w.encode() for w in words], pa.binary())):
        assert np.array_equal(key_targets(pa.record_batch([arr], names=["w"]), ["w"], 6), plain)
    sliced = pa.record_batch([pa.array(["pad"] * 3 + words)], names=["w"]).slice(3)
    assert np.array_equal(key_targets(sliced, ["w"], 6), plain)
    # spread: 20,000 distinct strings over 8 targets, each within 10% of even
    many = pa.record_batch([pa.array([f"user-{v}@example.org" for v in range(20_000)])],
                           names=["u"])
    counts = np.bincount(key_targets(many, ["u"], 8), minlength=8)
    assert counts.min() > 2500 * 0.9 and counts.max() < 2500 * 1.1, counts
    assert key_targets(batch.slice(0, 0), ["name"], 3).size == 0
