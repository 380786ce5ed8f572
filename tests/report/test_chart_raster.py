"""Charts of many boxes painted as a raster (``chart_base._box_raster``, past ``RASTER_MIN_BOXES`` boxes): the
pixels of hand-computed boxes, the pipeline chart's actions in their legend colours at their pixel columns, the
raster embedded as one image in SVG (the same bytes each time), and the pipeline chart's unit steps as array
sweeps, the steps of the loop and of the Jacobi rounds (``tests/oracle/unit_steps_rounds.py``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from schedsim.report import chart_base as B
from schedsim.report import gantt as G
from schedsim.report import pipeline_chart as P
from schedsim.sim.timeline import Span, Timeline
from tests.oracle.unit_steps_rounds import steps_by_rounds


def _rgb(c: str) -> list[int]:
    return [int(c[i:i + 2], 16) for i in (1, 3, 5)]


def test_paint_by_hand():
    # 6 columns of width 1, 3 rows of height 1 (row i between y = i and i + 1); a strip on [0.5, 2.5]: its edges
    # rounded to pixel edges 1 and 3, rows 1 and 2
    s = B._Strip(0.5, 2.0)
    s.colours["#FF0000"] = ([np.array([0.2, 1.0, 3.0])], [np.array([0.4, 2.6, 3.5])])  # 0.2 of 0; 1; 0.6 of 2;
    s.colours["#0000FF"] = ([np.array([2.6, 3.5, 5.0])], [np.array([3.0, 4.0, 5.0])])  # 0.4 of 2; 3 half and half
    img = B._paint([s], np.arange(7.0), np.arange(4.0))  # (and an empty blue box at 5)
    assert img.shape == (3, 6, 4)
    red, blue = [255, 0, 0], [0, 0, 255]
    # a column any box touches is opaque, in the colour covering most of it (column 0: red's 0.2 alone; column 2:
    # red's 0.6 over blue's 0.4), ties to the colour added last (column 3: blue)
    for row in (1, 2):
        assert img[row, :, :3].tolist()[:4] == [red, red, red, blue]
        assert img[row, :, 3].tolist() == [255, 255, 255, 255, 0, 0]
    assert img[0].tolist() == [[0, 0, 0, 0]] * 6
    # a later strip on [1.0, 1.4] (row 1; under a pixel high, still one row), grey on columns 0 and 4: over the red
    # at 0, alone at 4
    w = B._Strip(1.0, 0.4)
    w.colours["#808080"] = ([np.array([0.0, 4.0])], [np.array([1.0, 5.0])])
    img = B._paint([s, w], np.arange(7.0), np.arange(4.0))
    grey = [128, 128, 128, 255]
    assert img[1, 0].tolist() == img[1, 4].tolist() == grey
    assert img[2, 0].tolist() == red + [255] and img[1, 1].tolist() == red + [255]
    # y_edges descending (3, 2, 1, 0): the strip's edges at pixel positions 2.5 and 0.5, rounded to 3 and 1
    img = B._paint([s], np.arange(7.0), np.arange(3.0, -1.0, -1.0))
    assert img[1, 0].tolist() == img[2, 0].tolist() == red + [255] and img[0, 0, 3] == 0
    s.y0 = 0.6  # [0.6, 2.6]: positions 2.4 and 0.4, rows 0 and 1
    img = B._paint([s], np.arange(7.0), np.arange(3.0, -1.0, -1.0))
    assert img[0, 0].tolist() == img[1, 0].tolist() == red + [255] and img[2, 0, 3] == 0


def _pipeline_2x2(ms: list[tuple[int, str, int, int, float]]) -> Timeline:
    """Pipeline actions (rank, F/B, stage, microbatch, start ms) of 0.5 ms each, and an untagged op on rank 0 to
    1,000 ms, so that the time chart's ~1 px per ms makes each action a sub-pixel box."""
    spans = [Span(f"{op}{st}.{mb}@r{r}", f"{op}{st}.{mb}", r, "s0", "matmul", "compute", t / 1e3, (t + 0.5) / 1e3,
                  tags={"pp_op": op, "stage": st, "mb": mb}) for r, op, st, mb, t in ms]
    spans.append(Span("tail@r0", "tail", 0, "s1", "matmul", "compute", 0.9, 1.0))
    return Timeline("pp", "predict", 2, spans=spans)


