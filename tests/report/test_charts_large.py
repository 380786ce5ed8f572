"""Charts of large runs: lanes folded with a note, boxes as collections built from the columns, sub-pixel boxes as
pixel runs, dense SVGs rasterized, and the fast label artist drawing what one Text per label draws."""

from __future__ import annotations

import re

import numpy as np
import pytest

from schedsim.report import chart_base as B
from schedsim.report import gantt as G
from schedsim.report import pipeline_chart as P
from schedsim.sim.timeline import Span, Timeline


def _wide_timeline(n_ranks: int = 1024) -> Timeline:
    """Every rank: a matmul on [0, 1] ms and an all_reduce on [0, 2] ms (exposed on [1, 2] ms)."""
    spans = [Span(f"{n}@r{r}", n, r, st, k, res, 0.0, d)
             for r in range(n_ranks) for n, st, k, res, d in (("mm", "s0", "matmul", "compute", 1e-3),
                                                              ("ar", "c", "all_reduce", "comm", 2e-3))]
    tl = Timeline("big", "predict", n_ranks, spans=spans)
    tl.critical_path = ["ar@r500"]
    return tl


def _note(fig) -> str:
    (t,) = fig.findobj(lambda a: getattr(a, "get_gid", lambda: None)() == G.LANES_GID)
    return t.get_text()


def test_1024_ranks_fold_into_named_lanes_bands_and_one_collection_per_lane_and_colour():
    from matplotlib.collections import PolyCollection
    from matplotlib.image import AxesImage

    fig = G.draw_gantt([("predicted", _wide_timeline())])
    ax = fig.axes[0]
    # 2 lanes a rank, 48 lanes: 46 for 23 ranks. Rank 0 and 1023, the critical path's 500, then alternately
    # the first and last: 1..10 and 1022..1013
    shown = list(range(11)) + [500] + list(range(1013, 1024))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:-2] == [f"r{r} {st}" for r in shown for st in ("s0", "c")]
    assert labels[-2:] == ["1001 other ranks: compute busy share", "1001 other ranks: comm busy share"]
    note = _note(fig)
    assert note.startswith("ranks shown: 0–10, 500, 1013–1023 of 1,024 ") and "the other 1,001 ranks" in note
    polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
    # a box collection per shown lane (one colour each) and an exposed-comm band per comm lane
    assert len(polys) == 46 + 23
    assert sum(len(c.get_paths()) for c in polys) == 46 + 23
    # the bands: int(12 in × 110 dpi × 0.7) = 923 bins over 2 ms; the 1001 folded ranks all compute on [0, 1] ms
    # (461.5 bins: bin 461 half busy) and communicate on [0, 2] ms
    comp, comm = [im.get_array()[0] for im in ax.get_images() if isinstance(im, AxesImage)]
    assert len(comp) == 923 and np.allclose(comp[:461], 1.0) and comp[461] == pytest.approx(0.5)
    assert np.allclose(comp[462:], 0.0)
    assert np.allclose(comm, 1.0)


def test_small_charts_have_no_note():
    fig = G.draw_gantt([("predicted", _wide_timeline(4))])
    assert not fig.findobj(lambda a: getattr(a, "get_gid", lambda: None)() == G.LANES_GID)


def test_merged_per_rank_keeps_ranks_apart_and_joins_touching_intervals():
    from schedsim.sim.metrics import merge_per_group

    rank = np.array([1, 0, 0, 0, 1, 2])
    start = np.array([0.5, 1.0, 0.0, 5.0, 0.8, 3.0])
    end = np.array([1.0, 2.0, 1.0, 6.0, 0.9, 3.0])  # rank 2's interval is empty
    _g, a, b = merge_per_group(rank, start, end)
    assert a.tolist() == [0.0, 5.0, 0.5] and b.tolist() == [2.0, 6.0, 1.0]
    # the same as busy_share of the (start, end) pairs
    edges = np.array([0.0, 1.0, 2.0, 6.0])
    assert np.allclose(G.busy_share((a, b), 2, edges), G.busy_share(list(zip(a, b, strict=True)), 2, edges))
    assert np.allclose(G.busy_share((a, b), 2, edges), [(1 + 0.5) / 2, 1 / 2, 1 / 8])


def test_a_lane_of_more_boxes_than_pixels_is_drawn_as_its_pixel_runs():
    # 3,000 matmuls of 1 µs every 2 µs (6 ms), a 4 ms gap, 1,000 more: 924 px over 10 ms · 1.02 → 1 px ≈ 11 µs,
    # so the 1 µs gaps close and the 4 ms one stays: two runs, [0, 5.999] ms and [10, 11.999] ms
    starts = [2e-6 * i for i in range(3000)] + [10e-3 + 2e-6 * i for i in range(1000)]
    spans = [Span(f"mm{i}@r0", f"mm{i}", 0, "s0", "matmul", "compute", t, t + 1e-6) for i, t in enumerate(starts)]
    fig = G.draw_gantt([("predicted", Timeline("dense", "predict", 1, spans=spans))])
    (col,) = fig.axes[0].collections
    xs = sorted((float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max())) for p in col.get_paths())
    assert xs == [pytest.approx((0.0, 5.999)), pytest.approx((10.0, 11.999))]
    assert not col.get_rasterized()


