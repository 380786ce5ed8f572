"""A measured 2-rank 1F1B run (gloo CPU ranks, ``execute --profiler``) shown as a pipeline: bubble per rank
from its timeline and from its Kineto traces, the unit-step chart, and a valid Perfetto trace."""

from __future__ import annotations

import re

import pytest
from exec_helpers import ROOT

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


def test_executed_1f1b_shows_as_a_pipeline(gloo2, tmp_path):
    from schedsim.report.pipeline_chart import draw_pipeline, pipeline_view, unit_steps
    from schedsim.report.trace_check import check_trace_file
    from schedsim.sim.timeline import Timeline
    from schedsim.trace.analyze import kineto_ranges_timeline, pipeline_bubbles, tag_pipeline

    r, base = gloo2["pp_unit"]  # execute pp_unit.yaml --set p=2 --set m=4 --profiler (tests/conftest.py)
    out = base / "pp_unit"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_trace_file(out / "trace.json", require_flows=True, require_counters=True)
    import json
    from collections import Counter

    cats = Counter(e["cat"] for e in json.loads((out / "trace.json").read_text())["traceEvents"] if e["ph"] == "s")
    # 8 messages (the F and the B of 4 microbatches), send -> recv from the graph. The writer draws a message's
    # arrow only when the recv ends after the send starts (5 % inside each span); on gloo the first member of a
    # batch_isend_irecv ends with its whole group, so its arrow may start after its peer's recv ended (seen
    # 2026-11-30: sendF0.3 posted with recvB0.2 ran 2.47-4.19 ms, its recv ended at 2.47 ms). Count those.
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    G = build_graph(load_schedule(ROOT / "tests/data/pp_unit.yaml", parse_overrides(["p=2", "m=4"])))
    by = Timeline.read_json(out / "timeline.json").by_id()
    pairs = G.graph["p2p"]
    assert len(pairs) == 8
    drawable = sum(by[u].start_s + 0.05 * by[u].duration_s <= by[v].end_s - 0.05 * by[v].duration_s
                   for u, v in pairs)
    assert cats["p2p"] == drawable >= 4
    assert cats["dep"] > 0  # and the graph's cross-stream dependencies (compute -> send, recv -> compute)

    tl = Timeline.read_json(out / "timeline.json")
    tag_pipeline(tl)
    view = pipeline_view(tl)
    assert sorted((s.rank, s.kind) for s in view.spans) == sorted([(r_, k) for r_ in (0, 1) for k in "FB" * 4])
    # the measured order is 1F1B's, so its unit steps are the hand-counted 1F1B figure for p=2, m=4
    steps = unit_steps(view)
    assert max(b for _a, b in steps.values()) == 15
    assert steps["B0.3@r0"] == (13, 15) and steps["F1.0@r1"] == (1, 2)
    bub = pipeline_bubbles(tl)
    assert set(bub) == {0, 1} and all(0.0 < b < 1.0 for b in bub.values())

    ktl = kineto_ranges_timeline(sorted(out.glob("kineto_rank*.json.gz")))
    kv = pipeline_view(ktl)
    assert len(kv.spans) == 16 and unit_steps(kv) == steps

    from typer.testing import CliRunner

    from schedsim.cli import app

    res = CliRunner().invoke(app, ["analyze", *map(str, sorted(out.glob("kineto_rank*.json.gz"))), "--charts",
                                   str(tmp_path / "c")])
    assert res.exit_code == 0, res.output[-3000:]
    rows = re.findall(r"^\s+([01]) (0\.\d{4})$", res.stdout, re.M)
    assert [x for x, _ in rows] == ["0", "1"]
    assert (tmp_path / "c" / "pipeline.png").exists()
    fig = draw_pipeline(tl)
    assert any(f"{tl.makespan_s * 1e3:.3f} ms" in t.get_text() for t in fig.findobj(
        lambda a: getattr(a, "get_gid", lambda: None)() == "makespan"))