ACTIONS = [(0, "F", 0, 0, 5.0), (0, "F", 0, 1, 20.0), (1, "F", 1, 0, 100.0), (1, "B", 1, 0, 150.0),
           (0, "B", 0, 0, 200.0), (1, "F", 1, 1, 300.0), (1, "B", 1, 1, 350.0), (0, "B", 0, 1, 400.0)]


def test_pipeline_raster_paints_each_action_in_its_colour_at_its_pixel_column(monkeypatch):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(P, "RASTER_MIN_BOXES", 0)
    fig = P.draw_pipeline(_pipeline_2x2(ACTIONS), "t", mode="time")
    ax = fig.axes[0]
    assert not ax.collections  # every box in the raster
    (raster,) = [a for a in ax.get_children() if hasattr(a, "strips")]
    assert len(raster.strips) == 2  # one strip per lane
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    px = np.asarray(canvas.buffer_rgba())
    height = px.shape[0]

    def pixel(x_ms: float, lane: float) -> list[int]:
        x, y = ax.transData.transform((x_ms, lane))
        return px[height - 1 - int(np.floor(y)), int(np.floor(x)), :3].tolist()

    for r, op, _st, _mb, t in ACTIONS:
        assert pixel(t + 0.25, r) == _rgb(B.KIND_COLORS[op]), (r, op, t)
    white = [255, 255, 255]
    assert pixel(50.0, 0) == pixel(250.0, 1) == pixel(600.0, 0) == white  # no action there
    assert pixel(5.25, 0.5) == white  # between the lanes (each 0.8 high)


def test_raster_is_one_image_in_svg(tmp_path, monkeypatch):
    monkeypatch.setattr(G, "RASTER_MIN_BOXES", 0)
    spans = [Span(f"mm{i}@r{r}", f"mm{i}", r, "s0", "matmul", "compute", 2e-3 * i, 2e-3 * i + 1e-6)
             for r in range(3) for i in range(40)]
    tl = Timeline("t", "predict", 3, spans=spans)
    png, svg = G.write_gantt(tmp_path / "g", [("predicted", tl)])
    text = svg.read_text()
    assert len(re.findall(r"<image ", text)) == 1
    assert not re.findall(r'<g id="boxes_', text)
    again = G.write_gantt(tmp_path / "h", [("predicted", tl)])  # the same bytes each time
    assert [p.read_bytes() for p in again] == [png.read_bytes(), svg.read_bytes()]


@pytest.mark.parametrize("schedule", ["interleaved_1f1b", "1f1b", "zb_h1", "dualpipev"])
def test_unit_steps_by_array_rounds_are_the_loops(schedule):
    from schedsim.api import load, predict
    from tests.conftest import ROOT

    tl = predict(load(ROOT / "schedules" / "pipeline_schedules.yaml", schedule=schedule, m=8), "h200").timeline
    acts = P._pipeline_actions(tl)
    got = P._steps_by_arrays(acts.rank, acts.ops, acts.op, acts.stage, acts.mb, acts.start_s)
    assert got is not None
    want = P._steps_by_loop(acts.spans())
    assert [want[s.id] for s in acts.spans()] == list(zip(got[0].tolist(), got[1].tolist(), strict=True))
    old = steps_by_rounds(acts.rank, acts.ops, acts.op, acts.stage, acts.mb, acts.start_s)  # the Jacobi rounds
    assert old is not None and (old[0] == got[0]).all() and (old[1] == got[1]).all()


def test_unit_steps_sweeps_are_the_rounds_on_shuffled_orders():
    # 4 ranks × 4 microbatches of F/B (stage = rank), each rank's Fs and Bs in microbatch order, merged at random
    # (each B after its F): where the Jacobi rounds (the oracle) settle, the sweeps give the same steps; where the
    # ranks' orders wait on each other in a cycle, both give None
    rng = np.random.default_rng(3)
    ops = ["F", "B"]
    settled = cycles = 0
    for _ in range(300):
        rows = []
        for r in range(4):
            f = b = 0
            while b < 4:
                if f < 4 and (f == b or rng.random() < 0.5):
                    rows.append((r, 0, r, f))
                    f += 1
                else:
                    rows.append((r, 1, r, b))
                    b += 1
        cols = (np.array([r for r, *_ in rows]), ops, np.array([o for _r, o, _s, _m in rows]),
                np.array([s for *_x, s, _m in rows]), np.array([m for *_x, m in rows]),
                np.arange(len(rows), dtype=float))
        got, want = P._steps_by_arrays(*cols), steps_by_rounds(*cols)
        assert (got is None) == (want is None)
        if want is not None:
            settled += 1
            assert (got[0] == want[0]).all() and (got[1] == want[1]).all()
        else:
            cycles += 1
    assert settled >= 5 and cycles >= 100  # both kinds drawn (10 and 290)


