"""An eager kernel's predicted span starts when it got the GPU: the dispatch gap its back-to-back table time holds
(``launch.kernel_gap_us``) is part of its wait, as in a Kineto kernel span (docs/metrics.md, "Per-op spans")."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TWO_KERNELS_AND_A_STAGE = """
schema_version: 1
name: gap
world_size: 1
ops:
  - {name: mm, kind: matmul, m: 1000, n: 1000, k: 1000, dtype: fp32}
  - {name: add, kind: compute, bytes: 1e6}
  - {name: stage, kind: compute, duration_us: 5}
"""


def _profile(make_profile, **launch: float):
    from schedsim.hardware.profile import HardwareProfile

    d = make_profile().model_dump()
    d["launch"].update(launch)
    d["gpu_model"] = "waves"  # the model that records when each op's stream reached it (stream_s)
    return HardwareProfile.model_validate(d)


def test_hand_computed_spans_start_the_gap_into_the_table_time(make_profile, sim_text):
    """Toy profile: the 1000³ fp32 GEMM's table time is 1 ms, the 1 MB add 1 µs at 1 TB/s, the stage 5 µs;
    no launch cost, so all three are back to back from 0. With a 2 µs gap: the GEMM runs 2 → 1000 µs; the add
    is released at 1000 and its gap is capped at half its 1 µs (1000.5 → 1001); the stage, a measured time
    with no table behind it, keeps 1001 → 1006. Ends, stream_s and the makespan are those without the gap."""
    base, tl0 = sim_text(TWO_KERNELS_AND_A_STAGE, _profile(make_profile))
    got, tl = sim_text(TWO_KERNELS_AND_A_STAGE, _profile(make_profile, kernel_gap_us=2.0))
    assert base == {"mm@r0": (0.0, 1000.0), "add@r0": (1000.0, 1001.0), "stage@r0": (1001.0, 1006.0)}
    assert got == {"mm@r0": (2.0, 1000.0), "add@r0": (1000.5, 1001.0), "stage@r0": (1001.0, 1006.0)}
    assert tl.makespan_s == tl0.makespan_s
    assert [s.stream_s for s in tl.spans] == [s.stream_s for s in tl0.spans]
    waits = {s.id: round((s.start_s - s.stream_s) * 1e6, 6) for s in tl.spans}
    assert waits == {"mm@r0": 2.0, "add@r0": 0.5, "stage@r0": 0.0}


def test_a_cuda_graph_replay_has_no_gap(make_profile, sim_text):
    """A graph's node times (graph_per_op_us, gemm.graph rows) are already the node's own: no shift."""
    prof = _profile(make_profile, kernel_gap_us=2.0)
    got, _ = sim_text(TWO_KERNELS_AND_A_STAGE, prof, launch="cuda_graph")
    plain, _ = sim_text(TWO_KERNELS_AND_A_STAGE, _profile(make_profile), launch="cuda_graph")
    assert got == plain


@pytest.mark.parametrize(("launch", "gap_us"), [
    ({"graph_per_op_us": -0.8}, 0.8),  # a node 0.8 µs shorter than back to back: that is the gap
    ({"graph_per_op_us": 1.0}, 0.0),  # a node that costs more says nothing about the gap
    ({"graph_per_op_us": -0.8, "kernel_gap_us": 1.3}, 1.3),  # measured: taken as given
])
def test_the_gap_defaults_to_the_graph_node_saving(make_profile, launch, gap_us):
    assert _profile(make_profile, **launch).launch.kernel_gap_s == pytest.approx(gap_us * 1e-6)


def test_h100_small_ops_spans_against_the_stored_kineto_spans(monkeypatch):
    """small_ops_graph eager on the H100 profile calibrated 2026-12-06 04:29
    (tests/data/h100_calibrated_0429.yaml): the predicted kernel spans against the Kineto kernel spans of that
    run (execute --profiler, profiler_ops.json, medians over 64 ops each: up 4.240, side 4.224, act 1.600 µs).
    Their tables hold back-to-back periods (GEMM 4.70, add floor 2.26 µs, plus the cold-L2 term): without the
    gap the spans were +30 % (GEMMs) and +73 % (act)."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f = Path("schedules/small_ops_graph.yaml")
    prof = load_profile(str(ROOT / "tests" / "data" / "h100_calibrated_0429.yaml"))
    assert prof.launch.kernel_gap_us is None and prof.launch.kernel_gap_s == pytest.approx(1.047e-6)
    tl = simulate(lower_spec(_load(f, []), f), prof, launch="eager")
    span: dict[str, list[float]] = {}
    for s in tl.spans:
        span.setdefault(s.name.rstrip("0123456789"), []).append((s.end_s - s.start_s) * 1e6)
    measured = {"up": 4.240, "side": 4.224, "act": 1.600}
    for group, meas in measured.items():
        pred = statistics.median(span[group])
        assert abs(pred / meas - 1) < 0.15, (group, pred, meas)
