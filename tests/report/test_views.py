"""Charts, traces, memory curves and summaries: values checked against the timeline and hand counts."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from schedsim.report.chart_base import MAKESPAN_GID, choose_ranks
from schedsim.report.chrome import chrome_trace
from schedsim.report.gantt import busy_share, draw_gantt
from schedsim.report.memory_chart import draw_memory
from schedsim.report.pipeline_chart import draw_pipeline, pipeline_view, unit_steps
from schedsim.report.trace_check import TraceFormatError, check_trace
from schedsim.sim.timeline import Span, Timeline

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pp_run(toy_profile_module):
    """pp_unit (F = I = W = 1 µs) with p=2, m=4, 1F1B and 2 data-parallel replicas: the gradient
    all_reduce after the last backward makes the makespan longer than the pipeline actions."""
    from schedsim.graph.build import build_graph
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    text = (ROOT / "tests" / "data" / "pp_unit.yaml").read_text()
    text = text.replace('world_size: "{p}"', 'world_size: "{2 * p}"').replace(
        "  m: m\n", "  m: m\n  data_parallel: 2\n  grad_allreduce_bytes: 10000000\n  activation_memory_bytes: 1000\n")
    spec = load_text(text, "pp_unit_dp2.yaml", {"p": 2, "m": 4})
    G = build_graph(spec)
    return spec, G, simulate(lower(spec), toy_profile_module)


@pytest.fixture(scope="module")
def toy_profile_module():
    from schedsim.hardware.profile import HardwareProfile
    from tests.conftest import toy_profile_dict

    return HardwareProfile.model_validate(toy_profile_dict())


def _labels(fig) -> list[float]:
    out = []
    for t in fig.findobj(lambda a: getattr(a, "get_gid", lambda: None)() == MAKESPAN_GID):
        m = re.search(r"makespan ([0-9.]+) ms", t.get_text())
        assert m, t.get_text()
        out.append(float(m.group(1)))
    return out


def test_every_chart_labels_the_timeline_makespan(pp_run):
    _spec, _G, tl = pp_run
    last_action = max(s.end_s for s in pipeline_view(tl).spans)
    assert tl.makespan_s > last_action * 1.05  # the bug case: the pipeline boxes end before the makespan
    ms = round(tl.makespan_s * 1e3, 3)
    for fig in (draw_gantt([("predicted", tl)]), draw_pipeline(tl, mode="steps"), draw_pipeline(tl, mode="time"),
                draw_memory({0: [(0.0, 0.0), (tl.makespan_s / 2, 5.0)]}, tl.makespan_s)):
        assert _labels(fig) == [ms]


def _boxes(fig) -> list:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    ax = fig.axes[0]
    arts = [t for t in fig.findobj(lambda a: getattr(a, "get_gid", lambda: None)() == MAKESPAN_GID)]
    arts += [ax.title]
    if ax.get_legend():
        arts.append(ax.get_legend())
    return [a.get_window_extent(r) for a in arts]


def test_compare_labels_and_legend_never_overlap():
    a = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.000e-3),
                                           Span("c@r0", "c", 0, "c", "all_reduce", "comm", 0.0, 0.5e-3)])
    b = Timeline("x", "execute", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.001e-3)])
    fig = draw_gantt([("predicted", a), ("measured", b)], title="predicted vs measured")
    assert sorted(_labels(fig)) == [1.0, 1.001]
    boxes = _boxes(fig)
    assert len(boxes) == 4
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (i, j)


def test_busy_share_by_hand():
    import numpy as np

    # two ranks; one busy on [0, 1] s: bins [0, .5], [.5, 1], [1, 2] hold 0.5, 0.5 and 0 of the pair's time
    got = busy_share([(0.0, 1.0)], 2, np.array([0.0, 0.5, 1.0, 2.0]))
    assert np.allclose(got, [0.5, 0.5, 0.0])
    # [0.25, 0.75] covers half of each of the first two bins for one of 1 ranks
    assert np.allclose(busy_share([(0.25, 0.75)], 1, np.array([0.0, 0.5, 1.0])), [0.5, 0.5])


def test_lanes_fold_past_the_limit_and_charts_stay_short():
    ranks = list(range(1024))
    shown, folded = choose_ranks(ranks, {r: 3 for r in ranks}, 48)
    assert shown[0] == 0 and shown[-1] == 1023 and 3 * len(shown) <= 46 and len(shown) + len(folded) == 1024
    spans = [Span(f"{n}@r{r}", n, r, st, k, res, 0.001 * (r % 7), 0.001 * (r % 7) + 0.002)
             for r in ranks for n, st, k, res in (("mm", "s0", "matmul", "compute"), ("ar", "c", "all_reduce", "comm"))]
    fig = draw_gantt([("predicted", Timeline("big", "predict", 1024, spans=spans))])
    assert fig.get_figheight() * fig.dpi < 4000
    _shown, folded = choose_ranks(ranks, {r: 2 for r in ranks}, 48)  # the chart's 2 streams per rank
    assert len(folded) == 1024 - 23  # 23 ranks × 2 lanes + 2 bands = 48
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-2:] == [f"{len(folded)} other ranks: compute busy share", f"{len(folded)} other ranks: comm busy share"]


def _view(actions):
    spans = []
    for i, (r, op, st, mb) in enumerate(actions):
        spans.append(Span(f"{op}{st}.{mb}@r{r}", str(mb), r, "pipeline", op, "compute", float(i), float(i) + 0.5,
                          tags={"pp_op": op, "stage": st, "mb": mb}))
    return Timeline("v", "predict", 2, spans=spans)


def test_unit_steps_of_1f1b_p2_m2():
    # rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1 (timeline order); B = 2 steps
    v = _view([(0, "F", 0, 0), (0, "F", 0, 1), (1, "F", 1, 0), (1, "B", 1, 0), (1, "F", 1, 1), (0, "B", 0, 0),
               (1, "B", 1, 1), (0, "B", 0, 1)])
    st = unit_steps(v)
    assert st == {"F0.0@r0": (0, 1), "F0.1@r0": (1, 2), "F1.0@r1": (1, 2), "B1.0@r1": (2, 4), "F1.1@r1": (4, 5),
                  "B0.0@r0": (4, 6), "B1.1@r1": (5, 7), "B0.1@r0": (7, 9)}


def test_one_box_per_full_backward(pp_run):
    _spec, _G, tl = pp_run
    view = pipeline_view(tl)
    n_b = sum(1 for s in view.spans if s.kind == "B")
    assert n_b == 4 * 4  # m = 4 microbatches on each of the 4 ranks, I and W parts merged
    assert {s.kind for s in view.spans} == {"F", "B"}


def test_predicted_trace_passes_the_checker_with_flows_and_counters(pp_run):
    from schedsim.report.memory import memory_over_time

    _spec, G, tl = pp_run
    tl.meta["memory"] = memory_over_time(tl, G)
    tr = chrome_trace([("predicted", tl)], graph=G)
    n = check_trace(tr, require_flows=True, require_counters=True)
    cats = {e["cat"] for e in tr["traceEvents"] if e["ph"] == "s"}
    assert cats == {"dep", "p2p", "collective"}
    assert n["flows"] == len(G.graph["p2p"]) + sum(1 for e in tr["traceEvents"] if e["ph"] == "s" and e["cat"] != "p2p")
    names = {e["name"] for e in tr["traceEvents"] if e["ph"] == "C"}
    assert {"memory allocated (bytes)", "GPU share in use", "comm bandwidth in use (B/s)"} <= names
    sorts = [e for e in tr["traceEvents"] if e["ph"] == "M" and e["name"].endswith("sort_index")]
    assert len(sorts) >= 4 + len(tl.lanes())


def _x(pid, tid, ts, dur, name="a"):
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


_META = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
         {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "s"}}]


@pytest.mark.parametrize("events, rule", [
    ([_x(0, 1, 0, 10), _x(0, 1, 5, 10)], "nest"),
    ([_x(0, 1, 0, 10), {"ph": "s", "id": 1, "cat": "d", "pid": 0, "tid": 1, "ts": 1}], "one 's' and one 'f'"),
    ([_x(0, 1, 0, 10), {"ph": "s", "id": 1, "cat": "d", "pid": 0, "tid": 1, "ts": 1},
      {"ph": "f", "bp": "e", "id": 1, "cat": "d", "pid": 0, "tid": 1, "ts": 50}], "binds to no slice"),
    ([_x(0, 1, 0, 10), {"ph": "C", "name": "mem", "pid": 0, "ts": 1, "args": {"b": "x"}}], "numeric args"),
    ([_x(0, 1, 0, 10), {"ph": "C", "name": "mem", "pid": 0, "ts": 1, "args": {"b": 1}},
      {"ph": "C", "name": "mem", "pid": 0, "ts": 2, "args": {"c": 1}}], "changes its series"),
    ([_x(0, 2, 0, 10)], "no thread_name"),
    ([_x(0, 1, -1, 10)], "ts must be"),
])
def test_checker_rejects(events, rule):
    with pytest.raises(TraceFormatError, match=re.escape(rule)):
        check_trace({"traceEvents": _META + events})


def test_memory_curve_by_hand():
    from schedsim.report.memory import memory_over_time

    tag = lambda ph, mb: {"pp_op": ph, "phase": ph, "stage": 0, "mb": mb}  # noqa: E731
    spans = [Span("F0@r0", "F0", 0, "c", "compute", "compute", 0.0, 1.0, tags=tag("F", 0)),
             Span("F1@r0", "F1", 0, "c", "compute", "compute", 1.0, 2.0, tags=tag("F", 1)),
             Span("rv@r0", "rv", 0, "p", "recv", "comm", 1.5, 2.5, bytes=50.0),
             Span("W0@r0", "W0", 0, "c", "compute", "compute", 2.0, 3.0, tags=tag("W", 0)),
             Span("W1@r0", "W1", 0, "c", "compute", "compute", 3.0, 4.0, tags=tag("W", 1))]
    tl = Timeline("m", "predict", 1, spans=spans, meta={"pipeline": {"activation_memory_bytes": 100}})
    mem = memory_over_time(tl, static={0: {"parameters": 7.0}})
    r = mem["ranks"][0]
    # 7 static; +100 at 0, +100 at 1, +50 at 1.5 (peak 257), recv freed at 2.5, W0 frees at 3, W1 at 4
    assert r["steps"].tolist() == [[0.0, 107.0], [1.0, 207.0], [1.5, 257.0], [2.5, 207.0], [3.0, 107.0], [4.0, 7.0]]
    assert (r["peak_bytes"], r["peak_s"], r["peak_op"]) == (257.0, 1.5, "rv@r0")


def test_summary_of_1024_ranks_fits_in_40_lines():
    from rich.console import Console

    from schedsim.report.summary import print_summary
    from schedsim.sim.metrics import Metrics

    spans = [Span(f"mm@r{r}", "mm", r, "s", "matmul", "compute", 0.0, 1.0 + r / 1024) for r in range(1024)]
    tl = Timeline("big", "predict", 1024, spans=spans)
    buf = io.StringIO()
    print_summary(tl, Metrics.of(tl), console=Console(file=buf, width=140))
    text = buf.getvalue()
    assert len(text.splitlines()) <= 40
    assert "0 worst" in text and "1023 best" in text and "1018 more ranks" in text
    small = Timeline("s", "predict", 12, spans=spans[:12])
    buf = io.StringIO()
    print_summary(small, Metrics.of(small), console=Console(file=buf, width=140), all_ranks=True)
    rows = [ln.split("│")[1].strip() for ln in buf.getvalue().splitlines() if ln.startswith("│")]
    assert rows == [str(r) for r in range(12)]


def test_sweep_bars_for_categories_and_legend_for_two_axes():
    from schedsim.report.charts import draw_sweep

    rows = [{"setting": {"schedule": s, "m": m}, "makespan_s": 0.001 * (i + 1)}
            for i, (s, m) in enumerate((s, m) for s in ("1f1b", "zbv") for m in (4, 8))]
    fig = draw_sweep(rows, [("schedule", ["1f1b", "zbv"]), ("m", [4, 8])], "t")
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [1.0, 2.0, 3.0, 4.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["m=4", "m=8"]
    fig = draw_sweep([{"setting": {"m": m}, "makespan_s": m * 1e-3} for m in (1, 2)], [("m", [1, 2])], "t")
    assert not fig.axes[0].patches and list(fig.axes[0].lines[0].get_ydata()) == [1.0, 2.0]


def test_version_flag():
    from typer.testing import CliRunner

    import schedsim
    from schedsim.cli import app

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"schedsim {schedsim.__version__}"


def test_compare_trace_passes_the_checker(pp_run, tmp_path):
    """The two-timeline trace of compare: processes per (timeline, rank), predicted_us/measured_us args."""
    from schedsim.report.chrome import write_chrome_trace
    from schedsim.report.trace_check import check_trace_file

    _spec, _G, tl = pp_run
    meas = Timeline(tl.schedule, "execute", tl.world_size,
                    spans=[s._replace(start_s=s.start_s * 1.1, end_s=s.end_s * 1.1) for s in tl.spans])
    write_chrome_trace(tmp_path / "t.json", [("predicted", tl), ("measured", meas)])
    n = check_trace_file(tmp_path / "t.json", require_flows=True)
    assert n["slices"] == 2 * len(tl.spans)
    import json

    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    x = next(e for e in ev if e["ph"] == "X" and e["args"]["op"] == tl.spans[0].id)
    assert x["args"]["measured_us"] == pytest.approx(x["args"]["predicted_us"] * 1.1, rel=1e-6)


def test_pipeline_ranges_of_a_measured_run_give_bubbles_and_a_chart():
    """torch pipelining's PP:{stage}{op}{mb} ranges of a 2-rank 1F1B run, m = 2, F = 1 ms, B = 2 ms."""
    from schedsim.report.analysis import format_report
    from schedsim.trace.analyze import pipeline_bubbles, tag_pipeline
    from schedsim.trace.common import ImportResult

    acts = {0: [("PP:0F0", 0, 1), ("PP:0F1", 1, 2), ("PP:0B0", 4, 6), ("PP:0B1", 7, 9)],
            1: [("PP:1F0", 1, 2), ("PP:1B0", 2, 4), ("PP:1F1", 4, 5), ("PP:1B1", 5, 7)]}
    spans = [Span(f"{n}@r{r}", n, r, "7", "kernel", "compute", a * 1e-3, b * 1e-3) for r, lst in acts.items()
             for n, a, b in lst]
    tl = Timeline("pp", "import", 2, spans=spans)
    assert tag_pipeline(tl) == 8
    b = pipeline_bubbles(tl)
    # makespan 9 ms; rank 0 busy 6 ms, rank 1 busy 6 ms: 1 − 6/9 = 1/3 each
    assert b == pytest.approx({0: 1 / 3, 1: 1 / 3})
    steps = unit_steps(pipeline_view(tl))
    assert steps["B0.1@r0"] == (7, 9)  # the same schedule in unit steps as the hand count above
    assert _labels(draw_pipeline(tl)) == [9.0]
    text = format_report(ImportResult(tl, {}, {}, []))
    assert "pipeline bubble per rank" in text and "   0 0.3333" in text


