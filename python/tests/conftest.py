"""Shared helpers: run a program of programs/ as a job under this build's
`sluice run`, with the build's package first on PYTHONPATH."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BIN = Path(os.environ.get("PYTEST_SLUICE_BIN", HERE.parents[1] / "build" / "bin"))


def run_job(program, ranks, *args, launcher_args=(), transport=None, timeout=240):
    """Runs python programs/<program> on `ranks` processes; returns (exit
    status, output). SLUICE_TRANSPORT is `transport` when given."""
    env = dict(os.environ)
    if transport:
        env["SLUICE_TRANSPORT"] = transport
    cmd = [str(BIN / "sluice"), "run", "-n", str(ranks), "--timeout", str(timeout - 30),
           *launcher_args, "--", sys.executable, str(HERE / "programs" / program), *args]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout


@pytest.fixture(scope="session")
def sluice_bin():
    if not (BIN / "sluice").exists():
        pytest.fail(f"no sluice launcher at {BIN} (build the project, or set PYTEST_SLUICE_BIN)")
    return BIN


def pytest_configure(config):
    # `make test` runs `-m "not slow"`: the ofi variants of jobs whose shm
    # variant runs there (the binding is the same over both transports; the
    # library's own suites run these flows over ofi), as ctest's python.slow.
    config.addinivalue_line("markers", "slow: under ctest's `slow` label (python.slow)")
