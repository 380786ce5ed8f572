"""A what-if checked against a second real run (issue 37): one program traced on one H100 with
``CUDA_DEVICE_MAX_CONNECTIONS`` 8 and 1 (``benchmarks/accuracy/whatif_connections.py``); the 8-connection trace,
imported and replayed with ``--what-if max_connections=1``, predicts the 1-connection trace's makespan.

Each step: a 4096³ bf16 GEMM on stream 0; stream 1 waits for it and adds; stream 2 then runs the side work, which
stream 0's next GEMM waits for. ``spin``: a one-CTA spinning kernel (152 µs), which one connection holds behind
stream 1's wait (the traces: 1.807 ms with 8, 2.899 ms with 1). ``copy``: an 8 MiB pinned host-to-device copy
(155 µs), which one connection does not hold (1.666 and 1.706 ms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"


def _imported(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    r = CliRunner().invoke(app, ["import", "kineto", str(DATA / f"kineto_whatif_{name}_h100.json.gz"), "--out",
                                 str(out)])
    assert r.exit_code == 0, r.output
    return out / "schedule.yaml"


def _replay(schedule: Path, *what_if: str) -> dict:
    args = ["replay", str(schedule), "--format", "json"]
    for w in what_if:
        args += ["--what-if", w]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(("side", "trace1_ms"), [("spin", 2.899), ("copy", 1.706)])
def test_one_connection_predicted_from_the_eight_connection_run(tmp_path: Path, side: str, trace1_ms: float) -> None:
    """The issue's goal: within 10 % of the second run's makespan (last GPU end - first GPU start, as its trace
    gives it). The 1-connection trace is read through the same import, so both sides measure alike."""
    got = _replay(_imported(tmp_path, f"{side}_conn8"), "max_connections=1")
    second = _replay(_imported(tmp_path, f"{side}_conn1"))
    assert second["trace_makespan_s"] * 1e3 == pytest.approx(trace1_ms, abs=1e-3)
    predicted = got["what_if"]["makespan_s"]
    assert abs(predicted / second["trace_makespan_s"] - 1) <= 0.10


def test_copies_join_no_connection_queue(tmp_path: Path) -> None:
    """One connection moves the spin run by +76 % (each side kernel behind the GEMM it overlapped: 1.753 ms
    replayed -> 3.092) and the copy run not at all (1.634 -> 1.634 ms): a host-to-device copy is on a copy
    engine, outside the compute queues (measured: +60 % and +2.4 % between the traces)."""
    spin = _replay(_imported(tmp_path, "spin_conn8"), "max_connections=1")["what_if"]["ranks"]["0"]
    copy = _replay(_imported(tmp_path, "copy_conn8"), "max_connections=1")["what_if"]["ranks"]["0"]
    assert spin["after_s"] / spin["before_s"] == pytest.approx(3.092 / 1.753, rel=2e-3)
    assert copy["after_s"] == pytest.approx(copy["before_s"], rel=1e-9)
