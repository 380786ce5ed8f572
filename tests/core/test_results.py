"""Typed results (Metrics, PipelineMetrics, Comparison): the JSON form round-trips, and is what the outputs hold."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from schedsim import api
from schedsim.compare import Comparison, compare_timelines, write_comparison
from schedsim.results import from_dict, to_dict
from schedsim.sim.metrics import Metrics, RankMetrics, compute_metrics
from schedsim.sim.pipeline_metrics import PipelineMetrics
from schedsim.sim.timeline import Span, Timeline

ROOT = Path(__file__).resolve().parents[2]
PP = """
schema_version: 1
name: pp2
world_size: 2
pipeline:
  schedule: 1f1b
  p: 2
  m: 3
  activation_bytes: 1024
  stage:
    forward: [{name: f, kind: compute, duration_us: 10}]
    backward_input: [{name: i, kind: compute, duration_us: 10}]
    backward_weight: [{name: w, kind: compute, duration_us: 10}]
"""


def _through_json(d: dict) -> dict:
    return json.loads(json.dumps(d))


@pytest.fixture(scope="module")
def pp_run():
    return api.predict(api.load_text(PP), profile="h200")


def test_metrics_round_trip_through_json_with_pipeline_and_memory_peak(pp_run, tmp_path) -> None:
    m = pp_run.metrics
    assert m.pipeline is not None and m.memory_peak is not None
    back = Metrics.from_dict(_through_json(m.to_dict()))
    # every typed field comes back equal; the pipeline's ``info`` is the lowering's free-form record, whose
    # int keys (stage_to_rank, order) JSON turns into strings, so it is equal as JSON
    assert dataclasses.replace(back, pipeline=None) == dataclasses.replace(m, pipeline=None)
    assert dataclasses.replace(back.pipeline, info={}) == dataclasses.replace(m.pipeline, info={})
    assert back.pipeline.info == _through_json(m.pipeline.info)
    assert json.dumps(back.to_dict()) == json.dumps(m.to_dict())
    # what predict writes into timeline.json is this JSON form, and reads back to the same Metrics
    tl, metrics, _paths = api.predict_to_dir(ROOT / "schedules" / "allgather_mm8.yaml", [], "h200", tmp_path,
                                             None, gantt=False, trace=False)
    stored = json.loads((tmp_path / "timeline.json").read_text())["metrics"]
    assert stored == _through_json(metrics.to_dict()) and Metrics.from_dict(stored) == metrics


def test_pipeline_metrics_values_and_json_form(pp_run) -> None:
    """1F1B, p=2, m=3 with 1 KiB activations: each rank sends and receives 3 activations (or gradients); the
    idle fraction is 1 − busy / makespan."""
    pm = PipelineMetrics.of(pp_run.timeline)
    assert pm is not None and set(pm.p2p_bytes) == {0, 1}
    assert pm.p2p_bytes[0].sent == 3 * 1024 and pm.p2p_bytes[1].recv == 3 * 1024
    mk = pp_run.timeline.makespan_s
    busy0 = sum(s.end_s - s.start_s for s in pp_run.timeline.spans if s.rank == 0 and s.resource == "compute")
    assert pm.bubble_of_makespan.per_rank[0] == pytest.approx(1 - busy0 / mk)
    d = pm.to_dict()
    assert list(d) == ["info", "bubble_of_ideal", "bubble_of_makespan", "peak_memory_units", "peak_memory_bytes",
                       "memory_timeline", "p2p_bytes"]
    assert d["p2p_bytes"][0] == {"sent": 3 * 1024, "recv": 3 * 1024}
    assert "memory_timeline" not in pm.to_dict(memory_timeline=False)
    assert PipelineMetrics.from_dict(_through_json(d)) == dataclasses.replace(pm, info=_through_json(pm.info))
    short = PipelineMetrics.from_dict(_through_json(pm.to_dict(memory_timeline=False)))
    assert short == dataclasses.replace(pm, memory_timeline={}, info=_through_json(pm.info))


def test_compute_metrics_is_the_json_form_of_metrics() -> None:
    tl = Timeline("x", "predict", 2, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 4.0),
                                            Span("c@r0", "c", 0, "n", "all_reduce", "comm", 2.0, 6.0),
                                            Span("c@r1", "c", 1, "n", "all_reduce", "comm", 2.0, 6.0)])
    m = Metrics.of(tl)
    # rank 0: comm 2-6 under compute 0-4 for 2 of its 4 s: exposed 2, overlap 0.5; rank 1: all exposed
    assert m.ranks[0] == RankMetrics(busy_compute_s=4.0, busy_comm_s=4.0, busy_copy_s=0.0, idle_s=0.0,
                                     exposed_comm_s=2.0, overlap_ratio=0.5, comm_share=4 / 6,
                                     comm_share_kernel_view=4 / 6)
    assert m.exposed_comm_s == 6.0 and m.overlap_ratio == pytest.approx(2 / 8)
    d = compute_metrics(tl)
    assert d == m.to_dict() and "pipeline" not in d and "memory_peak" not in d
    assert d["ranks"][1]["idle_s"] == 2.0


def test_comparison_round_trip_and_compare_json(tmp_path) -> None:
    pred = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.5),
                                              Span("b@r0", "b", 0, "s", "matmul", "compute", 1.5, 1.8)])
    meas = Timeline("x", "execute", 1, meta={"makespan_uninstrumented_s": 1.6},
                    spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0),
                           Span("b@r0", "b", 0, "s", "matmul", "compute", 1.0, 2.0)])
    res = compare_timelines(pred, meas)
    assert res.ops is not None and res.ops.worst is not None and res.ops.worst.id == "b@r0"
    # a: 1.5 s against 1.0 (+0.5), b: 0.3 s against 1.0 (-0.7); makespan 1.8 s against 1.6 s uninstrumented
    assert res.ops.worst.error == pytest.approx(-0.7) and res.makespan.uninstrumented.error == pytest.approx(0.125)
    back = Comparison.from_dict(_through_json(res.to_dict()))
    assert back == res
    res2, paths = write_comparison(pred, meas, tmp_path, gantt=False)
    assert paths[0].read_text() == json.dumps(res.to_dict(), indent=1, default=str)
    assert list(json.loads(paths[0].read_text())) == ["schedule", "source", "launch", "profile", "warnings",
                                                      "makespan", "match", "ops", "overlap", "by_rank"]
    slim = res.to_dict(per_op=False)
    assert "per_op" not in slim["ops"] and "per_op" in res.to_dict()["ops"]


def test_from_dict_names_a_missing_field() -> None:
    with pytest.raises(KeyError):
        from_dict(RankMetrics, {"busy_compute_s": 1.0})


def test_generic_to_dict_keeps_key_order_and_omits_only_marked_nones() -> None:
    @dataclasses.dataclass(frozen=True)
    class A:
        x: int
        y: tuple[float, float]
        z: str | None = None

    assert to_dict(A(1, (0.5, 1.5))) == {"x": 1, "y": (0.5, 1.5), "z": None}
    assert from_dict(A, {"x": "3", "y": [0.5, 1.5], "z": None}) == A(3, (0.5, 1.5))