def test_executor_and_megatron_names_are_tagged():
    from schedsim.trace.analyze import tag_pipeline

    names = ["F1.3.fwd", "B0.2.W.wgrad", "forward-compute", "forward-compute", "Backward 4", "matmul_kernel"]
    tl = Timeline("n", "execute", 1, spans=[Span(f"{n}@r0", n, 0, "s", "k", "compute", i, i + 1.0)
                                            for i, n in enumerate(names)])
    assert tag_pipeline(tl) == 5
    got = [(s.tags.get("pp_op"), s.tags.get("stage"), s.tags.get("mb"), s.tags.get("phase")) for s in tl.spans]
    assert got == [("F", 1, 3, "F"), ("B", 0, 2, "W"), ("F", 0, 0, "F"), ("F", 0, 1, "F"), ("B", 0, 4, "B"),
                   (None, None, None, None)]


def test_api_tour_runs(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("api_tour", ROOT / "examples" / "api_tour.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(tmp_path)
    run = res["run"]
    assert {p.name for p in tmp_path.iterdir()} == {"gantt.png", "pipeline.png", "memory.png"}
    # the API's numbers are the timeline's: makespan, and the sweep's 1f1b row is the same prediction
    one = next(r for r in res["sweep"] if r["setting"]["schedule"] == "1f1b")
    assert one["makespan_s"] == pytest.approx(run.makespan_s, rel=1e-12)
    peak = run.metrics.memory_peak
    steps = run.timeline.meta["memory"]["ranks"][peak.rank]["steps"]
    assert peak.bytes == max(b for _t, b in steps)


def test_counter_values_by_hand():
    """GPU share = Σ solo/actual over running compute ops; bandwidth = Σ bytes/duration over running comm ops."""
    spans = [Span("a@r0", "a", 0, "s0", "matmul", "compute", 0.0, 2e-6, solo_s=1e-6),
             Span("b@r0", "b", 0, "s1", "matmul", "compute", 1e-6, 3e-6, solo_s=2e-6),
             Span("c@r0", "c", 0, "c", "all_gather", "comm", 0.0, 4e-6, bytes=8e3)]
    tr = chrome_trace([("predicted", Timeline("x", "predict", 1, spans=spans))])
    check_trace(tr, require_counters=True)
    share = [(e["ts"], e["args"]["share"]) for e in tr["traceEvents"] if e.get("name") == "GPU share in use"]
    # a alone at 0.5 from 0 µs, a + b = 1.5 from 1 µs, b alone at 1.0 from 2 µs, nothing from 3 µs
    assert share == [(0.0, 0.5), (1.0, 1.5), (2.0, 1.0), (3.0, 0.0)]
    bw = [(e["ts"], e["args"]["bytes_per_s"]) for e in tr["traceEvents"] if e.get("name", "").startswith("comm bandwidth")]
    assert bw == [(0.0, 2e9), (4.0, 0.0)]


def test_committed_notebook_is_executed_and_current():
    """examples/api_tour.ipynb (built by examples/build_notebook.py): every code cell has outputs, figures
    are inline PNGs, and the printed makespan and bubble are what the API predicts now."""
    import json

    from schedsim import api

    nb = json.loads((ROOT / "examples" / "api_tour.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] for c in code)
    assert sum("image/png" in o.get("data", {}) for c in code for o in c["outputs"]) == 3
    first = "".join(code[0]["outputs"][0]["text"])
    run = api.predict(api.load(ROOT / "schedules" / "pipeline_schedules.yaml", p=4, m=8, schedule="1f1b"))
    assert f"makespan {run.makespan_s * 1e3:.3f} ms" in first
    assert run.metrics.pipeline is not None
    assert f"bubble (idle fraction): {round(run.metrics.pipeline.bubble_of_makespan.overall, 4)}" in first


@pytest.mark.parametrize("chunk", [1, 7, 20_000])
def test_streamed_trace_file_is_the_trace_dict(pp_run, tmp_path, monkeypatch, chunk):
    """trace.json is written in orjson chunks: whatever the chunk size, the file parses to exactly the dict that
    :func:`chrome_trace` builds (chunk 1 and 7 put a boundary between every few events)."""
    import json

    from schedsim.report import chrome

    _spec, G, tl = pp_run
    monkeypatch.setattr(chrome, "_CHUNK", chunk)
    chrome.write_chrome_trace(tmp_path / "t.json", [("predicted", tl)], G)
    want = json.loads(json.dumps(chrome_trace([("predicted", tl)], G)))
    got = json.loads((tmp_path / "t.json").read_bytes())
    assert len(got["traceEvents"]) == len(want["traceEvents"]) > 3 * 7
    assert got == want


def test_gantt_draws_each_ops_wait_before_its_bar():
    """docs/metrics.md, "Per-op spans": an op whose stream reached it at 1 ms but that got the GPU at 3 ms gets a grey
    band over [1, 3] ms in its lane (and the legend entry); an op without ``stream_s`` or without a wait gets none."""
    import numpy as np

    from schedsim.report.chart_base import WAIT

    tl = Timeline("w", "predict", 1, spans=[
        Span("a@r0", "a", 0, "s", "matmul", "compute", 3e-3, 5e-3, stream_s=1e-3),
        Span("b@r0", "b", 0, "s", "matmul", "compute", 5e-3, 6e-3, stream_s=5e-3)])
    fig = draw_gantt([("predicted", tl)])
    ax = fig.axes[0]
    grey = [c for c in ax.collections if np.allclose(c.get_facecolor()[0][:3], matplotlib_rgb(WAIT))]
    assert len(grey) == 1 and len(grey[0].get_paths()) == 1
    xs = grey[0].get_paths()[0].vertices[:, 0]
    assert (xs.min(), xs.max()) == pytest.approx((1.0, 3.0))
    assert "wait (stream reached, no SMs yet)" in [t.get_text() for t in ax.get_legend().get_texts()]
    plain = draw_gantt([("measured", Timeline("w", "execute", 1, spans=[Span("a@r0", "a", 0, "s", "matmul",
                                                                             "compute", 3e-3, 5e-3)]))])
    assert "wait (stream reached, no SMs yet)" not in [t.get_text() for t in plain.axes[0].get_legend().get_texts()]


def matplotlib_rgb(c: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(c)
