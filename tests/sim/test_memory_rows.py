"""The memory curve (schedsim.report.memory.memory_over_time) reads only the rows that can count (buffers with
bytes, tagged pipeline compute) from the timeline's columns; the result equals the loop over every Span row
with ``by_id()``, on every shipped schedule with buffers or a pipeline, with the Program's DagView or networkx."""

from __future__ import annotations

import pytest

from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.program import DagView
from schedsim.report import memory as mm
from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Timeline
from schedsim.sim.timeline_json import meta_equal
from schedsim.spec.loader import load_schedule
from tests.conftest import ROOT

CASES = ["schedules/allgather_mm8.yaml", "schedules/megatron_gpt_pp4.yaml", "schedules/pipeline_custom.yaml",
         "schedules/tp_ffn.yaml", "tests/data/pp_unit.yaml"]


def counted_equals_every_row(monkeypatch, path):  # type: ignore[no-untyped-def]
    """The curve from the columns, after asserting it builds no Span rows and equals the span-by-span
    definition with the Program's view and with networkx."""
    spec = load_schedule(ROOT / path)
    prog = lower(spec)
    tl = simulate(prog, load_profile("h200"))
    static = mm.static_memory(prog.pipeline, spec.pipeline, tl.world_size)
    fast = mm.memory_over_time(tl, DagView(prog), static)
    assert tl._spans is None and callable(tl.columns._id)  # no rows and no id column were built
    G = graph_of(prog)
    rows = Timeline(tl.schedule, tl.source, tl.world_size, spans=list(tl.spans), meta=tl.meta)
    assert meta_equal(mm.memory_over_time(rows, G, static), fast)
    assert meta_equal(mm._reference(tl, G, static), fast)
    return fast


@pytest.mark.parametrize("path", CASES)
def test_counted_rows_give_what_every_row_gives(monkeypatch, path):
    fast = counted_equals_every_row(monkeypatch, path)
    # gathers, pipeline recvs and activations give curves; tp_ffn and the unit pipeline (no bytes) none
    assert (fast is None) == (path in ("schedules/tp_ffn.yaml", "tests/data/pp_unit.yaml"))
    if path == "schedules/allgather_mm8.yaml":
        assert fast["ranks"][0]["peak_op"] == "ag7@r0" and fast["ranks"][0]["peak_bytes"] == 512 * 2**20


@pytest.mark.parametrize("path", ["schedules/megatron_gpt_pp4_vp2.yaml", "schedules/pipeline_schedules.yaml"])
def test_pipeline_metrics_read_the_columns(path):
    # bubble, activation memory and p2p bytes from the column lists equal those from Span rows, bit for bit,
    # and a simulated timeline builds no rows for them
    from schedsim.sim.pipeline_metrics import PipelineMetrics

    tl = simulate(lower(load_schedule(ROOT / path)), load_profile("h200"))
    pm = PipelineMetrics.of(tl)
    assert tl._spans is None and pm is not None
    rows = Timeline(tl.schedule, tl.source, tl.world_size, spans=list(tl.spans), meta=tl.meta)
    assert PipelineMetrics.of(rows).to_dict() == pm.to_dict()
    assert sum(b.sent for b in pm.p2p_bytes.values()) == sum(s.bytes for s in tl.spans if s.kind == "send")
