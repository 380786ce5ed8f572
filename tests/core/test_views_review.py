"""Faults found by reviewing issue 13's charts, traces and summaries (each test failed before its fix)."""

from __future__ import annotations

import pytest

from schedsim.report.chrome import chrome_trace
from schedsim.report.trace_check import TraceFormatError, check_trace
from schedsim.sim.timeline import Span, Timeline


def _tl(ranks, source="predict"):
    spans = [Span(f"mm@r{r}", "mm", r, "compute", "matmul", "compute", 0.001 * r, 0.001 * r + 0.002)
             for r in ranks]
    return Timeline("t", source, max(ranks) + 1, spans=spans)


def test_compare_trace_of_different_rank_sets_keeps_one_process_per_timeline_and_rank():
    """Predicted 4 ranks against a measured rank 0 only: the measured rank used to get pid 1, predicted rank 1's."""
    tr = chrome_trace([("predicted", _tl([0, 1, 2, 3])), ("measured", _tl([0], "import"))])
    check_trace(tr)
    names = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == ["measured rank 0"] + [f"predicted rank {r}" for r in range(4)]
    x = {(e["pid"], e["args"]["op"]) for e in tr["traceEvents"] if e["ph"] == "X"}
    assert len(x) == 5 and len({p for p, _ in x}) == 5


_PN = {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}}
_TN = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "s"}}


def _x(ts, dur, pid=0, tid=1):
    return {"ph": "X", "name": "a", "pid": pid, "tid": tid, "ts": ts, "dur": dur}


@pytest.mark.parametrize("events, rule", [
    ([{**_PN, "args": {"name": "rank 1"}}, _x(0, 1)], "two processes share a pid"),
    ([{**_TN, "args": {"name": "other"}}, _x(0, 1)], "two threads share a tid"),
    ([{**_x(0, 1), "pid": True}], "pid must be an int"),
])
def test_checker_rejects_shared_names_and_bool_ids(events, rule):
    with pytest.raises(TraceFormatError, match=rule):
        check_trace({"traceEvents": [_PN, _TN, *events]})


def test_checker_binds_a_flow_to_a_long_parent_past_many_children():
    """A flow end in a gap between the 100 children of a parent slice binds to the parent (Perfetto: the
    deepest enclosing slice); the checker used to look back only 64 slices and reject it."""
    kids = [_x(10 * i, 5) for i in range(100)]
    flow = [{"ph": "s", "id": 7, "cat": "dep", "pid": 0, "tid": 1, "ts": 2},
            {"ph": "f", "bp": "e", "id": 7, "cat": "dep", "pid": 0, "tid": 1, "ts": 997}]
    assert check_trace({"traceEvents": [_PN, _TN, _x(0, 1000), *kids, *flow]})["flows"] == 1
    with pytest.raises(TraceFormatError, match="binds to no slice"):  # past the parent's end: no slice
        check_trace({"traceEvents": [_PN, _TN, _x(0, 1000), *kids, {**flow[0]}, {**flow[1], "ts": 1001}]})