def test_pixel_runs_by_hand():
    x0, w = B._pixel_runs(np.array([0.0, 1.5, 2.2, 10.0]), np.array([1.0, 0.5, 3.0, 1.0]), 1.0)
    assert x0.tolist() == [0.0, 10.0] and w.tolist() == [5.2, 1.0]  # 0.5 and 0.2 gaps close; 4.8 stays


def test_dense_svg_is_rasterized(tmp_path, monkeypatch):
    tl = _wide_timeline(8)
    plain = G.write_gantt(tmp_path / "a", [("predicted", tl)], formats=("svg",))[0].read_text()
    monkeypatch.setattr(G, "RASTER_BOXES", 10)  # 8 ranks: 16 boxes and 8 exposed bands
    fig = G.draw_gantt([("predicted", tl)])
    assert all(c.get_rasterized() for c in fig.axes[0].collections)
    dense = G.write_gantt(tmp_path / "b", [("predicted", tl)], formats=("svg",))[0].read_text()
    assert "<image" in dense and "<image" not in plain
    # 16 box collections and 8 exposed-comm bands as vector groups before; none after
    assert len(re.findall('<g id="boxes_', plain)) == 24 and "boxes_" not in dense


def test_svg_writes_a_collection_of_boxes_as_one_path_with_its_rectangles(tmp_path):
    # 3 ranks × 4 matmuls of 1 ms every 2 ms on s0: one collection of 4 boxes per lane; the SVG has one <path>
    # per collection holding its 4 rectangles (4 moves), styled as the collection was (no miter join)
    spans = [Span(f"mm{i}@r{r}", f"mm{i}", r, "s0", "matmul", "compute", 2e-3 * i, 2e-3 * i + 1e-3)
             for r in range(3) for i in range(4)]
    tl = Timeline("t", "predict", 3, spans=spans)
    png, svg = G.write_gantt(tmp_path / "g", [("predicted", tl)])
    groups = re.findall(r'<g id="boxes_\d+">(.*?)</g>\s*</g>', svg.read_text(), re.S)
    assert len(groups) == 3
    for g in groups:
        (d,) = re.findall(r'<path d="([^"]*)"', g)
        assert d.count("M") == 4 and d.count("z") == 4
        assert "fill: #" in g and "stroke-linejoin" not in g
    # the PNG is Agg's drawing of the collections as they are (the compound form only while a vector file is
    # written): the same bytes as the figure saved directly
    fig = G.draw_gantt([("predicted", tl)])
    assert not any(getattr(c, "compound", False) for c in fig.axes[0].collections)
    assert B.write_figure(fig, tmp_path / "direct.png").read_bytes() == png.read_bytes()


def _pipeline(p: int, m: int) -> Timeline:
    """GPipe-like order: rank r runs F0..F(m-1) then B0..B(m-1), F 1 ms and B 2 ms, shifted by r ms."""
    spans = []
    for r in range(p):
        t = r * 1e-3
        for op, d in (("F", 1e-3), ("B", 2e-3)):
            for mb in range(m):
                spans.append(Span(f"{op}{r}.{mb}@r{r}", f"{op}{r}.{mb}", r, "s0", "matmul", "compute", t, t + d,
                                  tags={"pp_op": op, "stage": r, "mb": mb}))
                t += d
    return Timeline("pp", "predict", p, spans=spans)


@pytest.mark.parametrize("mode", ["steps", "time"])
def test_label_set_draws_the_pixels_of_one_text_per_label(monkeypatch, mode):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    tl = _pipeline(4, 24)  # 192 boxes with their microbatch numbers
    bufs = []
    for lim in (10**9, 1):
        monkeypatch.setattr(P, "LABEL_SET_MIN", lim)
        fig = P.draw_pipeline(tl, "pp", mode=mode)
        digits = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
        sets = [a for a in fig.axes[0].get_children() if type(a).__name__ == "LabelSet"]
        assert (len(digits), len(sets)) == ((192, 0) if lim > 1 else (0, 1))
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        bufs.append(np.asarray(canvas.buffer_rgba()).copy())
    assert bufs[0].shape == bufs[1].shape and (bufs[0] == bufs[1]).all()
    # on a matplotlib with per-glyph rendering (3.11) the label set took its cached-glyph path
    from matplotlib.ft2font import FT2Font

    if hasattr(FT2Font, "_layout"):
        assert P._AggGlyphs.of(canvas.get_renderer()) is not None


