"""A CUDA graph timed op by op (``schedsim execute --cuda-graph``): the profile's ``graph_timing_event_us`` in
every op's span (``HardwareProfile.timed_graph``), and the comparison of such a run's ops with that prediction
while its uninstrumented makespan keeps the plain one (``compare_timelines(pred_timed=...)``). Hand-computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_gpu_model import HEAD, TINY, waves_profile


def test_timed_graph_adds_the_event_pair_to_every_node_and_is_a_no_op_when_unmeasured() -> None:
    prof = waves_profile(launch={"graph_per_op_us": 0.5, "graph_timing_event_us": 2.0})
    timed = prof.timed_graph()
    assert timed.launch.graph_per_op_us == 2.5 and timed.name == "toy+timed_graph"
    assert prof.launch.graph_per_op_us == 0.5  # the profile itself is unchanged
    plain = waves_profile(launch={"graph_per_op_us": 0.5})
    assert plain.launch.graph_timing_event_us == 0.0 and plain.timed_graph() is plain


def test_a_timed_graph_chain_holds_the_event_span_in_every_op(sim_text) -> None:
    # a chain of three 2 µs kernels in one replay (graph_launch_us 10): untimed 10-12, 12-14, 14-16; timed, each
    # op also holds its 2 µs event pair: 10-14, 14-18, 18-22. Eager launches are unaffected (no graph nodes).
    body = "".join(f"  - {{name: g{i}, {TINY}}}\n" for i in range(3))
    prof = waves_profile(launch={"graph_launch_us": 10.0, "graph_timing_event_us": 2.0})
    spans, _ = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert spans == {"g0@r0": (10.0, 12.0), "g1@r0": (12.0, 14.0), "g2@r0": (14.0, 16.0)}
    spans, tl = sim_text(HEAD % 1 + body, prof.timed_graph(), launch="cuda_graph")
    assert spans == {"g0@r0": (10.0, 14.0), "g1@r0": (14.0, 18.0), "g2@r0": (18.0, 22.0)}
    assert tl.makespan_s == pytest.approx(22e-6)
    spans, _ = sim_text(HEAD % 1 + body, prof.timed_graph())
    assert spans == {"g0@r0": (0.0, 2.0), "g1@r0": (2.0, 4.0), "g2@r0": (4.0, 6.0)}


def _tl(source: str, spans: list[tuple[str, float, float]], **meta: object):
    from schedsim.sim.timeline import Span, Timeline

    return Timeline("x", source, 1, spans=[Span(f"{n}@r0", n, 0, "s", "matmul", "compute", a, b)
                                           for n, a, b in spans], meta=dict(meta), launch="cuda_graph")


def test_compare_uses_the_timed_prediction_for_ops_and_the_plain_one_for_the_uninstrumented_makespan() -> None:
    from schedsim.compare import Comparison, compare_timelines

    # measured: two ops of 4 and 5 µs in the timed graph (makespan 9 µs), 5 µs per iteration untimed
    meas = _tl("execute", [("a", 0.0, 4e-6), ("b", 4e-6, 9e-6)], makespan_uninstrumented_s=5e-6)
    plain = _tl("predict", [("a", 0.0, 2e-6), ("b", 2e-6, 4e-6)])
    timed = _tl("predict", [("a", 0.0, 4e-6), ("b", 4e-6, 8e-6)])
    before = compare_timelines(plain, meas)
    assert before.ops.median_abs_error == pytest.approx(0.55)  # |2-4|/4 = 0.5, |2-5|/5 = 0.6
    assert before.makespan.uninstrumented.error == pytest.approx(-0.2) and before.makespan.uninstrumented.pred_s is None
    res = compare_timelines(plain, meas, pred_timed=timed)
    assert res.ops.median_abs_error == pytest.approx(0.1)  # a exact, b |4-5|/5 = 0.2
    assert "timed graph" in res.ops.span
    assert res.makespan.pred_s == pytest.approx(8e-6) and res.makespan.error == pytest.approx(-1 / 9)
    u = res.makespan.uninstrumented
    assert u.pred_s == pytest.approx(4e-6) and u.error == pytest.approx(-0.2) and u.meas_s == 5e-6
    back = Comparison.from_dict(res.to_dict())
    assert back.makespan.uninstrumented.pred_s == pytest.approx(4e-6)
    assert "pred_s" not in before.to_dict()["makespan"]["uninstrumented"]  # omitted when there is one prediction


def test_timed_graph_applies_once_and_predictions_made_with_it_say_so(tmp_path) -> None:
    from schedsim.api import predict_to_dir
    from schedsim.hardware.profile import load_profile

    once = load_profile("h200").timed_graph()
    assert once.is_timed_graph and once.timed_graph() is once  # the term is folded in once
    assert once.launch.graph_per_op_us == pytest.approx(1.0 + 2.1) and once.launch.graph_timing_event_us == 0.0
    tl, _m, _p = predict_to_dir(Path("schedules/small_ops_graph.yaml"), ["layers=2"], once, tmp_path / "t",
                                "cuda_graph", False, False)
    plain, _m, _p = predict_to_dir(Path("schedules/small_ops_graph.yaml"), ["layers=2"], "h200", tmp_path / "p",
                                   "cuda_graph", False, False)
    assert tl.meta["timed_graph"] is True and "timed_graph" not in plain.meta
    assert tl.profile == "h200+timed_graph"
    # six ops in a chain-and-fork graph: every op 2.1 µs longer
    for a, b in zip(sorted(tl.spans, key=lambda s: s.id), sorted(plain.spans, key=lambda s: s.id), strict=True):
        assert (a.end_s - a.start_s) - (b.end_s - b.start_s) == pytest.approx(2.1e-6, abs=1e-12)


def test_compare_warns_when_a_timed_graph_meets_a_plain_prediction() -> None:
    from schedsim.compare import compare_timelines

    meas = _tl("execute", [("a", 0.0, 4e-6)], timing="cuda_graph_external_events", makespan_uninstrumented_s=3e-6)
    plain = _tl("predict", [("a", 0.0, 2e-6)])
    timed = _tl("predict", [("a", 0.0, 4e-6)], timed_graph=True)
    assert any("timed inside a CUDA graph" in w for w in compare_timelines(plain, meas).warnings)
    assert not any("CUDA graph" in w for w in compare_timelines(plain, meas, pred_timed=timed).warnings)
    assert not any("CUDA graph" in w for w in compare_timelines(timed, meas).warnings)
    eager = _tl("execute", [("a", 0.0, 4e-6)], timing="cuda_events")
    assert not compare_timelines(plain, eager).warnings


def test_compare_cli_takes_the_timed_prediction(tmp_path) -> None:
    import json
    import subprocess
    import sys

    meas = _tl("execute", [("a", 0.0, 4e-6), ("b", 4e-6, 9e-6)], timing="cuda_graph_external_events",
               makespan_uninstrumented_s=5e-6)
    for name, tl in (("meas", meas), ("plain", _tl("predict", [("a", 0.0, 2e-6), ("b", 2e-6, 4e-6)])),
                     ("timed", _tl("predict", [("a", 0.0, 4e-6), ("b", 4e-6, 8e-6)], timed_graph=True))):
        tl.write_json(tmp_path / f"{name}.json")
    r = subprocess.run([sys.executable, "-m", "schedsim", "compare", str(tmp_path / "plain.json"),
                        str(tmp_path / "meas.json"), "--pred-timed", str(tmp_path / "timed.json"), "--no-gantt",
                        "--format", "json", "--out", str(tmp_path / "c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ops"]["median_abs_error"] == pytest.approx(0.1)
    assert d["makespan"]["uninstrumented"]["pred_s"] == pytest.approx(4e-6)
    assert d["warnings"] == []
