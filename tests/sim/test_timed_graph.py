"""A CUDA graph timed op by op (``schedsim execute --cuda-graph``): the profile's ``graph_timing_event_us`` in
every op's span (``HardwareProfile.timed_graph``), and the comparison of such a run's ops with that prediction
while its uninstrumented makespan keeps the plain one (``compare_timelines(pred_timed=...)``). Hand-computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.test_gpu_model import HEAD, TINY, waves_profile


def test_timed_graph_adds_the_event_pair_to_every_node_and_is_a_no_op_when_unmeasured() -> None:
    prof = waves_profile(launch={"graph_per_op_us": 0.5, "graph_timing_event_us": 2.0})
    timed = prof.timed_graph()
    assert timed.launch.graph_timed and timed.is_timed_graph and timed.name == "toy+timed_graph"
    assert timed.launch.graph_per_op_us == 0.5 and not prof.launch.graph_timed  # the profile itself is unchanged
    from schedsim.gpu.rules import graph_node_terms

    assert graph_node_terms(timed, "cuda_graph") == pytest.approx((2e-6, 2e-6))  # the gap defaults to the span
    assert graph_node_terms(prof, "cuda_graph") == (0.0, 0.0)
    assert graph_node_terms(timed, "eager") == (0.0, 0.0)
    from schedsim.gpu.cost import CostModel
    from schedsim.graph.ops import Op

    mm = Op("a", 0, "matmul", "s", 0, m=128, n=128, k=128, dtype="fp32", flops=2.0 * 128**3, nbytes=1.0)
    assert CostModel(timed).graph_node_delta(mm) == pytest.approx(0.5e-6)  # the node's own term, per op
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
    assert once.is_timed_graph and once.timed_graph() is once  # the term is added once
    assert once.launch.graph_per_op_us == -0.8 and once.launch.graph_timing_event_us == 2.1
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


def test_an_op_without_gpu_work_is_no_graph_node_but_is_timed(sim_text) -> None:
    # one rank: A (2 µs kernel), an in-place all_reduce (NCCL launches nothing), B (2 µs). Graph launch 10 µs,
    # 1 µs per node: A 10-13, ar 13-13 (no node), B 13-16. Timed (2 µs of events around a kernel, 0.5 µs between
    # adjacent events): A 10-15, ar 15-15.5 (its two events adjacent), B 15.5-20.5.
    body = (f"  - {{name: A, {TINY}}}\n"
            "  - {name: ar, kind: all_reduce, bytes: 1000, stream: s1, deps: [A]}\n"
            f"  - {{name: B, {TINY}, deps: [ar]}}\n")
    prof = waves_profile(launch={"graph_launch_us": 10.0, "graph_per_op_us": 1.0, "graph_timing_event_us": 2.0,
                                 "graph_timing_gap_us": 0.5})
    spans, _ = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert spans == {"A@r0": (10.0, 13.0), "ar@r0": (13.0, 13.0), "B@r0": (13.0, 16.0)}
    spans, _ = sim_text(HEAD % 1 + body, prof.timed_graph(), launch="cuda_graph")
    assert spans == {"A@r0": (10.0, 15.0), "ar@r0": (15.0, 15.5), "B@r0": (15.5, 20.5)}


@pytest.mark.parametrize("launch", ["eager", "cuda_graph"])
@pytest.mark.parametrize("gpu_model", ["waves"])
def test_one_rank_collectives_agree_between_the_dag_and_program_paths(launch: str, gpu_model: str) -> None:
    # the Program's columns (compiled or Python loop) and the networkx DAG's Op list give the same timeline for
    # one-rank no-op collectives and copies beside GEMMs on other streams, timed or not
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    body = (f"  - {{name: A, {TINY}, stream: s1}}\n"
            "  - {name: ar, kind: all_reduce, bytes: 4096, stream: c, deps: [A]}\n"
            "  - {name: ag, kind: all_gather, bytes: 4096, stream: c}\n"
            f"  - {{name: B, {TINY}, stream: s2}}\n"
            "  - {name: bc, kind: broadcast, bytes: 64, root: 0, stream: c}\n"
            f"  - {{name: C, {TINY}, deps: [ar, bc]}}\n")
    prof = waves_profile(launch={"graph_launch_us": 10.0, "graph_per_op_us": 1.0, "graph_timing_event_us": 2.0,
                                 "eager_per_op_us": 3.0, "eager_per_collective_us": 5.0})
    for p in (prof, prof.timed_graph()):
        spec = load_text(HEAD % 1 + body, "t.yaml")
        a = simulate(lower(spec), p, launch=launch, gpu_model=gpu_model)
        b = simulate(lower(spec), p, launch=launch, gpu_model=gpu_model)
        got = {s.id: (s.start_s, s.end_s) for s in a.spans}
        assert got == {s.id: (s.start_s, s.end_s) for s in b.spans}
        want = 2e-6 if p.is_timed_graph and launch == "cuda_graph" else 0.0
        assert got["ar@r0"][1] - got["ar@r0"][0] == pytest.approx(want, abs=1e-12)


def test_compare_checks_that_the_pred_timed_inputs_belong_together() -> None:
    from schedsim.compare import compare_timelines

    meas = _tl("execute", [("a", 0.0, 4e-6)], timing="cuda_graph_external_events", makespan_uninstrumented_s=3e-6)
    plain = _tl("predict", [("a", 0.0, 2e-6)])
    timed = _tl("predict", [("a", 0.0, 4e-6)], timed_graph=True)
    assert compare_timelines(plain, meas, pred_timed=timed).warnings == []
    # an eager measurement, a --pred-timed that is no timed prediction, the two swapped, another schedule
    eager = _tl("execute", [("a", 0.0, 4e-6)], timing="cuda_events")
    assert any("not timed op by op with a known cost" in w
               for w in compare_timelines(plain, eager, pred_timed=timed).warnings)
    assert any("is not a prediction of a timed graph" in w
               for w in compare_timelines(plain, meas, pred_timed=plain).warnings)
    swapped = compare_timelines(timed, meas, pred_timed=plain).warnings
    assert any("PRED is a prediction of a timed run" in w for w in swapped)
    from schedsim.sim.timeline import Span, Timeline

    other = Timeline("y", "predict", 2, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 2e-6)],
                     launch="cuda_graph")
    w = compare_timelines(other, meas, pred_timed=timed).warnings
    assert "different schedules: 'y' vs 'x'" in w and "different world sizes: 2 vs 1" in w


def test_predict_timed_graph_says_when_it_changes_nothing(tmp_path) -> None:
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "schedsim", "predict", "schedules/small_ops_graph.yaml",
                               "--set", "layers=2", "--no-gantt", "--timed-graph", "--out", str(tmp_path / "o"),
                               *args], capture_output=True, text=True)

    r = run("--profile", "pcie2", "--launch", "cuda_graph")  # a profile without the measurement
    assert r.returncode == 0 and "has no launch.graph_timing_event_us" in r.stderr
    r = run("--launch", "eager")
    assert r.returncode == 0 and "changes nothing in eager mode" in r.stderr
    import json

    assert "timed_graph" not in json.loads((tmp_path / "o" / "timeline.json").read_text())["meta"]
    r = run("--launch", "cuda_graph")
    assert r.returncode == 0 and "note:" not in r.stderr
    assert json.loads((tmp_path / "o" / "timeline.json").read_text())["meta"]["timed_graph"] is True


def test_an_eager_run_timed_op_by_op_is_compared_with_its_timed_prediction(sim_text) -> None:
    """An eager run's timing events cost its host time per op, which the run measures (meta.timing_host_per_op_us);
    ``HardwareProfile.timed_eager`` adds it to every op's issue. Host-bound toy: eager_per_op_us 5, three TINY
    (2 µs) kernels on one stream. Plain: issued at 5, 10, 15; each runs at once: [5, 7], [10, 12], [15, 17]. Timed
    with 3 µs per op: issued at 8, 16, 24: [8, 10], [16, 18], [24, 26]. compare then holds the ops against the
    timed prediction and the uninstrumented makespan against the plain one, without warnings."""
    from schedsim.compare import compare_timelines, timed_eager_measurement
    from schedsim.hardware.profile import TIMED_EAGER_SUFFIX

    body = "".join(f"  - {{name: g{i}, {TINY}, stream: s}}\n" for i in range(3))
    prof = waves_profile(launch={"eager_per_op_us": 5.0})
    spans, plain = sim_text(HEAD % 1 + body, prof)
    assert spans == {"g0@r0": (5.0, 7.0), "g1@r0": (10.0, 12.0), "g2@r0": (15.0, 17.0)}
    timed_prof = prof.timed_eager(3.0)
    assert timed_prof.name == "toy" + TIMED_EAGER_SUFFIX and prof.launch.executor_extra_per_op_us == 0.0
    spans, timed = sim_text(HEAD % 1 + body, timed_prof, model_executor=True)
    assert spans == {"g0@r0": (8.0, 10.0), "g1@r0": (16.0, 18.0), "g2@r0": (24.0, 26.0)}
    # the events cost the GPU too, as in a timed graph: 1 µs each op (graph_timing_event_us), only when timed
    ev_prof = waves_profile(launch={"eager_per_op_us": 5.0, "graph_timing_event_us": 1.0})
    assert sim_text(HEAD % 1 + body, ev_prof)[0] == {"g0@r0": (5.0, 7.0), "g1@r0": (10.0, 12.0), "g2@r0": (15.0, 17.0)}
    spans_ev, _ = sim_text(HEAD % 1 + body, ev_prof.timed_eager(3.0), model_executor=True)
    assert spans_ev == {"g0@r0": (8.0, 11.0), "g1@r0": (16.0, 19.0), "g2@r0": (24.0, 27.0)}
    from schedsim.compare import op_window
    from schedsim.sim.timeline import Timeline

    win = op_window(timed, stream_reached=True)  # what execute records: stream reached (the start event) -> end
    meas = Timeline("g", "execute", 1, launch="eager",
                    spans=[s._replace(start_s=win[s.id][0], ready_s=s.stream_s, stream_s=None) for s in timed.spans],
                    meta={"timing": "cuda_events", "timing_host_per_op_us": 3.0,
                          "makespan_uninstrumented_s": plain.makespan_s})
    assert timed_eager_measurement(meas)
    res = compare_timelines(plain, meas, pred_timed=timed)
    assert res.warnings == [] and res.ops.median_abs_error == pytest.approx(0.0, abs=1e-9)
    assert "timed eager" in res.ops.span and res.makespan.uninstrumented.error == pytest.approx(0.0, abs=1e-9)
    # the plain prediction alone: a warning that names the measured cost
    assert any("cost the host 3 us per op" in w for w in compare_timelines(plain, meas).warnings)
    # without the timing cost measured, a --pred-timed has nothing to stand for; a graph-timed one does not fit
    meas.meta.pop("timing_host_per_op_us")
    assert any("not timed op by op" in w for w in compare_timelines(plain, meas, pred_timed=timed).warnings)
    meas.meta["timing_host_per_op_us"] = 3.0
    graph_timed = _tl("predict", [("g0", 0.0, 2e-6)], timed_graph=True)
    wrong = compare_timelines(plain, meas, pred_timed=graph_timed)
    assert any("not a prediction of a timed eager run" in w for w in wrong.warnings)
    assert "timed graph" in wrong.ops.span  # the span says which prediction the ops met
