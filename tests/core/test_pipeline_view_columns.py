"""The pipeline chart's boxes (``pipeline_view``) from the tag columns: the boxes a loop over the rows' tag dicts
makes (written out below as the reference), on predicted pipelines and on hand-made tags of mixed types."""

from __future__ import annotations

from typing import Any

import pytest

from schedsim.api import load, predict
from schedsim.report.pipeline_chart import _pipeline_rows, pipeline_view
from schedsim.sim.timeline import Span, Timeline
from tests.conftest import ROOT


def boxes_by_loop(tl: Timeline) -> list[Span]:
    rows = _pipeline_rows(tl)
    c = tl.columns
    boxes: dict[tuple[int, str, int, int], list[Any]] = {}
    for t, r, a, b in zip(c.tags_of(rows.tolist()), c.rank[rows].tolist(), c.start_s[rows].tolist(),
                          c.end_s[rows].tolist(), strict=True):
        key = (r, str(t["pp_op"]), int(t["stage"]), int(t["mb"]))
        box = boxes.get(key)
        if box is None:
            boxes[key] = [a, b, t]
        else:
            box[0] = min(box[0], a)
            box[1] = max(box[1], b)
    spans = []
    for (r, op, st, mb), (a, b, t) in sorted(boxes.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        tags = {"pp_op": op, "stage": st, "mb": mb, "chunk": t.get("chunk", 0)}
        spans.append(Span(f"{op}{st}.{mb}@r{r}", str(mb), r, "pipeline", op, "compute", a, b, tags=tags))
    return spans


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


def steps_by_rules(view: Timeline) -> dict[str, tuple[int, int]]:
    """``unit_steps`` as first written: every dependency looked up anew at every visit of an action."""
    from collections import defaultdict

    from schedsim.report.pipeline_chart import UNIT

    stages = [int(s.tags["stage"]) for s in view.spans]
    last = max(stages) if stages else 0
    queues: dict[int, list[Span]] = defaultdict(list)
    for s in view.spans:
        queues[s.rank].append(s)
    for q in queues.values():
        q.sort(key=lambda s: s.start_s)
    done: dict[tuple[str, int, int], int] = {}
    out: dict[str, tuple[int, int]] = {}
    free = {r: 0 for r in queues}
    pos = {r: 0 for r in queues}

    def deps(op: str, st: int, mb: int) -> list[tuple[str, int, int]]:
        if op == "F":
            return [("F", st - 1, mb)] if st > 0 else []
        if op in ("I", "B"):
            return [("F", st, mb)] + ([("IB", st + 1, mb)] if st < last else [])
        return [("IB", st, mb)]

    remaining, force = len(view.spans), False
    while remaining:
        progress = False
        for r, q in queues.items():
            while pos[r] < len(q):
                s = q[pos[r]]
                op, st, mb = s.kind, int(s.tags["stage"]), int(s.tags["mb"])
                need = [done.get(d) for d in deps(op, st, mb)]
                if any(x is None for x in need) and not force:
                    break
                t0 = max([free[r]] + [x for x in need if x is not None])
                out[s.id] = (t0, t0 + UNIT.get(op, 1))
                done[(op, st, mb)] = t0 + UNIT.get(op, 1)
                if op in ("I", "B"):
                    done[("IB", st, mb)] = t0 + UNIT.get(op, 1)
                free[r] = t0 + UNIT.get(op, 1)
                pos[r] += 1
                remaining -= 1
                progress, force = True, False
        if not progress:
            force = True
    return out


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