def test_pipeline_of_a_data_parallel_run_reads_the_first_replica_only():
    # 2 replicas of a 2-stage pipeline: ranks 2 and 3 repeat 0 and 1
    tl = _pipeline(4, 3)
    tl.meta["pipeline"] = {"p": 2, "dp": 2, "m": 3, "schedule": "gpipe", "stage_to_rank": {"0": 0, "1": 1}}
    lanes = P.pipeline_lanes(tl)
    assert lanes.shown == [0, 1] and lanes.note == " (data-parallel replica 0 of 2)"
    assert sorted({s.rank for s in lanes.view.spans}) == [0, 1] and len(lanes.view.spans) == 12
    full = P.pipeline_view(tl)
    assert [s for s in full.spans if s.rank < 2] == lanes.view.spans


def test_charts_of_a_columnar_timeline_never_build_its_rows(tmp_path):
    from schedsim.report.charts import write_charts

    src = _pipeline(2, 4)
    mem = {"unit": "bytes", "ranks": {str(r): {"static": {}, "steps": [[0.0, 0.0], [1e-3, 2.0 ** 20]],
                                               "peak_bytes": 2.0 ** 20, "peak_s": 1e-3, "peak_op": f"F{r}.0@r{r}"}
                                      for r in range(2)}}
    tl = Timeline("pp", "predict", 2, columns=src.columns, critical_path=["F0.0@r0"],
                  meta={"pipeline": {"p": 2, "dp": 1, "m": 4, "schedule": "gpipe"}, "memory": mem})
    names = sorted(p.name for p in write_charts(tmp_path, tl, "pp"))
    assert names == ["gantt.png", "gantt.svg", "memory.png", "pipeline.png", "pipeline_time.png"]
    assert tl._spans is None


def test_tag_pipeline_of_a_columnar_timeline_updates_its_columns():
    from schedsim.trace.analyze import tag_pipeline

    spans = [Span(f"PP:0F{i}@r0", f"PP:0F{i}", 0, "7", "kernel", "compute", i * 1e-3, (i + 1) * 1e-3)
             for i in range(2)]
    tl = Timeline("pp", "import", 1, columns=Timeline("pp", "import", 1, spans=spans).columns)
    assert len(tl.columns) == 2  # built before the tags
    assert tag_pipeline(tl) == 2
    assert [t.get("pp_op") for t in tl.columns.tags] == ["F", "F"]
    assert len(P.pipeline_view(tl).spans) == 2


def test_action_ranks_find_ranks_whose_actions_come_after_other_compute():
    # rank 0: an untagged GEMM then F; rank 1: only untagged compute; rank 2: a tagged all_reduce (comm, not an
    # action) then B; rank 3: a tag without a stage
    spans = [Span("g@r0", "g", 0, "s", "matmul", "compute", 0.0, 1.0),
             Span("f@r0", "f", 0, "s", "matmul", "compute", 1.0, 2.0, tags={"pp_op": "F", "stage": 0, "mb": 0}),
             Span("g@r1", "g", 1, "s", "matmul", "compute", 0.0, 1.0),
             Span("a@r2", "a", 2, "c", "all_reduce", "comm", 0.0, 1.0, tags={"pp_op": "F", "stage": 2, "mb": 0}),
             Span("b@r2", "b", 2, "s", "matmul", "compute", 1.0, 3.0, tags={"pp_op": "B", "stage": 2, "mb": 0}),
             Span("x@r3", "x", 3, "s", "matmul", "compute", 0.0, 1.0, tags={"pp_op": "F", "mb": 0})]
    tl = Timeline("t", "import", 4, spans=spans)
    assert P._action_ranks(tl) == [0, 2]
    assert P.pipeline_lanes(tl).shown == [0, 2]
    assert [s.id for s in P.pipeline_view(tl).spans] == ["F0.0@r0", "B2.0@r2"]


