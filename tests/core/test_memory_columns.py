"""memory_over_time on the timeline's columns equals its span-by-span definition (``_reference``): every step,
peak, peak time and peak op, with a Program view, a networkx graph or no graph, on pipelines with activations,
receive buffers and static state, and on a non-pipeline schedule with all_gather buffers."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.program import DagView
from schedsim.report.memory import _reference, memory_over_time, static_memory
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule, parse_overrides

ROOT = Path(__file__).resolve().parents[2]
CASES = [("schedules/pipeline_schedules.yaml", ["p=4", "m=8", "schedule=1f1b"]),
         ("schedules/pipeline_schedules.yaml", ["p=2", "m=4", "schedule=zb_h1"]),
         ("schedules/pipeline_schedules.yaml", ["p=4", "m=8", "schedule=interleaved_1f1b"]),
         ("schedules/allgather_mm8.yaml", []), ("schedules/megatron_gpt_pp4_vp2.yaml", [])]


@pytest.mark.parametrize(("path", "sets"), CASES, ids=lambda x: str(x))
def test_columns_equal_the_definition(path, sets):
    spec = load_schedule(ROOT / path, parse_overrides(sets))
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200x2"))
    static = static_memory(prog.pipeline, spec.pipeline, tl.world_size)
    for graph in (DagView(prog), graph_of(prog), None):
        got, ref = memory_over_time(tl, graph, static), _reference(tl, graph, static)
        assert got == ref
    assert got is not None and any(len(r["steps"]) > 2 for r in got["ranks"].values())


def test_static_only_and_nothing_counted():
    spec = load_schedule(ROOT / "schedules/tp_ffn.yaml")
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200x2"))
    assert memory_over_time(tl, DagView(prog)) is None and _reference(tl, DagView(prog)) is None
    st = {0: {"parameters": 7.0}}
    assert memory_over_time(tl, static=st) == _reference(tl, static=st)
    assert memory_over_time(tl, static=st)["ranks"][0]["steps"] == [[0.0, 7.0]]
