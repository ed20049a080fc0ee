"""Flows of numpy records between processes: exactly once (counts and
order-independent checksums against what every rank made), every record at
the rank its key routes to, over shm and ofi, and 1-, 2-, 4- and 8-byte
words (records of 32 and 3 bytes); combiner flows whose groups equal
numpy's grouping of every rank's records."""

import pytest

from conftest import run_job


@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi", marks=pytest.mark.slow)])
def test_shuffle_exchange_ends_small_records_and_replicate(sluice_bin, transport):
    status, out = run_job("shuffle.py", 3, "--records", "60000", transport=transport)
    assert status == 0, out
    for name in ("exchange", "ends", "small", "pair", "wide", "replicate"):
        assert f"OK {name} records=" in out, out
    assert "OK exchange records=180000 " in out, out
    assert "OK replicate records=9000" in out, out
    assert "MISMATCH" not in out, out


def test_collectives_of_objects_and_arrays(sluice_bin):
    status, out = run_job("collectives.py", 4)
    assert status == 0, out
    assert "OK collectives world=4" in out, out


def test_a_rank_killed_from_outside_raises_peer_lost_naming_it_in_every_survivor(sluice_bin):
    status, out = run_job("peer_lost.py", 3,
                          launcher_args=("--keep-going", "--faults-after", "pushing",
                                         "--kill", "1@0.3"),
                          timeout=120)
    survivors = [line for line in out.splitlines() if "PeerLost rank=" in line]
    assert len(survivors) == 2, out
    assert all("PeerLost rank=1:" in line for line in survivors), out
    assert status == 0, out


def test_the_docs_example_runs_as_printed(sluice_bin):
    import subprocess, sys
    from conftest import BIN, HERE
    p = subprocess.run([str(BIN / "sluice"), "run", "-n", "2", "--", sys.executable,
                        str(HERE.parent / "examples" / "orders.py")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "orders: 200000" in p.stdout, p.stdout


def test_python_dash_m_sluice_runs_the_launcher(sluice_bin):
    import subprocess, sys
    from conftest import HERE
    p = subprocess.run([sys.executable, "-m", "sluice", "run", "-n", "2", "--", sys.executable,
                        str(HERE / "programs" / "collectives.py")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "OK collectives world=2" in p.stdout, p.stdout


def test_batches_are_views_of_the_ring_that_pin_their_segments(sluice_bin):
    status, out = run_job("zero_copy.py", 2, "200000", "shm", transport="shm")
    assert status == 0, out
    assert "OK views records=400000 " in out and "copied=0" in out, out
    assert "OK hoard records=400000 refusals=" in out, out


def test_batches_over_ofi_are_exactly_once_too(sluice_bin):
    status, out = run_job("zero_copy.py", 2, "50000", "ofi", transport="ofi")
    assert status == 0, out
    assert "OK views records=100000 " in out and "copied=0" in out, out
    assert "OK hoard records=100000 refusals=" in out, out


@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi", marks=pytest.mark.slow)])
def test_combiner_groups_equal_numpys_grouping_of_every_rank_records(sluice_bin, transport):
    status, out = run_job("combiner.py", 3, "100000", "5000", transport=transport)
    assert status == 0, out
    assert "OK reduce groups=5000 records=300000" in out, out
    assert "OK count groups=37" in out, out


@pytest.mark.parametrize("transport", ["shm", pytest.param("ofi", marks=pytest.mark.slow)])
def test_a_worker_drives_three_targets_and_its_pushes_deliver_them_while_rings_are_full(
        sluice_bin, transport):
    status, out = run_job("worker.py", 3, "20000", transport=transport)
    assert status == 0, out
    assert "OK worker a=60000 b=18000 c=60000" in out, out
    assert "OK worker errors" in out, out
    assert "MISMATCH" not in out and "leaked" not in out, out
