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
