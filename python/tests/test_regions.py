"""One-sided memory regions from Python (programs/regions.py): every rank's
atomic updates land exactly once in the owner's array over the region's own
memory, bad accesses raise InvalidArgument, a closed region raises Closed in
its peers, and the owner's array outlives the region and the cluster, over
shm, ofi and ofi without RMA and atomics."""

import pytest

from conftest import run_job


@pytest.mark.parametrize("transport,emulated", [("shm", False), ("ofi", False), ("ofi", True)])
def test_atomics_writes_and_reads_land_once_in_the_owners_array(sluice_bin, transport, emulated,
                                                                 monkeypatch):
    if emulated:  # the path of a provider without RMA and atomics: the owner's service
        monkeypatch.setenv("SLUICE_OFI_RMA", "0")
        monkeypatch.setenv("SLUICE_OFI_ATOMIC", "0")
    status, out = run_job("regions.py", 3, transport=transport)
    assert status == 0, out
    assert "OK region path=" + transport in out, out
    assert "counter=6000 cases=900 " in out, out
    assert ("remote=ofi (emulated) " in out) == emulated, out
    assert out.count("OK closed rank=") == 2, out
    assert "OK array outlives the cluster" in out, out
    assert "MISMATCH" not in out, out
