"""predict's trace.json flows come from the Program (no networkx): the same events as from the graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.api import load, predict
from schedsim.graph.build import graph_of
from schedsim.report.chrome import ProgramFlows, chrome_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["allgather_mm8", "tp_allreduce_graph", "pipeline_custom", "megatron_gpt_pp4_vp2",
                                  "offload", "small_ops_graph"])
def test_program_flows_equal_graph_flows(name: str) -> None:
    run = predict(load(ROOT / "schedules" / f"{name}.yaml"), "h200")
    G = graph_of(run.program)
    pf = ProgramFlows(run.program)
    assert list(pf.edges(data=True)) == list(G.edges(data=True))
    assert pf.graph["p2p"] == G.graph["p2p"] and pf.graph["collectives"] == G.graph["collectives"]
    a = chrome_trace([("predicted", run.timeline)], graph=G)
    b = chrome_trace([("predicted", run.timeline)], graph=pf)
    assert a == b
    assert any(ev.get("ph") == "s" for ev in a["traceEvents"]) or name == "matmul_streams"


@pytest.mark.parametrize("name", ["pipeline_custom", "offload", "allgather_mm8"])
def test_slices_from_columns_equal_those_from_spans(name: str) -> None:
    # A timeline alone in its trace has its slices written from its columns (no Span per row): the same name,
    # category, times and args as _slice_args gives from each span (tags, bytes, FLOP, solo and ready times).
    from schedsim.report.chrome import _slice_args, _us

    tl = predict(load(ROOT / "schedules" / f"{name}.yaml"), "h200").timeline
    xs = [ev for ev in chrome_trace([("predicted", tl)])["traceEvents"] if ev["ph"] == "X"]
    spans = tl.spans
    assert len(xs) == len(spans) and any(s.tags for s in spans) == (name == "pipeline_custom")
    for ev, s in zip(xs, spans, strict=True):
        solo = _us(s.solo_s) if s.solo_s is not None else None
        ready = _us(s.ready_s) if s.ready_s is not None else None
        assert (ev["name"], ev["cat"], ev["ts"], ev["dur"]) == (s.name, s.resource, _us(s.start_s),
                                                                round(_us(s.end_s) - _us(s.start_s), 4))
        assert ev["args"] == _slice_args(s, "predicted", [], solo, ready)  # type: ignore[arg-type]
