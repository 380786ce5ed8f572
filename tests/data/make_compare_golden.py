"""Write tests/data/compare_golden.json: :meth:`Comparison.to_dict` of :func:`schedsim.compare.compare_timelines`
for each case of :func:`cases` (predicted timelines of shipped schedules against measured ones derived from them:
event-timed, with ops missing, added, repeated, of zero duration, a pipeline's send/recv, ranks matched by kind;
predicted on ``h200x2``, a profile whose predictions of these schedules did not change after c23972a),
and under ``"analyze"`` what ``schedsim analyze`` prints of each timeline of the cases (the report with
``--full``, and ``--format json``). Made with the row-by-row compare and analyze of main at commit c23972a
(per-op waits and span labels, the makespan verdict, the kernel window to the last kernel end with the busy
share, bubbles from Metrics; analyze's JSON summing each kernel group with math.fsum, as its table does),
before they worked on columns; tests/report/test_compare_columns.py asserts that
today's give the same numbers, bit for bit.

Usage: python tests/data/make_compare_golden.py [ROOT]  (ROOT: the checkout whose compare writes it, default this
one)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else str(ROOT))


def _predict(path: str, *sets: str) -> Any:
    from schedsim.api import load, predict

    kw = dict(s.split("=", 1) for s in sets)
    return predict(load(ROOT / path, **{k: int(v) for k, v in kw.items()}), "h200x2").timeline  # a profile held fixed


def _measured(pred: Any, *, timing: str | None, drop: int = 0, extra: bool = False, dup: bool = False,
              zero: bool = False, stream: bool = False) -> Any:
    """A measured-looking timeline from ``pred``: times stretched op by op (a fixed, varied factor), ``stream_s``
    removed (with ``stream``: scaled as ``ready_s``, so each op has a measured wait), ``drop`` ops left out every
    7th op, an op added, one op's id repeated, one op of zero duration."""
    from schedsim.sim.timeline import Span, Timeline

    spans = []
    for i, s in enumerate(pred.spans):
        if drop and i % 7 == 3:
            continue
        f = 1.0 + ((i * 37) % 11 - 5) / 40.0
        st, en = s.start_s * 1.01, s.start_s * 1.01 + (s.end_s - s.start_s) * f
        if zero and i == 2:
            en = st
        spans.append(Span(s.id, s.name, s.rank, s.stream, s.kind, s.resource, st, en, None,
                          None if s.ready_s is None else s.ready_s * 1.01, s.bytes, s.flops, s.tags,
                          None if s.stream_s is None or not stream else s.stream_s * 1.005))
    if extra:
        spans.append(Span("extra@r0", "extra", 0, "s9", "compute", "compute", 0.0, 1e-4))
    if dup:
        spans.append(spans[0]._replace(start_s=spans[0].start_s + 1e-6, end_s=spans[0].end_s + 3e-6))
    meta = {} if timing is None else {"timing": timing}
    return Timeline(pred.schedule, "execute", pred.world_size, pred.launch, spans=spans, meta=meta)


def _renamed(tl: Any) -> Any:
    """The same spans under other ids (an import that names kernels, not ops): matched by kind."""
    return type(tl)(tl.schedule, "import", tl.world_size, tl.launch,
                    spans=[s._replace(id=f"k{i}@r{s.rank}", name=f"k{i}") for i, s in enumerate(tl.spans)])


def cases() -> dict[str, tuple[Any, Any]]:
    """``{case: (pred, meas)}``."""
    ag = _predict("schedules/allgather_mm8.yaml")
    pp = _predict("tests/data/pp_unit.yaml")
    return {
        "ag8_event_timed": (ag, _measured(ag, timing="cuda_events", drop=1, extra=True, zero=True)),
        "ag8_plain_dup": (ag, _measured(ag, timing=None, dup=True, stream=True)),
        "ag8_self": (ag, ag),
        "pp_event_timed": (pp, _measured(pp, timing="cuda_events", drop=1)),
        "pp_by_kind": (pp, _renamed(_measured(pp, timing=None))),
    }


def analyze_cases() -> dict[str, Any]:
    """``{name: timeline}``: every timeline of :func:`cases`, and a pipeline run whose names carry the actions
    untagged (as the executor's ranges do), so that analyze tags them."""
    out = {}
    for k, (p, m) in cases().items():
        if k not in ("ag8_plain_dup", "ag8_self"):  # (a file never holds an id twice; ag8_self's are ag8's)
            out[f"{k}.pred"], out[f"{k}.meas"] = p, m
    ag = cases()["ag8_event_timed"][1]  # kernels named by kind, as a trace names them: many rows per group
    out["ag8_kernel_names"] = type(ag)(ag.schedule, "import", ag.world_size, ag.launch,
                                       spans=[s._replace(id=f"k{i}@r{s.rank}", name=s.kind,
                                                         tags={"in_nelems": 1000 + i % 3} if s.resource == "comm"
                                                         else s.tags)
                                              for i, s in enumerate(ag.spans)])
    pp = cases()["pp_event_timed"][1]
    out["pp_untagged"] = type(pp)(pp.schedule, "execute", pp.world_size, pp.launch,
                                  spans=[s._replace(tags={k: v for k, v in (s.tags or {}).items()
                                                          if k not in ("pp_op", "stage", "mb", "phase")})
                                         for s in pp.spans])
    return out


def analyze_golden() -> dict[str, Any]:
    from schedsim.report.analysis import format_report
    from schedsim.trace.analyze import rows_from_timeline, tag_pipeline, to_json
    from schedsim.trace.common import ImportResult

    out = {}
    for k, tl in analyze_cases().items():
        tl = type(tl).from_dict(json.loads(json.dumps(tl.to_dict())))  # as analyze reads it: a fresh copy
        tag_pipeline(tl)
        kr, nr = rows_from_timeline(tl)
        res = ImportResult(tl, kr, nr, [])
        out[k] = {"report": format_report(res, full=True), "json": json.loads(to_json(res))}
    return out


def golden() -> dict[str, Any]:
    from schedsim.compare import compare_timelines

    return {**{k: compare_timelines(p, m).to_dict() for k, (p, m) in cases().items()}, "analyze": analyze_golden()}


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "compare_golden.json"
    out.write_text(json.dumps(golden(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {out}")
