"""The pipeline chart's boxes (``pipeline_view``) from the tag columns: the boxes a loop over the rows' tag dicts
makes (the oracle in ``tests/oracle/pipeline_view.py``), on predicted pipelines and on hand-made tags of mixed
types."""

from __future__ import annotations

from typing import Any

import pytest

from schedsim.api import load, predict
from schedsim.report.pipeline_chart import pipeline_view
from schedsim.sim.timeline import Span, Timeline
from tests.conftest import ROOT
from tests.oracle.pipeline_view import boxes_by_loop, steps_by_rules


@pytest.mark.parametrize("schedule", ["interleaved_1f1b", "1f1b", "zb_h1"])
def test_boxes_match_the_loop_on_predicted_pipelines(schedule):
    tl = predict(load(ROOT / "schedules" / "pipeline_schedules.yaml", schedule=schedule, m=8), "h200").timeline
    got = pipeline_view(tl).spans
    assert got == boxes_by_loop(tl) and len(got) > 20


def test_boxes_match_the_loop_on_mixed_tags():
    # stage 1 and 1.0 are one stage; two rows of one box (B split in I and W); a chunk tag on the first row only;
    # ties of rank and start keep the order of the boxes' first rows
    def s(i: int, r: int, a: float, b: float, **tags: Any) -> Span:
        return Span(f"o{i}@r{r}", f"o{i}", r, "s", "matmul", "compute", a, b, tags=tags)

    spans = [s(0, 1, 2.0, 3.0, pp_op="B", stage=1, mb=0, chunk=1), s(1, 1, 3.0, 4.0, pp_op="B", stage=1.0, mb=0),
             s(2, 0, 0.0, 1.0, pp_op="F", stage=0, mb=1), s(3, 0, 0.0, 1.0, pp_op="F", stage=0, mb=0),
             s(4, 0, 5.0, 6.0, pp_op="W", stage=0, mb=0.0), s(5, 0, 1.0, 2.0, kind_of="not an action")]
    tl = Timeline("t", "measured", 2, spans=spans)
    got = pipeline_view(tl).spans
    assert got == boxes_by_loop(tl)
    assert [(x.id, x.start_s, x.end_s, x.tags["chunk"]) for x in got] == [
        ("F0.1@r0", 0.0, 1.0, 0), ("F0.0@r0", 0.0, 1.0, 0), ("W0.0@r0", 5.0, 6.0, 0), ("B1.0@r1", 2.0, 4.0, 1)]


def test_an_action_without_a_microbatch_is_refused():
    tl = Timeline("t", "measured", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0,
                                                  tags={"pp_op": "F", "stage": 0})])
    with pytest.raises(KeyError):
        pipeline_view(tl)


@pytest.mark.parametrize("schedule", ["interleaved_1f1b", "1f1b", "zb_h1", "gpipe", "dualpipev"])
def test_unit_steps_match_the_rules(schedule):
    from schedsim.report.pipeline_chart import unit_steps

    view = pipeline_view(predict(load(ROOT / "schedules" / "pipeline_schedules.yaml", schedule=schedule, m=8),
                                 "h200").timeline)
    got = unit_steps(view)
    assert got == steps_by_rules(view) and len(got) == len(view.spans)
    # an order the rules do not explain (a rank's actions reversed): placed anyway, as the rules place them
    spans = list(view.spans)
    r0 = [s for s in spans if s.rank == 0]
    t = [s.start_s for s in r0]
    odd = Timeline("t", "x", view.world_size, spans=[s._replace(start_s=t[len(t) - 1 - r0.index(s)]) if s.rank == 0
                                                      else s for s in spans])
    assert unit_steps(odd) == steps_by_rules(odd)
