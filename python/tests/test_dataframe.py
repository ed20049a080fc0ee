"""sluice.dataframe: tables repartitioned by key across ranks and DuckDB SQL
on each partition. The TPC-H example's three plans (Q1 as a distributed
GROUP BY, a join of lineitem and orders, Q3) over data DuckDB's generator
splits across the ranks, each result equal to one DuckDB's over the whole
data in every row and column (the averages bit for bit); and repartition
and gather on every column kind the module moves."""

import os
import subprocess
import sys

import pytest

from conftest import BIN, HERE, run_job


@pytest.mark.parametrize("ranks,transport", [(3, "shm"), pytest.param(2, "ofi", marks=pytest.mark.slow)])
def test_tpch_plans_equal_one_duckdb_over_the_whole_data(sluice_bin, ranks, transport):
    p = subprocess.run([str(BIN / "sluice"), "run", "-n", str(ranks), "--", sys.executable,
                        str(HERE.parent / "examples" / "tpch.py"), "--sf", "0.01", "--verify"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180,
                       env={**os.environ, "SLUICE_TRANSPORT": transport})
    assert p.returncode == 0, p.stdout
    for q in ("q1", "join", "q3"):
        assert f"verify: OK ({q}: " in p.stdout, p.stdout
    assert "MISMATCH" not in p.stdout, p.stdout
    assert "q1: 4 rows" in p.stdout and "q3: 10 rows" in p.stdout, p.stdout


def test_repartition_and_gather_move_every_column_kind_once(sluice_bin):
    status, out = run_job("dataframe.py", 3)
    assert status == 0, out
    assert "OK dataframe world=3" in out, out
    for by in ("['group']", "['small', 'day']", "['note']"):
        assert f"rows by {by}: 6500" in out, out
    assert "pandas rows by city: 410, dtypes {'id': 'int64', 'city': 'category'" in out, out
