"""The steady power state counts ``repeat`` GEMMs (one span of several kernels) as tensor-core time.

A span's ``flops`` are per kernel while its solo time covers every kernel, so FLOP / solo alone put 20 bf16
GEMMs at 1/20 of their rate, under the fp32 peak: they were not counted and the power state never applied."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.gpu.power import TOLERANCE, slowdown_at, tensor_duty
from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Span, Timeline
from schedsim.spec.loader import load_text
from tests.oracle.engine import simulate_any

FP32 = 67e12


def test_tensor_duty_multiplies_a_spans_flops_by_its_kernels():
    # 20 kernels of 0.5 ms at 500 TFLOP/s each in [1, 11] ms, then a 1 ms copy: duty 10 / 12
    mm = Span("mm@r0", "mm", 0, "s", "matmul", "compute", 1e-3, 11e-3, solo_s=10e-3, flops=500e12 * 0.5e-3)
    cp = Span("c@r0", "c", 0, "s", "compute", "compute", 11e-3, 12e-3, solo_s=1e-3, bytes=1e6)
    tl = Timeline("t", "predict", 1, spans=[mm, cp])
    assert tensor_duty(tl, FP32, repeat=np.array([20, 1])) == pytest.approx(10 / 12)
    assert tensor_duty(tl, FP32, repeat=np.array([20, 1]), gap_s=8e-3) == pytest.approx(10 / 20)
    assert tensor_duty(tl, FP32) == 0.0  # read as one kernel: 25 TFLOP/s, SIMT


SCHED = """
schema_version: 1
name: rep
world_size: 1
ops:
  - {name: mm, kind: matmul, m: 4096, n: 4096, k: 4096, dtype: bf16, stream: s, repeat: 20}
"""


@pytest.mark.parametrize("as_graph", [False, True], ids=["program", "networkx"])
def test_a_repeated_gemm_runs_in_the_steady_power_state(as_graph):
    prog = lower(load_text(SCHED))
    G = graph_of(prog) if as_graph else prog
    prof = load_profile("h200x2")  # bf16 4096^3: 0.16602 ms in the table; no graph node cost
    tl = simulate_any(G, prof, launch="cuda_graph")
    (mm,) = tl.spans
    pw = tl.meta["power"]
    # the one span is the only GEMM: the duty is its length over the makespan (it starts after the graph launch)
    assert pw["tensor_duty"] == pytest.approx((mm.end_s - mm.start_s) / tl.makespan_s, abs=1e-4)
    assert pw["gemm_slowdown"] == pytest.approx(slowdown_at(prof.power.gemm_slowdown_by_duty, pw["tensor_duty"]),
                                                rel=TOLERANCE + 1e-4)
    assert pw["gemm_slowdown"] > 1.16
    assert mm.solo_s == pytest.approx(20 * 0.16602e-3 * pw["gemm_slowdown"], rel=1e-4)


def test_predict_cli_takes_the_iteration_gap(tmp_path, monkeypatch):
    """``schedsim predict --iteration-gap-ms`` predicts what execute's compare predicts for a measured idle: a
    2-stage 1F1B on h200x2 keeps its GEMMs busy > 0.59 of the makespan (slower GEMMs); a 2 ms idle between
    iterations lowers the duty as tensor_duty's denominator (makespan + gap) says."""
    from pathlib import Path

    from typer.testing import CliRunner

    from schedsim.cli import app

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    args = ["predict", "schedules/pipeline_schedules.yaml", "--profile", "h200x2", "--no-gantt", "--set", "p=2",
            "--set", "m=8", "--set", "schedule=1f1b"]
    got = {}
    for gap in (0.0, 2.0):
        out = tmp_path / f"g{gap}"
        r = CliRunner().invoke(app, [*args, "--out", str(out), "--iteration-gap-ms", str(gap)])
        assert r.exit_code == 0, r.output
        got[gap] = Timeline.read_json(out / "timeline.json")
    busy, idle = got[0.0].meta["power"], got[2.0].meta["power"]
    assert busy["iteration_gap_s"] == 0.0 and idle["iteration_gap_s"] == pytest.approx(2e-3)
    assert idle["gemm_slowdown"] < busy["gemm_slowdown"]
    # the last pass's duty: the same GEMM union over a makespan 2 ms longer
    ms = got[2.0].makespan_s
    union = idle["tensor_duty"] * (ms + 2e-3)
    assert union / ms == pytest.approx(tensor_duty(got[2.0], FP32 / idle["gemm_slowdown"]), abs=2e-4)
    r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "bad"), "--iteration-gap-ms", "-1"])
    assert r.exit_code == 2 and "iteration-gap-ms" in r.output


@pytest.mark.parametrize("gap", [-1e-3, float("nan"), float("inf")])
def test_a_bad_iteration_gap_is_refused(gap):
    from schedsim.errors import ProfileError

    prog = lower(load_text(SCHED))
    with pytest.raises(ProfileError, match="iteration_gap_s must be a finite number of seconds >= 0"):
        simulate(prog, load_profile("h200x2"), iteration_gap_s=gap)
