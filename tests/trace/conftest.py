"""Fixtures for the trace importer tests.

The real traces live in ``../shared/data/traces`` next to the clone (CI lays a
copy of shared/ beside it); tests that need them skip with the reason when
the folder is absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = (REPO / ".." / "shared").resolve()
TRACES = SHARED / "data" / "traces"
NSYS_REAL = TRACES / "nsys_saxpy_mpi_perlmutter_rank0.sqlite"
KINETO_AR = TRACES / "kineto_nccl_allreduce_rank0_of2.json.gz"
KINETO_SR = TRACES / "kineto_sendrecv_rank0_of128.json.gz"

sys.path.insert(0, str(HERE))


def need(path: Path) -> Path:
    """Skip the calling test when a real trace file is absent."""
    if not path.exists():
        pytest.skip(f"real trace {path.name} not found: expected ../shared/data/traces next to the repo ({TRACES})")
    return path


@pytest.fixture
def synth_db(tmp_path: Path):
    from nsysdb import make_nsys_db

    p = tmp_path / "synth.sqlite"
    exp = make_nsys_db(p)
    return p, exp