def test_unit_steps_by_array_rounds_leave_unexplained_orders_to_the_loop():
    def cols(rows: list[tuple[int, str, int, int]]) -> tuple:
        ops = ["F", "B"]
        return (np.array([r for r, *_ in rows]), ops, np.array([ops.index(o) for _r, o, _s, _m in rows]),
                np.array([s for *_x, s, _m in rows]), np.array([m for *_x, m in rows]),
                np.arange(len(rows), dtype=float))

    ok = [(0, "F", 0, 0), (1, "F", 1, 0), (1, "B", 1, 0), (0, "B", 0, 0)]
    a, b = P._steps_by_arrays(*cols(ok))
    assert a.tolist() == [0, 1, 2, 4] and b.tolist() == [1, 2, 4, 6]
    # rank 0 runs B0.0 before F0.0 (its own dependency): a cycle, no rounds settle it
    assert P._steps_by_arrays(*cols([(0, "B", 0, 0), (0, "F", 0, 0), (1, "F", 1, 0), (1, "B", 1, 0)])) is None
    # F1.0 without F0.0 (rank 0 not shown): a dependency that is not there
    assert P._steps_by_arrays(*cols([(1, "F", 1, 0), (1, "B", 1, 0)])) is None


def test_pipeline_steps_of_an_unexplained_order_come_from_the_loop():
    # rank 0 runs B0.0 before F0.0: no rounds settle it, and the chart places the actions as the loop does
    odd = [(0, "B", 0, 0, 5.0), (0, "F", 0, 0, 20.0), (1, "F", 1, 0, 100.0), (1, "B", 1, 0, 150.0)]
    tl = _pipeline_2x2(odd)
    lanes = P.pipeline_lanes(tl)
    acts = lanes.actions
    assert P._steps_by_arrays(acts.rank, acts.ops, acts.op, acts.stage, acts.mb, acts.start_s) is None
    steps = P._steps_by_loop(lanes.view.spans)
    assert steps == {"B0.0@r0": (0, 2), "F0.0@r0": (2, 3), "F1.0@r1": (3, 4), "B1.0@r1": (4, 6)}
    fig = P.draw_pipeline(tl, "t", mode="steps", lanes=lanes)
    assert fig.axes[0].get_xlabel().endswith("; 6 steps")


# (rank, action, stage, microbatch, start ms, chunk): interleaved, 2 ranks × 2 chunks (stages 2 and 3 are chunk 1);
# rank 0 runs F chunk 0, F chunk 1, then B chunk 1 before B chunk 0 (backward runs the stages in reverse), so the
# pairs' first uses (B chunk 1 before B) are not in the legend's order
CHUNKED = [(0, "F", 0, 0, 5.0, 0), (0, "F", 2, 0, 20.0, 1), (1, "F", 1, 0, 100.0, 0), (1, "F", 3, 0, 150.0, 1),
           (1, "B", 3, 0, 200.0, 1), (0, "B", 2, 0, 250.0, 1), (1, "B", 1, 0, 300.0, 0), (0, "B", 0, 0, 350.0, 0)]


