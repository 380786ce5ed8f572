"""Typed results (Metrics, PipelineMetrics, Comparison): the JSON form round-trips, and is what the outputs hold."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from schedsim import api
from schedsim.compare import Comparison, compare_timelines
from schedsim.report.compare import write_comparison
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
    # every field comes back equal, the pipeline's ``info`` (a PipelineInfo, int keys restored) included
    assert back == m
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
    assert PipelineMetrics.from_dict(_through_json(d)) == pm
    short = PipelineMetrics.from_dict(_through_json(pm.to_dict(memory_timeline=False)))
    assert short == dataclasses.replace(pm, memory_timeline={})


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
    assert json.loads(paths[0].read_text()) == _through_json(res.to_dict())  # (written by orjson, indented)
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


def test_pipeline_info_is_typed_from_the_program_to_the_timeline_and_round_trips(pp_run) -> None:
    """1F1B, p=2, m=3: rank 0 warms up with one forward (p-1-0), then alternates, then drains; rank 1 (the last
    stage) alternates from the start. The typed record writes exactly the mapping the lowering used to hand
    on (same keys, same order), and reads back equal from JSON, in G.graph, meta and the metrics."""
    from schedsim.graph.build import graph_of, info_of
    from schedsim.graph.info import GraphInfo, PipelineInfo

    info = pp_run.program.pipeline
    assert isinstance(info, PipelineInfo)
    expected = {"schedule": "1f1b", "p": 2, "m": 3, "v": 1, "num_stages": 2, "dp": 1, "static_memory": None,
                "stage_to_rank": {0: 0, 1: 1}, "p2p": "batched", "activation_bytes": 1024,
                "activation_memory_bytes": 1024,
                "order": {0: ["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"], 1: ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]}}
    d = info.to_dict()
    assert list(d) == list(expected) and d == expected
    assert json.dumps(d) == json.dumps(expected)
    assert PipelineInfo.from_dict(_through_json(d)) == info
    # the timeline stores the JSON form and reads it typed; the metrics carry the same record
    assert json.dumps(pp_run.timeline.meta["pipeline"]) == json.dumps(expected)
    assert pp_run.timeline.pipeline == info and pp_run.metrics.pipeline.info == info
    back = type(pp_run.timeline).from_dict(_through_json(pp_run.timeline.to_dict()))
    assert back.pipeline == info
    # the graph's attribute dict is the plain form of the one GraphInfo, and reads back to it
    G = graph_of(pp_run.program)
    assert json.dumps(G.graph["pipeline"]) == json.dumps(expected)
    gi = GraphInfo.of(G)
    assert gi == info_of(pp_run.program) and gi.pipeline == info and gi.graph_attrs() == G.graph
    assert len(gi.p2p) == 6  # 3 activations forward, 3 gradients back


def test_pipeline_info_of_a_transformer_types_its_static_memory() -> None:
    """A 2-layer GPT (h=8, f=32, vocab 16, seq 4) on p=2: one layer per stage, 4h² + 4h + 2hf + f + h + 4h
    parameters per layer (schedsim.spec.pipeline_block._params_per_layer), the word and position embedding
    on stage 0, the final LayerNorm and output layer on stage 1; 16 bytes each."""
    from schedsim.graph.info import PipelineInfo, StaticMemory
    from schedsim.spec.pipeline_block import _params_per_layer

    spec = api.load_text("""
schema_version: 1
name: gpt
world_size: 2
pipeline: {schedule: 1f1b, p: 2, m: 2, transformer: {layers: 2, hidden: 8, ffn: 32, heads: 2, seq: 4, vocab: 16}}
""")
    info = api.lower_spec(spec).pipeline
    per_layer = _params_per_layer(spec.pipeline.transformer)
    params = {0: per_layer + 16 * 8 + 4 * 8, 1: per_layer + 16 * 8 + 2 * 8}
    assert isinstance(info.static_memory, StaticMemory) and info.static_memory.params == params
    assert info.static_memory.bytes == {r: 16 * n for r, n in params.items()}
    assert PipelineInfo.from_dict(_through_json(info.to_dict())) == info


def test_sweep_row_is_the_metrics_of_its_point_in_sweep_json_key_order(pp_run) -> None:
    from schedsim.api import SweepRow

    m, pm = pp_run.metrics, pp_run.metrics.pipeline
    row = SweepRow.of({"m": 3}, m, pm, timeline="timeline_m=3.json")
    d = row.to_dict()
    assert list(d) == ["setting", "makespan_s", "exposed_comm_s", "overlap_ratio", "peak_memory_bytes",
                       "peak_memory_units", "bubble_ratio", "timeline"]
    assert d["makespan_s"] == pp_run.timeline.makespan_s and d["bubble_ratio"] == pm.bubble_of_makespan.overall
    assert d["peak_memory_bytes"] == max(pm.peak_memory_bytes.values()) == 1024 * d["peak_memory_units"]
    assert from_dict(SweepRow, _through_json(d)) == row
    plain = SweepRow.of({}, m, None).to_dict()  # no pipeline, no kept timeline: those keys are absent
    assert list(plain) == ["setting", "makespan_s", "exposed_comm_s", "overlap_ratio"]
