"""Oracle: the pipeline chart's boxes and unit steps as first written (a loop over the rows' tag dicts; every
dependency looked up anew at every visit), the references :mod:`schedsim.report.pipeline_chart`'s column forms
are held to (``tests/report/test_pipeline_view_columns.py``)."""

from __future__ import annotations

from typing import Any

from schedsim.report.pipeline_chart import _pipeline_rows
from schedsim.sim.timeline import Span, Timeline


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