def test_pipeline_styles_per_action_and_chunk(monkeypatch):
    """Each (action, chunk) pair gets its own legend entry (by action F, B, I, W, then label, whatever order the
    boxes use them in) and its boxes its colour: the action's for chunk 0, lightened by 0.22 per chunk after it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(P, "RASTER_MIN_BOXES", 0)
    spans = [Span(f"{op}{st}.{mb}@r{r}", f"{op}{st}.{mb}", r, "s0", "matmul", "compute", t / 1e3, (t + 0.5) / 1e3,
                  tags={"pp_op": op, "stage": st, "mb": mb, "chunk": ch}) for r, op, st, mb, t, ch in CHUNKED]
    spans.append(Span("tail@r0", "tail", 0, "s1", "matmul", "compute", 0.9, 1.0))
    fig = P.draw_pipeline(Timeline("pp", "predict", 2, spans=spans), "t", mode="time")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [x for x in labels if x[0] in "FB"] == ["F", "F (chunk 1)", "B", "B (chunk 1)"]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    px = np.asarray(canvas.buffer_rgba())
    for r, op, _st, _mb, t, ch in CHUNKED:
        x, y = ax.transData.transform((t + 0.25, r))
        want = B.KIND_COLORS[op] if ch == 0 else P._lighten(B.KIND_COLORS[op], 0.22 * ch)
        assert px[px.shape[0] - 1 - int(np.floor(y)), int(np.floor(x)), :3].tolist() == _rgb(want), (r, op, t)


def test_counts_are_searchsorted_of_the_sorted_values():
    # fewer values than edges (placed among the edges) and more (searched): the same integers as searchsorted,
    # ties on the edges included (halves on a grid of halves)
    rng = np.random.default_rng(5)
    for _ in range(500):
        vals = rng.integers(0, 20, rng.integers(0, 60)) / 2
        edges = np.sort(rng.integers(0, 20, rng.integers(1, 60)) / 2)
        for side in ("left", "right"):
            want = np.searchsorted(np.sort(vals), edges, side=side)
            assert (B._counts(vals, edges, side) == want).all()
            assert (B._counts(np.sort(vals), edges, side, ordered=True) == want).all()


def _coverage_by_loop(starts, ends, edges):
    """Σ over the intervals of their overlap with each bin, one interval and bin at a time (the definition)."""
    return np.array([sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in zip(starts, ends, strict=True))
                     for lo, hi in zip(edges[:-1], edges[1:], strict=True)])


def test_coverage_of_ordered_and_shuffled_intervals():
    # intervals given in order (not sorted again, B._ascending) and the same shuffled (sorted first): the same bins,
    # as the loop over intervals and bins computes them; ties, zero widths and values on the edges included
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        cuts = np.sort(rng.integers(0, 64, 2 * n) / 4)
        starts, ends = cuts[0::2], cuts[1::2]  # disjoint, in order
        edges = np.sort(rng.integers(0, 64, int(rng.integers(2, 30))) / 4)
        want = _coverage_by_loop(starts, ends, edges)
        assert np.allclose(B._coverage(starts, ends, edges), want)
        p = rng.permutation(n)
        assert np.allclose(B._coverage(starts[p], ends[p], edges), want)
    assert B._ascending(np.array([0.0, 1.0, 1.0])) and not B._ascending(np.array([1.0, 0.0]))
    assert not B._ascending(np.array([0.0, np.nan, 2.0]))  # np.sort would move the NaN: sorted first


def test_dense_lane_is_one_image_and_sparse_lane_vector_bars(monkeypatch):
    """Past RASTER_MIN_BOXES ops, rank 0's 400 sub-pixel matmuls are painted into the axes' one raster artist (drawn as
    one image), and rank 1's three boxes of 100 ms (~90 px wide each) stay a PolyCollection of three rectangles."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(G, "RASTER_MIN_BOXES", 100)
    dense = [Span(f"mm{i}@r0", f"mm{i}", 0, "s0", "matmul", "compute", 1e-3 * i, 1e-3 * i + 2e-4) for i in range(400)]
    sparse = [Span(f"big{i}@r1", f"big{i}", 1, "s0", "matmul", "compute", 0.1 * i, 0.1 * i + 0.1) for i in range(3)]
    fig = G.draw_gantt([("predicted", Timeline("t", "predict", 2, spans=dense + sparse))])
    ax = fig.axes[0]
    rasters = [a for a in ax.get_children() if hasattr(a, "strips")]
    assert len(rasters) == 1
    (strip,) = rasters[0].strips.values()  # rank 0's lane (lane 0: rows -0.38 .. 0.38), its 400 boxes
    assert (strip.y0, strip.h) == (-0.38, 0.76)
    (xs,) = [np.concatenate(a) for a, _b in strip.colours.values()]
    assert len(xs) == 400
    (col,) = ax.collections  # rank 1's lane (lane 1: rows 0.62 .. 1.38)
    boxes = sorted((float(p.vertices[:, 0].min()), float(p.vertices[:, 0].max()), float(p.vertices[:, 1].min()))
                   for p in col.get_paths())
    assert boxes == [pytest.approx((100.0 * i, 100.0 * i + 100.0, 0.62)) for i in range(3)]
    images = []
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()  # the one draw() reuses (the same size)
    orig = renderer.draw_image
    renderer.draw_image = lambda gc, x, y, im, *a: (images.append(im.shape), orig(gc, x, y, im, *a))
    canvas.draw()
    bb = ax.bbox  # the whole raster: one image of the axes' pixels
    assert images == [(int(np.ceil(bb.y1)) - int(np.floor(bb.y0)), int(np.ceil(bb.x1)) - int(np.floor(bb.x0)), 4)]


