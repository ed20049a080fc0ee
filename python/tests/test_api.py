"""The package in one process: what it refuses, and how, without a job."""

import os
import subprocess
import sys

import numpy as np
import pytest

import sluice


def test_errors_form_one_hierarchy_with_the_builtin_kinds():
    assert issubclass(sluice.PeerLost, sluice.Error)
    assert issubclass(sluice.Timeout, TimeoutError)
    assert issubclass(sluice.InvalidArgument, ValueError)
    assert issubclass(sluice.Error, RuntimeError)
    e = sluice.PeerLost("rank 2 died")
    e.rank = 2
    assert e.rank == 2 and "rank 2" in str(e)


def test_joining_without_a_launcher_says_which_variables_are_missing():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "SLURM_", "OMPI_"))}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    code = "import sluice\ntry:\n sluice.Cluster.from_env()\nexcept sluice.BootstrapError as e:\n print('BOOTSTRAP', e)\n"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert "BOOTSTRAP" in p.stdout, p.stdout + p.stderr
    assert "SLUICE_" in p.stdout, p.stdout


def test_importing_the_package_leaves_pyarrow_until_a_batch_flow_needs_it():
    # (pyarrow's import costs every rank about 0.2 s of CPU; numpy flows do
    # not need it.)
    code = ("import sys, sluice\n"
            "print('before', 'pyarrow' in sys.modules)\n"
            "import sluice.batches as b, pyarrow as pa\n"
            "print('types', b.key_type_ok(pa.int64()), b.key_type_ok(pa.list_(pa.int64())))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "before False" in p.stdout, p.stdout
    assert "types True False" in p.stdout, p.stdout


def test_the_checked_in_stubs_are_what_nanobind_generates_from_the_module(tmp_path):
    """python/sluice/_sluice.pyi is regenerated with
    `PYTHONPATH=build/python .venv/bin/python -m nanobind.stubgen -m sluice._sluice
    -o python/sluice/_sluice.pyi` whenever the module's surface changes."""
    from pathlib import Path
    out = tmp_path / "_sluice.pyi"
    p = subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-m", "sluice._sluice",
                        "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    checked_in = Path(__file__).resolve().parents[1] / "sluice" / "_sluice.pyi"
    assert out.read_text() == checked_in.read_text(), "regenerate python/sluice/_sluice.pyi"
