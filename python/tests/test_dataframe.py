"""sluice.dataframe: tables repartitioned by key across ranks and DuckDB SQL
on each partition. The TPC-H example's four plans (Q1 as a distributed
GROUP BY, a join of lineitem and orders as a broadcast join and as a
repartition join, Q3 with broadcast joins) over data DuckDB's generator
splits across the ranks, each result equal to one DuckDB's over the whole
data in every row and column (the averages bit for bit); and repartition
and gather on every column kind the module moves."""

import os
import subprocess
import sys

import pytest

from conftest import BIN, HERE, run_job


PLANS = ("q1", "join", "join-broadcast", "join-shuffle", "q3", "q3-broadcast")


@pytest.mark.parametrize("ranks,transport", [(3, "shm"), pytest.param(2, "ofi", marks=pytest.mark.slow)])
def test_tpch_plans_equal_one_duckdb_over_the_whole_data(sluice_bin, ranks, transport):
    p = subprocess.run([str(BIN / "sluice"), "run", "-n", str(ranks), "--", sys.executable,
                        str(HERE.parent / "examples" / "tpch.py"), "--sf", "0.01", "--verify",
                        "--queries", ",".join(PLANS), "--repeat", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180,
                       env={**os.environ, "SLUICE_TRANSPORT": transport})
    assert p.returncode == 0, p.stdout
    for q in PLANS:
        assert f"verify: OK ({q}: " in p.stdout, p.stdout
        assert f"{q}: " in p.stdout and "(median of 2 runs; the first " in p.stdout, p.stdout
    assert p.stdout.count("; the first runs: ") == len(PLANS), p.stdout
    assert "MISMATCH" not in p.stdout, p.stdout
    assert "q1: 4 rows" in p.stdout and "q3: 10 rows" in p.stdout, p.stdout
    # The co-located join moves nothing; its broadcast and shuffle forms do.
    assert "join: 5 rows in " in p.stdout and "; 0 rows exchanged)" in p.stdout, p.stdout


def test_repartition_and_gather_move_every_column_kind_once(sluice_bin):
    status, out = run_job("dataframe.py", 3)
    assert status == 0, out
    assert "OK dataframe world=3" in out, out
    assert "broadcast rows on every rank: 6500" in out, out
    for by in ("['group']", "['small', 'day']", "['note']"):
        assert f"rows by {by}: 6500" in out, out
    assert "pandas rows by city: 410, dtypes {'id': 'int64', 'city': 'category'" in out, out


def test_the_example_under_a_memory_limit_verifies_and_leaves_no_spill_directory(sluice_bin,
                                                                                  tmp_path):
    """--memory-limit gives every process's DuckDB that limit and a spill
    directory of its own under --temp-dir, removed when the process ends."""
    spill = tmp_path / "spill"
    p = subprocess.run([str(BIN / "sluice"), "run", "-n", "2", "--", sys.executable,
                        str(HERE.parent / "examples" / "tpch.py"), "--sf", "0.01", "--verify",
                        "--queries", "join", "--memory-limit", "64MB", "--temp-dir", str(spill)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    assert "verify: OK (join: " in p.stdout, p.stdout
    assert "peak resident memory per rank (MiB): " in p.stdout, p.stdout
    assert spill.is_dir() and list(spill.iterdir()) == [], list(spill.iterdir())


def test_sql_runs_on_the_connection_given_and_unregisters_its_tables():
    duckdb = pytest.importorskip("duckdb")
    pa = pytest.importorskip("pyarrow")
    from sluice import dataframe as sdf

    con = duckdb.connect(config={"threads": 1})
    table = pa.table({"a": [1, 2, 3]})
    got = sdf.sql("SELECT sum(a) AS s, current_setting('threads') AS threads FROM numbers_in",
                  con, numbers_in=table)
    assert got.to_pylist() == [{"s": 6, "threads": 1}]
    with pytest.raises(duckdb.CatalogException):
        con.sql("SELECT * FROM numbers_in").fetchall()
    # Without a connection: a fresh one with DuckDB's defaults.
    assert sdf.sql("SELECT count(*) AS n FROM t", t=table).to_pylist() == [{"n": 3}]
