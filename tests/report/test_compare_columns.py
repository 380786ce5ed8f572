"""Issue 32 item 5: compare and analyze work on the timelines' columns (no Span rows, no dicts of spans); their
numbers are those of the row-by-row code they replaced, bit for bit (tests/data/compare_golden.json, written by that
code: tests/data/make_compare_golden.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))

from make_compare_golden import cases  # noqa: E402

from schedsim.compare import _match, _windows, compare_timelines, op_window  # noqa: E402
from schedsim.sim.timeline import Span, Timeline  # noqa: E402

GOLDEN = json.loads((DATA / "compare_golden.json").read_text())


@pytest.mark.parametrize("case", sorted(k for k in GOLDEN if k != "analyze"))
def test_compare_gives_the_row_by_row_numbers(case: str) -> None:
    pred, meas = cases()[case]
    got = json.loads(json.dumps(compare_timelines(pred, meas).to_dict(), sort_keys=True))
    assert got == GOLDEN[case]


def test_compare_builds_no_span_rows() -> None:
    pred, meas = cases()["pp_event_timed"]
    p = Timeline.from_dict(json.loads(json.dumps(pred.to_dict())))
    m = Timeline.from_dict(json.loads(json.dumps(meas.to_dict())))
    compare_timelines(p, m)
    assert p._spans is None and m._spans is None  # read as columns, compared as columns


def test_match_by_hash_agrees_with_dicts_and_survives_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    def tl(ids: list[str]) -> Timeline:
        return Timeline("x", "predict", 1, spans=[Span(i, i.split("@")[0], 0, "s", "compute", "compute", 0.0, 1.0)
                                                  for i in ids])

    p = tl([f"a{i}@r0" for i in range(50)])
    m = tl([f"a{i}@r0" for i in range(60, 20, -1)] + ["b@r0"])
    got = _match(p, m)
    want_p = [f"a{i}@r0" for i in range(21, 50)]
    assert [got.keys[i] for i in got.key_at.tolist()] == want_p
    assert [m.columns.id[i] for i in got.rows_m.tolist()] == want_p
    assert got.only_p == [f"a{i}@r0" for i in range(20)] and got.only_m[:3] == ["a60@r0", "a59@r0", "a58@r0"]
    # every id hashing alike: the collision check sends the match to the dict path, same answer
    import builtins

    monkeypatch.setattr(builtins, "hash", lambda s: 7)
    again = _match(p, m)
    assert again.rows_p.tolist() == got.rows_p.tolist() and again.rows_m.tolist() == got.rows_m.tolist()


def test_windows_take_the_latest_arrival_of_each_rendezvous() -> None:
    # all_reduce "ar" on two ranks: rank 1's stream reaches it at 3 us, so rank 0's window starts there too;
    # a send/recv pair by tags.msg; a matmul keeps its own; an op with no ready time keeps its start
    spans = [Span("ar@r0", "ar", 0, "c", "all_reduce", "comm", 4e-6, 9e-6, ready_s=1e-6, stream_s=2e-6),
             Span("ar@r1", "ar", 1, "c", "all_reduce", "comm", 4e-6, 9e-6, ready_s=1e-6, stream_s=3e-6),
             Span("s@r0", "s", 0, "p", "send", "comm", 1e-6, 2e-6, ready_s=0.5e-6, tags={"msg": 7}),
             Span("r@r1", "r", 1, "p", "recv", "comm", 1e-6, 2e-6, ready_s=1.5e-6, tags={"msg": "7"}),
             Span("mm@r0", "mm", 0, "s", "matmul", "compute", 2e-6, 5e-6, ready_s=1e-6),
             Span("x@r0", "x", 0, "s", "compute", "compute", 5e-6, 6e-6)]
    w = op_window(Timeline("x", "predict", 2, spans=spans), stream_reached=True)
    assert w == {"ar@r0": (3e-6, 9e-6), "ar@r1": (3e-6, 9e-6), "s@r0": (1.5e-6, 2e-6), "r@r1": (1.5e-6, 2e-6),
                 "mm@r0": (1e-6, 5e-6), "x@r0": (5e-6, 6e-6)}
    s, e = _windows(Timeline("x", "predict", 2, spans=spans), stream_reached=False)
    assert np.array_equal(s, [x.start_s for x in spans]) and np.array_equal(e, [x.end_s for x in spans])


@pytest.mark.parametrize("case", sorted(GOLDEN["analyze"]))
def test_analyze_gives_the_row_by_row_report(case: str) -> None:
    from make_compare_golden import analyze_golden

    assert json.loads(json.dumps(analyze_golden()[case])) == GOLDEN["analyze"][case]


def test_analyze_of_a_timeline_without_pipeline_names_builds_no_span_rows() -> None:
    from schedsim.report.analysis import format_report
    from schedsim.trace.analyze import pipeline_bubbles, rows_from_timeline, tag_pipeline
    from schedsim.trace.common import ImportResult

    pred = cases()["ag8_event_timed"][0]
    tl = Timeline.from_dict(json.loads(json.dumps(pred.to_dict())))
    assert tag_pipeline(tl) == 0 and pipeline_bubbles(tl) is None
    text = format_report(ImportResult(tl, *rows_from_timeline(tl), []))
    assert "## critical path" in text and tl._spans is None