def test_raster_occupancy_is_the_vector_bars_pixel_coverage():
    """The same boxes drawn as vector bars (a PolyCollection) and painted by the raster, on axes whose data units are
    its pixels (20 × 10 px, x 0..20, y 0..10), boxes [2.0, 2.3], [5.0, 6.0], [8.0, 10.5], [14.25, 14.75], [14.8, 15.0]
    on rows 2..8. Agg snaps a rectangle's edges to the nearest pixel edge: [2, 2] (gone), [5, 6], [8, 11], [14, 15],
    [15, 15] (gone), so the vector bars cover columns 5, 8, 9, 10 and 14 in full. The raster paints every column a
    box touches, opaque in its colour: those, and column 2, where the 0.3 px box stays visible."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x0 = np.array([2.0, 5.0, 8.0, 14.25, 14.8])
    w = np.array([0.3, 1.0, 2.5, 0.5, 0.2])
    covered, touched = [5, 8, 9, 10, 14], [2, 5, 8, 9, 10, 14]

    def drawn(raster: bool) -> np.ndarray:
        fig = Figure(figsize=(0.2, 0.1), dpi=100)
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.set_axis_off()
        ax.set_xlim(0, 20)
        ax.set_ylim(0, 10)
        if raster:
            B._box_raster(ax).add(x0, w, 2.0, 6.0, "#FF0000")
        else:
            B._bars(ax, x0, w, 2.0, 6.0, facecolors="#FF0000", edgecolor="none", linewidth=0.0)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[::-1]  # row 0 at the bottom, as y

    vec, ras = drawn(False), drawn(True)
    assert vec.shape == ras.shape == (10, 20, 4)
    assert [int(j) for j in np.flatnonzero((vec[5, :, :3] != 255).any(axis=1))] == covered
    assert (vec[5, covered, :3] == [255, 0, 0]).all()
    assert [int(j) for j in np.flatnonzero((ras[5, :, :3] != 255).any(axis=1))] == touched
    assert (ras[5, touched, :3] == [255, 0, 0]).all()  # opaque: a sub-pixel box shows as a whole pixel of its colour
    # the rows: 2..8 in both (the strip's edges on pixel edges)
    assert [int(i) for i in np.flatnonzero((ras[:, 5, :3] != 255).any(axis=1))] == list(range(2, 8))
    assert [int(i) for i in np.flatnonzero((vec[:, 5, :3] != 255).any(axis=1))] == list(range(2, 8))


def test_columns_hit_are_the_columns_any_colour_counts():
    # random groups of boxes of several colours (zero-width and reversed boxes among them, ends on the edges), on
    # edges with repeats: the columns hit are those where the per-colour counts of tests/oracle/boxes_in.py are > 0
    from tests.oracle.boxes_in import boxes_in

    rng = np.random.default_rng(11)
    for _ in range(200):
        edges = np.sort(rng.integers(0, 40, rng.integers(2, 30)) / 2)
        groups = []
        for _g in range(rng.integers(1, 4)):
            spans = []
            for _c in range(rng.integers(1, 4)):
                a = rng.integers(-4, 44, rng.integers(0, 12)) / 2
                spans.append((a, a + rng.integers(-1, 8, len(a)) / 2))
            groups.append(spans)
        got = B._columns_hit(groups, edges)
        assert got.shape == (len(groups), len(edges) - 1)
        for g, spans in enumerate(groups):
            want = np.stack([boxes_in(a, b, edges) > 0 for a, b in spans]).any(axis=0)
            assert (got[g] == want).all()


def test_columns_hit_of_groups_without_boxes_are_none():
    # a group of no colours (an empty lane) hits no column, beside others or alone; NaN boxes hit none, and a box
    # with an infinite end every column from its start
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    assert B._columns_hit([[], []], edges).tolist() == [[False] * 3] * 2
    assert B._columns_hit([], edges).shape == (0, 3)
    box = (np.array([1.5, np.nan, 0.5]), np.array([np.inf, 2.0, np.nan]))
    assert B._columns_hit([[], [box]], edges).tolist() == [[False] * 3, [False, True, True]]