def test_tags_of_gives_the_rows_tags_in_order_from_either_form():
    # per-row dicts, and the coded tags of a simulated pipeline: each asked row's dict, in the order asked
    spans = [Span(f"F0.{i}@r0", f"F0.{i}", 0, "s0", "matmul", "compute", i, i + 1,
                  tags={"pp_op": "F", "stage": 0, "mb": i} if i % 3 else {}) for i in range(7)]
    rows = [5, 0, 3, 4]
    want = [{"pp_op": "F", "stage": 0, "mb": 5}, {}, {}, {"pp_op": "F", "stage": 0, "mb": 4}]
    assert Timeline("t", "predict", 1, spans=spans).columns.tags_of(rows) == want

    from pathlib import Path

    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule

    sched = Path(__file__).resolve().parents[2] / "schedules" / "pipeline_schedules.yaml"
    c = simulate(lower(load_schedule(sched)), load_profile("h200x2")).columns
    assert c._tags is None  # coded
    rows = [len(c) - 1, 0, len(c) // 2, 3]
    got = c.tags_of(rows)
    assert c._tags is None  # only those rows' dicts were built
    assert got == [c.tags[i] for i in rows] and any(t.get("pp_op") == "F" for t in got)


@pytest.mark.parametrize("hi", [1, 7, 600, 2**20])  # 2**20: four columns past 2**62 together, lexsort's path
def test_lex_order_is_lexsorts(hi: int) -> None:
    rng = np.random.default_rng(hi)
    cols = tuple(rng.integers(0, hi, 3000) for _ in range(4))
    order, key = P._lex_order(cols)
    assert order.tolist() == np.lexsort(cols[::-1]).tolist()
    rows = np.stack([c[order] for c in cols], axis=1)
    same = (rows[1:] == rows[:-1]).all(axis=1)
    assert ((key[1:] == key[:-1]) == same).all()  # equal keys exactly where the rows are equal
    empty = P._lex_order(tuple(np.zeros(0, np.int64) for _ in range(4)))
    assert len(empty[0]) == 0 and len(empty[1]) == 0


@pytest.mark.parametrize("mode", ["steps", "time"])
def test_pipeline_lane_labels_fit_in_the_figure(mode):
    # interleaved 1F1B, p = 16, v = 4: lane labels as long as "rank 10 (stage 10,26,42,58)" (27 characters),
    # which the fixed 1.4 in margin cut at the figure's left edge; the margin now grows with the longest label
    from schedsim import api

    text = ("schema_version: 1\nname: il\nworld_size: 16\npipeline:\n  schedule: interleaved_1f1b\n  p: 16\n"
            "  m: 16\n  v: 4\n  p2p: overlapped\n  stage:\n    forward: [{kind: compute, duration_us: 1}]\n"
            "    backward_input: [{kind: compute, duration_us: 1}]\n"
            "    backward_weight: [{kind: compute, duration_us: 1}]\n")
    run = api.predict(api.load_text(text))
    fig = P.draw_pipeline(run.timeline, mode=mode)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert len(labels) == 16 and max(len(t) for t in labels) == 27
    assert fig.get_tightbbox(renderer).x0 >= 0  # the lane labels drawn inside the figure's left edge


@pytest.mark.parametrize("setting", ["paused", "enabled", "frozen"])
def test_figures_freed_after_each_chart_where_the_gc_is_paused(tmp_path, monkeypatch, setting):
    """With the cyclic GC paused and nothing frozen (``predict``), each figure ``write_charts`` wrote is freed before
    the next chart draws, and the GC is left as it was (paused, nothing frozen); with the GC on, or objects frozen by
    the caller, nothing is frozen, unfrozen or collected by the charts. The same files are written in every
    setting."""
    import gc
    import weakref

    from matplotlib.figure import Figure

    from schedsim.report import charts as C

    made: list = []
    init = Figure.__init__

    def watch(self, *a, **k):
        init(self, *a, **k)
        made.append(weakref.ref(self))

    monkeypatch.setattr(Figure, "__init__", watch)
    alive_at_each: list[int] = []
    inner = C._write_charts

    def count(outdir, tl, title, formats, written):
        def after():
            written()
            alive_at_each.append(sum(r() is not None for r in made))
        return inner(outdir, tl, title, formats, after)

    monkeypatch.setattr(C, "_write_charts", count)
    src = _pipeline(2, 4)
    tl = Timeline("pp", "predict", 2, columns=src.columns, critical_path=["F0.0@r0"],
                  meta={"pipeline": {"p": 2, "dp": 1, "m": 4, "schedule": "gpipe"}})
    was = gc.isenabled()
    gc.collect()
    keep = [object()]  # the caller's frozen objects
    try:
        if setting != "enabled":
            gc.disable()
        if setting == "frozen":
            gc.freeze()
        frozen = gc.get_freeze_count()
        C.write_charts(tmp_path / setting, tl, "pp")
        # nothing left frozen by the charts, nothing of the caller's unfrozen (frozen objects freed since count out)
        assert 0 < gc.get_freeze_count() <= frozen if frozen else gc.get_freeze_count() == 0
        assert gc.isenabled() == (setting == "enabled")
        assert len(made) == 3 and len(alive_at_each) == 3
        if setting == "paused":
            assert alive_at_each == [0, 0, 0]  # each figure freed once written
        elif setting == "frozen":
            assert alive_at_each == [1, 2, 3]  # nothing collected: the caller's freeze is left alone
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        del keep
    base = sorted((tmp_path / setting).iterdir())
    assert [p.name for p in base] == ["gantt.png", "gantt.svg", "pipeline.png", "pipeline_time.png"]
