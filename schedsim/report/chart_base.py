"""What every chart shares (matplotlib Agg; pyplot is never imported).

The colour of each op kind and pipeline action (:data:`KIND_COLORS`, the same in every chart), figure
size limits, the makespan labels above the axes (``gid`` :data:`MAKESPAN_GID`, so tests can read them
back) and their title padding, the legend right of the axes, which ranks keep their lanes
(:func:`choose_ranks`), boxes drawn as one collection per colour (merged into pixel runs past the axes'
width, compound paths in vector output) or, past :data:`RASTER_MIN_BOXES` boxes, painted into one raster per axes
(:func:`_box_raster`), and :func:`write_figure`, which saves a figure atomically.
"""

from __future__ import annotations

import functools
import io
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

from schedsim.io import atomic_write_bytes
from schedsim.kinds import KINDS
from schedsim.report.chart_png import png_bytes
from schedsim.sim.timeline import Span

__all__ = ["KIND_COLORS", "color_key", "MAKESPAN_GID", "choose_ranks", "write_figure"]

#: Fixed colour per op kind and pipeline action, shared by every chart (Tableau 20 hues: each key
#: gets its own hue so send/recv/W and B/all_reduce can never be confused).
KIND_COLORS = {
    "F": "#1F77B4",          # forward: blue
    "B": "#FF7F0E",          # full backward (I + W): orange
    "I": "#D62728",          # backward input: red
    "W": "#2CA02C",          # backward weight: green
    "matmul": "#4E79A7",
    "compute": "#B07AA1",
    "optimizer": "#8C6D31",
    "all_reduce": "#9467BD",
    "all_gather": "#BCBD22",
    "reduce_scatter": "#E377C2",
    "broadcast": "#7F7F7F",
    "reduce": "#C49C94",
    "all_to_all": "#AD494A",
    "scatter": "#DBDB8D",
    "gather": "#F7B6D2",
    "send": "#17BECF",
    "recv": "#8C564B",
    "memcpy": "#FFBB78",
}


_OTHER = "#AAAAAA"


EXPOSED = "#E00000"


#: colour of an op's wait segment: its stream had reached it (``stream_s``) but it had not got the GPU
#: (``start_s``) (docs/metrics.md, "Per-op spans")
WAIT = "#B0B0B0"


MAKESPAN_GID = "makespan"


_PHASES = ("F", "B", "I", "W")


_DPI = 110


_MAX_PX = 3900  # every chart stays under 4,000 px tall


def color_key(s: Span) -> str:
    """The legend key of a span: its pipeline action (F/B/I/W, optimizer) when tagged, else its kind."""
    t = s.tags
    if t:
        op = t.get("pp_op")
        if op in _PHASES:
            return str(op)
        if op == "optimizer":
            return "optimizer"
    return s.kind


def _color(key: str) -> str:
    """The colour of legend key ``key``; a kind without one takes its registry entry's colour group
    (:attr:`schedsim.kinds.KindInfo.chart`)."""
    got = KIND_COLORS.get(key)
    if got is None:
        info = KINDS.get(key)
        got = KIND_COLORS.get(info.chart, _OTHER) if info is not None else _OTHER
    return got


@functools.lru_cache(maxsize=256)
def _lighten(c: str, f: float = 0.45) -> str:
    r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{int(x + (255 - x) * f):02X}" for x in (r, g, b))


def _cut(text: str, n: int = 40) -> str:
    """A label cut to ``n`` characters with an ellipsis (a 1 MB stream name must not be measured by the font
    engine: its layout time grows with its length)."""
    return text if len(text) <= n else text[: n - 1] + "…"


def _fig(width_in: float, height_in: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, min(height_in, _MAX_PX / _DPI)), dpi=_DPI)


def _makespan_labels(ax: Any, items: list[tuple[str, float]], xmax: float) -> None:
    """Dashed line per makespan (ms) and its label in its own row above the axes, ending at the line."""
    from matplotlib.transforms import blended_transform_factory, offset_copy

    base = blended_transform_factory(ax.transData, ax.transAxes)
    for i, (text, ms) in enumerate(items):
        ax.axvline(ms, color="black", linestyle="--", linewidth=0.8)
        right = xmax <= 0 or ms / xmax >= 0.4
        tr = offset_copy(base, fig=ax.figure, x=0, y=3 + 11 * i, units="points")
        ax.text(ms, 1.0, text, transform=tr, fontsize=7, va="bottom", ha="right" if right else "left",
                gid=MAKESPAN_GID, clip_on=False)


def _lane_ticks(ax: Any, labels: list[str], fontsize: float) -> None:
    """One y tick per lane ``0 .. len(labels) - 1``, labelled ``labels`` (``fontsize`` points), on axes that have no
    y-axis label, drawn by one :func:`_lane_labels` artist instead of the y axis.

    The y axis keeps the lanes as its ticks (a ``FixedLocator`` of the lanes and a ``FixedFormatter`` of the labels, the
    label size in its tick parameters: ``ax.get_yticks()`` and ``ax.get_yticklabels()`` read them as before), but is
    not drawn: matplotlib would make a ``Tick`` per lane for its draw (two Texts and three Line2Ds each, ~0.5 ms) and
    measure every label's extent for the y-axis label's place. The artist draws what those ticks drew: each lane's
    tick mark and label, from one template ``Tick`` of the axis (its rcParams and tick parameters). Where that tick
    draws grid lines or marks or labels on the right (``axes.grid``, ``ytick.right``, ``ytick.labelright`` in a
    matplotlibrc), which the artist does not, the axis' own ticks label the lanes (``set_yticks``)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator

    tick = ax.yaxis.get_major_ticks(1)[0]  # the template (rcParams: a matplotlibrc may turn on what it does not draw)
    if tick.gridline.get_visible() or tick.tick2line.get_visible() or tick.label2.get_visible():
        ax.set_yticks(range(len(labels)))  # grid lines or right-hand ticks: the axis draws its ticks itself
        ax.set_yticklabels(labels, fontsize=fontsize)
        ax.yaxis.set_label_coords(0.0, 0.5)
        return
    ax.yaxis.set_major_locator(FixedLocator(range(len(labels))))
    if labels:  # the view widened to take every lane in, as ``set_yticks`` did (``Axis._set_tick_locations``)
        was = tuple(ax.yaxis.get_view_interval())
        for axis in ax.yaxis._get_shared_axis():
            axis.set_view_interval(0, len(labels) - 1)
        if tuple(ax.yaxis.get_view_interval()) != was:
            ax.callbacks.process("ylim_changed", ax)
    ax.yaxis.set_major_formatter(FixedFormatter(labels))
    ax.yaxis.set_tick_params(which="major", labelsize=fontsize)
    ax.yaxis.set_visible(False)
    ax.add_artist(_lane_labels(ax, labels))


_LaneLabels: Any = None


def _lane_labels(ax: Any, labels: list[str]) -> Any:
    """The :func:`_lane_ticks` artist of ``ax`` (the class is made on first use: matplotlib is imported lazily)."""
    global _LaneLabels
    if _LaneLabels is None:
        from matplotlib.artist import Artist, allow_rasterization

        class LaneLabels(Artist):
            """The y tick marks and labels of lanes ``0 .. len(labels) - 1``, drawn as the y axis draws its ticks (at
            the lanes inside the view limits, each mark then each label, by a template ``Tick`` of the axis moved to
            each lane: the same Line2D and Text draws at the same places), with the marks as one Line2D of all
            lanes' points (Agg and SVG place each point's marker as they place a one-point Line2D's)."""

            def __init__(self, axis: Any, labels: list[str]) -> None:
                super().__init__()
                self.axis, self.labels = axis, labels
                self.set_zorder(axis.get_zorder())  # the axes' axis zorder (``axes.axisbelow``)
                self.set_clip_on(False)  # drawn outside the axes: counted in their tight bounding box, as ticks are

            def _lanes(self) -> list[int]:
                import numpy as np

                lo, hi = sorted(self.axis.get_view_interval())
                return [i for i in range(len(self.labels)) if lo - 1e-9 <= i <= hi + 1e-9] if np.isfinite(lo) else []

            def _tick(self) -> Any:
                return self.axis.get_major_ticks(1)[0]

            @allow_rasterization
            def draw(self, renderer: Any) -> None:
                if not self.get_visible():
                    return
                lanes = self._lanes()
                if not lanes:
                    return
                tick = self._tick()
                renderer.open_group("lane ticks", self.get_gid())
                mark, label = tick.tick1line, tick.label1
                if tick.get_visible() and mark.get_visible():
                    mark.set_data([0.0] * len(lanes), lanes)
                    mark.draw(renderer)
                if tick.get_visible() and label.get_visible():
                    glyphs = _AggGlyphs.of(renderer)
                    if glyphs is not None and _plain_label(label):
                        _draw_label_glyphs(renderer, glyphs, label, [(i, self.labels[i]) for i in lanes])
                    else:
                        for i in lanes:
                            label.set_y(i)
                            label.set_text(self.labels[i])
                            label.draw(renderer)
                renderer.close_group("lane ticks")
                self.stale = False

            def get_window_extent(self, renderer: Any = None) -> Any:
                return _label_boxes(self._tick(), self.labels, self._lanes(), renderer)

        _LaneLabels = LaneLabels
    return _LaneLabels(ax.yaxis, labels)


def _label_boxes(tick: Any, labels: list[str], lanes: list[int], renderer: Any) -> Any:
    """The bounding box of the lane labels of ``lanes`` (the label of the template ``tick`` at each lane, with its text
    from ``labels``), as the y axis' ``get_tightbbox`` counted its ticks: the labels only, not the tick marks (which
    stick out above and below a label of a small font), none where the labels are hidden (``Bbox.null()``)."""
    from matplotlib.transforms import Bbox

    label = tick.label1
    if not (lanes and tick.get_visible() and label.get_visible()):
        return Bbox.null()
    boxes = []
    for i in lanes:
        label.set_y(i)
        label.set_text(labels[i])
        boxes.append(label.get_window_extent(renderer))
    return Bbox.union(boxes)


def _plain_label(label: Any) -> bool:
    """Whether the Text ``label`` draws as plain text at angle 0 (no path effects, TeX, box, wrapping; a font language
    that :class:`_AggGlyphs` takes): what :func:`_draw_label_glyphs` draws as ``Text.draw`` does."""
    me: Any = label
    lang = label.get_language() if hasattr(label, "get_language") else None
    return (not label.get_path_effects() and not label.get_usetex() and me._bbox_patch is None
            and label.get_rotation() == 0 and not label.get_wrap() and (lang is None or isinstance(lang, str)))


def _draw_label_glyphs(renderer: Any, glyphs: _AggGlyphs, label: Any, lanes: list[tuple[int, str]]) -> None:
    """The Text ``label`` (:func:`_plain_label`) at y = each lane of ``lanes`` ((lane, text)) with that text, drawn by
    ``glyphs`` (Agg): the calls ``Text.draw`` and the :func:`_agg_canvas` renderer's ``draw_text`` make for it, its
    layout's offset (``Text._get_layout``) added to the lane's anchor (the label's transform of (x, lane), all lanes
    in one call), one graphics context for all. A text that lays out as several lines or as math is drawn by
    ``Text.draw``."""
    import numpy as np
    from matplotlib import colors as mcolors

    me: Any = label  # matplotlib's private helpers (_get_layout, _set_gc_clip, ...) are not in its stubs
    x0 = float(label.convert_xunits(me._x))
    anchors = label.get_transform().transform(
        np.column_stack([np.full(len(lanes), x0), np.array([i for i, _t in lanes], dtype=float)])).tolist()
    _w, canvas_h = renderer.get_canvas_width_height()
    flip = renderer.flipy()
    feats = label.get_fontfeatures() if hasattr(label, "get_fontfeatures") else None
    feats = None if feats is None else tuple(feats)
    lang = label.get_language() if hasattr(label, "get_language") else None
    gc = renderer.new_gc()
    gc.set_foreground(mcolors.to_rgba(label.get_color()), isRGBA=True)
    gc.set_alpha(label.get_alpha())
    gc.set_url(me._url)
    gc.set_antialiased(me._antialiased)
    gc.set_snap(label.get_snap())
    me._set_gc_clip(gc)
    for (i, text), (px, py) in zip(lanes, anchors, strict=True):
        label.set_text(text)
        if label.get_text() == "" or not (np.isfinite(px) and np.isfinite(py)):
            continue
        info = me._get_layout(renderer)[1]
        line, ismath = me._preprocess_math(info[0][0]) if len(info) == 1 else ("", True)
        if ismath is not False:  # several lines, mathtext: as the axis drew it
            label.set_y(i)
            label.draw(renderer)
            continue
        dx, dy = info[0][2]
        y = dy + py
        glyphs.draw(gc, dx + px, canvas_h - y if flip else y, line, me._fontproperties, feats, lang)
    gc.restore()


def _title_pad(n_labels: int) -> float:
    """Points between the axes and the title, leaving one row per makespan label."""
    return 6 + 11 * n_labels


def _title(ax: Any, text: str, n_labels: int) -> None:
    """The chart's title ``text`` (9 pt), :func:`_title_pad` points above the axes' top edge. Its place is given
    (``y=1.0``, the axes' top: where matplotlib's automatic placement puts it when no x tick labels or x label are
    above the axes, as on every chart here). matplotlib otherwise places it at each draw from the bounding boxes of
    the axes' decorations (``Axes._update_title_position``), measuring every y tick label (``yaxis.get_tightbbox``)
    for an offset text that lane labels never have (~10 ms a draw of a lane chart's 30-50 labels, 2-vCPU VM)."""
    ax.set_title(text, fontsize=9, pad=_title_pad(n_labels), y=1.0)


def _legend(ax: Any, handles: list[Any]) -> None:
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0,
                  frameon=False)


def choose_ranks(ranks: list[int], lanes_of: dict[int, int], max_lanes: int,
                 prefer: list[int] | None = None) -> tuple[list[int], list[int]]:
    """Split ranks into (shown, folded): all when their lanes fit in ``max_lanes``, else rank min and
    max, then the ``prefer`` ranks (e.g. those on the critical path, in order) while they fit, then
    the first and last ranks (alternately) while they fit. Lanes of the "others" bands (2) are
    reserved when anything is folded. ``shown`` is in rank order."""
    if sum(lanes_of[r] for r in ranks) <= max_lanes:
        return list(ranks), []
    budget = max_lanes - 2
    taken: dict[int, None] = {}
    used = 0

    def take(r: int, force: bool = False) -> bool:
        nonlocal used
        if r in taken:
            return True
        if used + lanes_of[r] > budget and not force:
            return False
        taken[r] = None
        used += lanes_of[r]
        return True

    take(ranks[0], force=True)
    take(ranks[-1], force=True)
    rset = set(ranks)
    for r in prefer or []:
        if r in rset and not take(r):
            break
    lo, hi = 1, len(ranks) - 2
    take_head = True
    while lo <= hi:
        if not take(ranks[lo] if take_head else ranks[hi]):
            break
        if take_head:
            lo += 1
        else:
            hi -= 1
        take_head = not take_head
    shown = sorted(taken)
    return shown, [r for r in ranks if r not in taken]


def _bars(ax: Any, x0: Any, w: Any, y0: Any, h: float, **kw: Any) -> Any:
    """One PolyCollection of the boxes [x0, x0 + w] × [y0, y0 + h] (arrays of one length, or ``y0`` a number):
    what ``Axes.broken_barh`` draws, with the vertices built by numpy rather than a Python loop per box. The
    axes' data limits are not updated (matplotlib would measure every path of the collection): the charts set
    both axes' limits themselves."""
    import numpy as np

    x0 = np.asarray(x0, dtype=float)
    x1 = x0 + np.asarray(w, dtype=float)
    ya = np.broadcast_to(np.asarray(y0, dtype=float), x0.shape)
    yb = ya + h
    verts: Any = np.stack([np.stack([x0, ya], 1), np.stack([x0, yb], 1), np.stack([x1, yb], 1),
                           np.stack([x1, ya], 1)], 1)
    col = _boxes_class()(verts, **kw)
    ax.add_collection(col, autolim=False)
    return col


_Boxes: Any = None


def _boxes_class() -> Any:
    """The PolyCollection of :func:`_bars` (made on first use: matplotlib is imported lazily).

    Agg draws it as any PolyCollection. While its ``compound`` is set (:func:`_compound_boxes`, around a vector
    output), a collection that is not rasterized draws as one path of all its boxes, filled and stroked once:
    the SVG backend writes a collection of distinct boxes as one ``<path>`` element per box, each with its own
    style lookup (~0.2 ms a box; a PP8×DP128 Gantt's 2,794 boxes were 0.58 of its SVG's 0.86 s, 2-vCPU VM).
    The boxes of one collection share face, edge and width and do not overlap (one lane and
    colour), so the figure is the same."""
    global _Boxes
    if _Boxes is None:
        from matplotlib.artist import allow_rasterization
        from matplotlib.collections import PolyCollection
        from matplotlib.patches import PathPatch
        from matplotlib.path import Path

        class Boxes(PolyCollection):
            compound = False

            @allow_rasterization
            def draw(self, renderer: Any) -> None:
                if not self.compound or self.get_rasterized() or not self.get_visible():
                    super().draw(renderer)
                    return
                me: Any = self
                edge = self.get_edgecolor()
                patch = PathPatch(Path.make_compound_path(*self.get_paths()), facecolor=self.get_facecolor()[0],
                                  edgecolor=edge[0] if len(edge) else "none", linewidth=me.get_linewidths()[0],
                                  antialiased=bool(me._antialiaseds[0]), transform=self.get_transform(),
                                  joinstyle=self.get_joinstyle() or "round")  # a collection's default join
                patch.set_figure(self.figure)
                patch.set_clip_box(self.get_clip_box())
                patch.set_clip_path(self.get_clip_path())
                renderer.open_group("boxes", self.get_gid())
                patch.draw(renderer)
                renderer.close_group("boxes")
                self.stale = False

        _Boxes = Boxes
    return _Boxes


@contextmanager
def _compound_boxes(fig: Any) -> Iterator[None]:
    """While open, the figure's :func:`_bars` collections draw as one path each (see :func:`_boxes_class`)."""
    cols = [c for ax in fig.axes for c in ax.collections if _Boxes is not None and isinstance(c, _Boxes)]
    for c in cols:
        c.compound = True
    try:
        yield
    finally:
        for c in cols:
            c.compound = False


#: A chart of more boxes than this paints its boxes without edge lines (those under 4 px wide, the waits and the
#: exposed-communication bands) into one RGBA raster per axes (:func:`_box_raster`) instead of a PolyCollection
#: per lane and colour: with thousands of sub-pixel boxes per lane, Agg's path rendering of the collections (and
#: the PNG/SVG writers' work on them) was most of a chart's time (pp=32 m=512 v=4: 131,072 boxes per pipeline
#: chart, 456,704 ops in the Gantt). Charts of fewer boxes keep their collections (vector boxes in SVG).
RASTER_MIN_BOXES = 10_000


class _Strip:
    """Boxes of one lane of a raster: the rows [y0, y0 + h] (data units) and per colour the boxes' x spans."""

    def __init__(self, y0: float, h: float) -> None:
        self.y0, self.h = y0, h
        self.colours: dict[str, tuple[list[Any], list[Any]]] = {}


def _coverage(starts: Any, ends: Any, edges: Any) -> Any:
    """Σ over the intervals [starts, ends) of their overlap with each bin [edges[j], edges[j + 1]): len(edges) − 1
    values, in the units of the edges (numpy; ``edges`` ascending, the intervals in any order). The busy time
    before an edge e is Σ_{s < e} (e − s) − Σ_{t < e} (e − t) over the sorted starts s and ends t: two counts
    (:func:`_counts`) and two cumulative sums, no loop over intervals (exact for intervals that do not overlap each
    other; overlaps count twice). Intervals given in order (a lane's boxes, as the charts add them) are not sorted
    again: :func:`_ascending` tells, a pass of compares where a sort of sorted floats took ~10× as long."""
    import numpy as np

    st = starts if _ascending(starts) else np.sort(starts)
    en = ends if _ascending(ends) else np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(st)]), np.concatenate([[0.0], np.cumsum(en)])
    ks = _counts(st, edges, "right", True)
    ke = _counts(en, edges, "right", True)
    return np.diff((edges * ks - cs[ks]) - (edges * ke - ce[ke]))


def _ascending(a: Any) -> bool:
    """Whether the 1-D float array ``a`` is non-decreasing, so that ``np.sort(a)`` would equal it (False where it holds
    a NaN, which ``np.sort`` moves to the end)."""
    return bool((a[1:] >= a[:-1]).all())


def _counts(vals: Any, edges: Any, side: Literal["left", "right"], ordered: bool = False) -> Any:
    """``np.searchsorted(np.sort(vals), edges, side)``: per edge (``edges`` ascending) how many values are at or
    below it (``side`` "right") or below it ("left"), int. Where the values are fewer than the edges (a lane's
    boxes of one colour against a chart's ~3,000 pixel columns), each value is placed among the edges instead (a
    search per value, not per edge) and the counts are the running sum of those places (no sort of the values);
    the same integers either way. ``ordered``: the values are sorted already."""
    import numpy as np

    if len(vals) >= len(edges):
        return np.searchsorted(vals if ordered else np.sort(vals), edges, side=side)
    at = np.searchsorted(edges, vals, side="left" if side == "right" else "right")  # the first edge it counts for
    return np.cumsum(np.bincount(at, minlength=len(edges) + 1)[:len(edges)])


def _columns_hit(spans_of: list[list[tuple[Any, Any]]], x_edges: Any) -> Any:
    """Per group of boxes (``spans_of[g]``: a list of (x0, x1) arrays), which columns [edges[j], edges[j + 1]] any of
    its boxes of positive width overlaps (``x_edges`` non-decreasing): bool, groups × (len(x_edges) − 1). A box
    overlaps the columns j with x0 < edges[j + 1] and x1 > edges[j], a run from ``searchsorted(edges[1:], x0,
    "right")`` to ``searchsorted(edges[:-1], x1, "left")`` (exclusive), marked as +1 and −1 in a row per group and
    summed along it: two searches over all groups' boxes at once, integers only. Before, a search pair per group and
    colour (``tests/oracle/boxes_in.py``, the same booleans)."""
    import numpy as np

    n, w = len(spans_of), len(x_edges) - 1
    parts = [ab for spans in spans_of for ab in spans]
    if not parts:  # no groups, or groups without boxes (a lane with no colour)
        return np.zeros((n, w), bool)
    x0 = np.concatenate([a for a, _b in parts])
    x1 = np.concatenate([b for _a, b in parts])
    group = np.repeat(np.arange(n), [sum(len(a) for a, _b in spans) for spans in spans_of])
    lo = np.searchsorted(x_edges[1:], x0, "right")
    hi = np.searchsorted(x_edges[:-1], x1, "left")
    m = (x1 > x0) & (hi > lo)
    at = group[m] * (w + 1)
    runs = np.bincount(at + lo[m], minlength=n * (w + 1)) - np.bincount(at + hi[m], minlength=n * (w + 1))
    return np.cumsum(runs.reshape(n, w + 1), axis=1)[:, :w] > 0


def _paint(strips: list[_Strip], x_edges: Any, y_edges: Any) -> Any:
    """The RGBA image (uint8, rows × columns × 4) of ``strips`` on a grid of pixels whose column edges are
    ``x_edges`` (data units, len columns + 1, ascending) and row edges ``y_edges`` (data units, len rows + 1: row i
    between ``y_edges[i]`` and ``y_edges[i + 1]``, in either direction).

    A pixel column that boxes of a strip overlap (:func:`_columns_hit`) is painted opaque, in the colour whose boxes
    cover most of it (:func:`_coverage`; ties to the colour added last), so every pixel is a colour of the legend
    and a box narrower than a pixel still shows as one (as the collections' pixel runs, :func:`_pixel_runs`, drew
    them), in the rows between the strip's edges rounded to the nearest pixel edge (at least one row: Agg snaps a
    rectilinear box so). Later strips paint over earlier ones; the rest stays transparent."""
    import numpy as np
    from matplotlib.colors import to_rgb

    w, h = len(x_edges) - 1, len(y_edges) - 1
    out = np.zeros((h, w, 4), np.uint8)
    words = out.view(np.uint32)[..., 0]  # each pixel's four bytes as one word
    up = y_edges[0] <= y_edges[-1]
    ys, pos = (y_edges, np.arange(h + 1.0)) if up else (y_edges[::-1], np.arange(h, -1.0, -1.0))
    shown = [s for s in strips if not (s.y0 + s.h <= ys[0] or s.y0 >= ys[-1] or not s.colours)]
    spans_of = [[(np.concatenate(a), np.concatenate(b)) for a, b in s.colours.values()] for s in shown]
    hits = _columns_hit(spans_of, x_edges)
    for s, spans, hit in zip(shown, spans_of, hits, strict=True):
        pa, pb = sorted(np.interp([s.y0, s.y0 + s.h], ys, pos).tolist())
        r0 = min(max(int(np.floor(pa + 0.5)), 0), h - 1)
        r1 = min(max(int(np.floor(pb + 0.5)), r0 + 1), h)
        (ci,) = np.nonzero(hit)
        if not len(ci):
            continue
        c0, c1 = int(ci[0]), int(ci[-1]) + 1
        palette = np.array([to_rgb(c) for c in s.colours]) * 255
        # the colour covering most of each column (ties: the last added), opaque, a pixel a word
        cov = np.stack([_coverage(a, b, x_edges[c0:c1 + 1]) for a, b in spans])
        px = np.full((c1 - c0, 4), 255, np.uint8)
        px[:, :3] = np.rint(palette[len(palette) - 1 - np.argmax(cov[::-1], axis=0)])
        words[r0:r1, c0:c1] = np.where(hit[None, c0:c1], px.view(np.uint32)[:, 0][None, :], words[r0:r1, c0:c1])
    return out


_Raster: Any = None


def _box_raster(ax: Any) -> Any:
    """A box raster on ``ax`` (added to it, ``zorder`` 1 as a collection's, rasterized in vector outputs): its
    ``add(x0, w, y0, h, colour, gid=None)`` takes boxes [x0, x0 + w] × [y0, y0 + h] (arrays ``x0``, ``w``, numbers
    ``y0``, ``h``, in data units; a ``gid`` keeps them in its ``gids`` as (x0, x1), as a collection's gid names
    it); at draw time it paints them (:func:`_paint`) into an image of the axes' pixels, one
    image pixel per device pixel, at the axes' limits then. The class is made on first use (matplotlib is
    imported lazily)."""
    global _Raster
    if _Raster is None:
        from matplotlib.artist import Artist, allow_rasterization

        class BoxRaster(Artist):
            zorder = 1

            def __init__(self) -> None:
                super().__init__()
                self.strips: dict[tuple[float, float], _Strip] = {}
                self.gids: dict[str, tuple[Any, Any]] = {}
                self.painted: tuple[Any, Any] | None = None  # (pixel grid, image) of the last draw, kept ...
                self.keep = False  # ... while the figure is to be drawn again (write_figure's ``again``)

            def add(self, x0: Any, w: Any, y0: float, h: float, colour: str, gid: str | None = None) -> None:
                import numpy as np

                self.painted = None
                if gid is not None:  # the boxes of a named group, to read back as (x0, x1) (tests)
                    self.gids[gid] = (np.asarray(x0, dtype=float), np.asarray(x0, dtype=float) + w)

                s = self.strips.get((y0, h))
                if s is None:
                    s = self.strips[(y0, h)] = _Strip(y0, h)
                a, b = s.colours.setdefault(colour, ([], []))
                x0 = np.asarray(x0, dtype=float)
                a.append(x0)
                b.append(x0 + np.asarray(w, dtype=float))

            def image(self) -> tuple[Any, int, int]:
                """(the RGBA image, its bottom row first as Agg's ``draw_image`` takes it, and its left and bottom
                device pixel) for the axes' current place and limits."""
                import numpy as np

                me: Any = self
                ax = me.axes
                bb = ax.bbox
                x0, x1 = int(np.floor(bb.x0)), int(np.ceil(bb.x1))
                y0, y1 = int(np.floor(bb.y0)), int(np.ceil(bb.y1))
                inv = ax.transData.inverted()
                xe = inv.transform(np.stack([np.arange(x0, x1 + 1.0), np.full(x1 - x0 + 1, float(y0))], 1))[:, 0]
                ye = inv.transform(np.stack([np.full(y1 - y0 + 1, float(x0)), np.arange(y0, y1 + 1.0)], 1))[:, 1]
                grid = (xe.tobytes(), ye.tobytes())  # the same grid again (a PNG, then the SVG's raster): reused
                if self.painted is not None and self.painted[0] == grid:
                    return self.painted[1], x0, y0
                if xe[0] > xe[-1]:  # an inverted x axis: paint left to right in data order, then flip
                    img = _paint(list(self.strips.values()), xe[::-1], ye)[:, ::-1]
                else:
                    img = _paint(list(self.strips.values()), xe, ye)
                self.painted = (grid, img) if self.keep else None
                return img, x0, y0

            @allow_rasterization
            def draw(self, renderer: Any) -> None:
                if not self.get_visible() or not self.strips:
                    return
                me: Any = self
                img, x0, y0 = self.image()
                gc = renderer.new_gc()
                me._set_gc_clip(gc)
                gc.set_clip_rectangle(me.axes.bbox)
                renderer.draw_image(gc, x0, y0, img)
                gc.restore()
                self.stale = False

        _Raster = BoxRaster
    r = _Raster()
    r.set_rasterized(True)
    ax.add_artist(r)
    return r


def _pixel_runs(x0: Any, w: Any, px: float) -> tuple[Any, Any]:
    """Boxes of one lane and colour, ascending in ``x0``, with every gap narrower than ``px`` (one pixel, in
    data units) closed: the same pixels drawn solid instead of thousands of sub-pixel boxes. Returns (x0, w)."""
    import numpy as np

    x1 = np.maximum.accumulate(x0 + w)
    cut = np.flatnonzero(x0[1:] - x1[:-1] >= px) + 1
    first = np.concatenate([[0], cut])
    last = np.concatenate([cut - 1, [len(x0) - 1]])
    return x0[first], x1[last] - x0[first]


class _AggGlyphs:
    """Agg's ``draw_text`` at angle 0, each (string, font, features, language) laid out once and each glyph
    rasterised once per sub-pixel phase: the same calls as matplotlib 3.11's ``RendererAgg.draw_text`` (its
    ``_draw_text_glyphs_and_boxes``: FreeType places a glyph at a 26.6 fixed-point origin, so a glyph at the
    same fraction of a pixel is the same bitmap moved by whole pixels), hence the same pixels. Text layout
    with libraqm and per-glyph rendering cost ~1 ms per label on matplotlib 3.11 (2-vCPU VM): the
    ~500 microbatch numbers of a pipeline chart were most of its time, and the ~60 labels of each chart's axes
    (ticks, legend, title) ~0.1 s a PNG. Used only where matplotlib has those internals; otherwise :meth:`of`
    returns None and the labels go through ``renderer.draw_text``."""

    #: Each text's layout, shared by every renderer of the process (a pipeline's two charts have the same lane
    #: labels and legend): (text, font properties, features, language, dpi, :attr:`setting`) -> (size in points,
    #: per glyph its font, index and offset); emptied past :data:`TEXT_CACHE_MAX` entries.
    layouts: ClassVar[dict[tuple[Any, ...], tuple[float, list[tuple[Any, int, float, float]]]]] = {}
    #: Each text's (width, height, descent) in pixels as ``RendererAgg.get_text_width_height_descent`` gives it,
    #: shared likewise: (text, font properties, dpi, :attr:`setting`) -> the three.
    metrics: ClassVar[dict[tuple[Any, ...], tuple[float, float, float]]] = {}
    #: Each font's line metrics as ``Text._get_layout`` reads them from its tables (:func:`_font_heights`), shared
    #: likewise: (font properties, dpi, :attr:`setting`) -> (ascent, descent, line gap) in pixels, or Nones.
    heights: ClassVar[dict[tuple[Any, ...], tuple[Any, Any, Any]]] = {}
    #: The ``font.*`` and ``text.*`` rcParams each renderer was made under, numbered: a FontProperties names a
    #: family ("sans-serif") that those settings resolve to a font file (``font.sans-serif``), and they set the
    #: kerning and hinting; the same properties under other settings are other glyphs. Never emptied (a number
    #: stays its settings'; a process sees few).
    settings: ClassVar[dict[tuple[Any, ...], int]] = {}
    #: Each glyph's bitmap, shared likewise (a pipeline's two charts draw their lane labels and legend at the same
    #: sub-pixel phases: the same left margin and lane rows): (font, size in points, dpi, :attr:`setting`, glyph
    #: index, x and y phase in 1/64 px, antialiased) -> (the bitmap, its left and top offsets from the pixel of the
    #: pen). Emptied past :data:`GLYPH_CACHE_MAX` entries.
    bitmaps: ClassVar[dict[tuple[Any, ...], tuple[Any, int, int]]] = {}

    def __init__(self, renderer: Any) -> None:
        from matplotlib.backends.backend_agg import get_hinting_flag
        from matplotlib.ft2font import RenderMode

        self.r = weakref.proxy(renderer)  # not a cycle: a renderer holds its glyphs (and the GC may be paused)
        self.flags = get_hinting_flag()
        #: (hinting flags, number of the font settings in :attr:`settings`, thread): what, beside the text, its font
        #: properties and the dpi, a cached layout or size depends on (a renderer draws a figure under one setting,
        #: in one thread). The thread's, as matplotlib keys its fonts on it (``font_manager._get_font``): a layout
        #: holds its fonts, whose size and transform :meth:`draw` sets before each glyph it renders.
        self.setting = (self.flags, self.settings.setdefault(_font_settings(), len(self.settings)),
                        threading.get_ident())
        self.modes = (RenderMode.MONO, RenderMode.NORMAL)

    @staticmethod
    def usable() -> bool:
        """Whether this matplotlib renders text glyph by glyph in Python (``FT2Font._layout``, ``_render_glyph``,
        ``_set_transform``, ``RendererAgg._draw_text_glyphs_and_boxes``: matplotlib 3.11), the calls this class
        makes."""
        try:
            from matplotlib.backends.backend_agg import RendererAgg
            from matplotlib.ft2font import FT2Font, RenderMode  # noqa: F401
        except ImportError:
            return False
        return all(hasattr(FT2Font, a) for a in ("_layout", "_render_glyph", "_set_transform")) and hasattr(
            RendererAgg, "_draw_text_glyphs_and_boxes")

    @classmethod
    def of(cls, renderer: Any) -> _AggGlyphs | None:
        """The fast path for ``renderer`` (the one of :func:`_agg_canvas`'s renderer, or a new one for matplotlib's
        own Agg renderer), or None when it is neither or matplotlib is not :meth:`usable`."""
        got = getattr(renderer, "glyphs", None)
        if isinstance(got, cls):
            return got
        from matplotlib.backends.backend_agg import RendererAgg

        return cls(renderer) if type(renderer) is RendererAgg and cls.usable() else None

    def draw(self, gc: Any, x: float, y: float, text: str, prop: Any, features: Any = None,
             language: Any = None) -> None:
        """``renderer.draw_text(gc, x, y, text, prop, 0.0)`` (``y`` downwards, as Agg takes it) of a Text whose
        font features and language are ``features`` (a tuple, or None) and ``language`` (None or a string)."""
        import numpy as np

        r = self.r
        lay = self.layouts.get((text, prop, features, language, r.dpi, self.setting))
        if lay is None:
            font = r._prepare_font(prop)
            items = font._layout(text, flags=self.flags, features=features, language=language)
            lay = _cached(self.layouts, (text, prop.copy(), features, language, r.dpi, self.setting),
                          (prop.get_size_in_points(), [(it.ft_object, it.glyph_index, it.x, it.y) for it in items]))
        size, items = lay
        aa = bool(gc.get_antialiased())
        height = int(r.height)
        bitmaps, dpi, setting = self.bitmaps, r.dpi, self.setting
        for font, gi, gx, gy in items:
            x26, y26 = round(0x40 * (x + gx)), round(0x40 * (r.height - y + gy))
            bkey = (font, size, dpi, setting, gi, x26 & 63, y26 & 63, aa)
            hit = bitmaps.get(bkey)
            if hit is None:
                font.set_size(size, dpi)
                font._set_transform(np.array([[0x10000, 0], [0, 0x10000]]), [x26, y26])
                bm = font._render_glyph(gi, self.flags, self.modes[aa])
                buf = np.array(bm.buffer)  # a copy: the font may reuse its buffer
                if not aa:
                    buf *= 0xff
                if len(bitmaps) >= GLYPH_CACHE_MAX:
                    bitmaps.clear()
                hit = bitmaps[bkey] = (buf, bm.left - (x26 >> 6), bm.top - (y26 >> 6))
            buf, left, top = hit
            r._renderer.draw_text_image(buf, (x26 >> 6) + left, height - ((y26 >> 6) + top) + buf.shape[0], 0, gc)


def _font_settings() -> tuple[Any, ...]:
    """matplotlib's ``font.*`` and ``text.*`` rcParams as a hashable tuple of (name, value), lists as tuples. Only
    those are read: reading ``backend`` (as ``rcParams.items()`` does) resolves the automatic backend, which imports
    pyplot (~0.4 s)."""
    import matplotlib

    rc = matplotlib.rcParams
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k in rc if k.startswith(("font.", "text."))
                 for v in (rc[k],))


# A forked child lays its text out again, with its own fonts: the layouts hold FT2Fonts, which read their font file
# through a descriptor the parent shares (its offset too), and matplotlib empties its own font cache in a forked
# child for that reason (``matplotlib.font_manager._get_font``, "FT2Font objects cannot be used across fork()s").
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_AggGlyphs.layouts.clear)
    os.register_at_fork(after_in_child=_AggGlyphs.bitmaps.clear)  # keyed by the parent's fonts

#: Entries of each of :class:`_AggGlyphs`' shared text caches past which it is emptied (a long session's charts).
TEXT_CACHE_MAX = 4096
#: Entries of :attr:`_AggGlyphs.bitmaps` past which it is emptied (a glyph bitmap of 7-9 pt text at 110 dpi is
#: ~100-200 bytes: a few MB at most).
GLYPH_CACHE_MAX = 16384


def _cached(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    """``cache[key] = value`` (the cache emptied first when full, :data:`TEXT_CACHE_MAX`); returns ``value``."""
    if len(cache) >= TEXT_CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


_Canvas: Any = None


def _agg_canvas() -> Any:
    """The Agg canvas :func:`write_figure` draws PNGs with (the class is made on first use: matplotlib is imported
    lazily): matplotlib's ``FigureCanvasAgg`` whose renderer draws plain text at angle 0 through :class:`_AggGlyphs`
    (the same pixels; mathtext, rotated text and other renderers' text as matplotlib draws them) and whose
    ``print_png`` encodes the drawn pixels with :func:`png_bytes` (the same pixels as matplotlib's PIL writer, in
    a third of its time). ``savefig``'s options (dpi, facecolor, bbox) apply as on matplotlib's canvas; a
    ``pil_kwargs`` hands the PNG to matplotlib's writer."""
    global _Canvas
    if _Canvas is None:
        from matplotlib import cbook
        from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

        class GlyphRenderer(RendererAgg):
            def __init__(self, width: Any, height: Any, dpi: Any) -> None:
                super().__init__(width, height, dpi)
                self.glyphs = _AggGlyphs(self)

            def draw_text(self, gc: Any, x: float, y: float, s: str, prop: Any, angle: float, ismath: Any = False,
                          mtext: Any = None) -> None:
                feats = getattr(mtext, "get_fontfeatures", lambda: None)() if mtext is not None else None
                lang = getattr(mtext, "get_language", lambda: None)() if mtext is not None else None
                if ismath or angle != 0 or not (lang is None or isinstance(lang, str)):
                    super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
                    return
                self.glyphs.draw(gc, x, y, s, prop, None if feats is None else tuple(feats), lang)

            def get_text_width_height_descent(self, s: str, prop: Any, ismath: Any) -> Any:
                if ismath is not False:  # mathtext, TeX
                    return super().get_text_width_height_descent(s, prop, ismath)
                got = _AggGlyphs.metrics.get((s, prop, self.dpi, self.glyphs.setting))
                if got is None:
                    got = _cached(_AggGlyphs.metrics, (s, prop.copy(), self.dpi, self.glyphs.setting),
                                  super().get_text_width_height_descent(s, prop, ismath))
                return got

            def _get_font_height_metrics(self, prop: Any) -> tuple[Any, Any, Any]:
                # matplotlib 3.11's ``Text._get_layout`` asks a renderer that has this for a font's line metrics
                # (ascent, descent, line gap) before it reads them from the font's tables itself: the same values
                # (:func:`_font_heights`), looked up once per font, size and dpi, not at each text's layout
                got = _AggGlyphs.heights.get((prop, self.dpi, self.glyphs.setting))
                if got is None:
                    got = _cached(_AggGlyphs.heights, (prop.copy(), self.dpi, self.glyphs.setting),
                                  _font_heights(prop, self.dpi))
                return got

        glyphs = _AggGlyphs.usable()  # else another matplotlib: its own text drawing, the PNG writer still ours

        class Canvas(FigureCanvasAgg):
            def get_renderer(self) -> Any:
                me: Any = self
                w, h = me.get_width_height(physical=True)
                key = w, h, me.figure.dpi
                if me._lastKey != key:
                    me.renderer = (GlyphRenderer if glyphs else RendererAgg)(w, h, me.figure.dpi)
                    me._lastKey = key
                return me.renderer

            def print_png(self, filename_or_obj: Any, *, metadata: dict[str, Any] | None = None,
                          pil_kwargs: dict[str, Any] | None = None, **_print_figure: Any) -> None:
                # _print_figure: dpi, facecolor, ... that savefig passes and matplotlib's print_png leaves (applied
                # to the figure before this is called)
                if pil_kwargs:
                    super().print_png(filename_or_obj, metadata=metadata, pil_kwargs=pil_kwargs)
                    return
                import numpy as np

                FigureCanvasAgg.draw(self)
                me: Any = self
                data = png_bytes(np.asarray(me.buffer_rgba()), me.figure.dpi, metadata)
                with cbook.open_file_cm(filename_or_obj, "wb") as fh:
                    fh.write(data)

        _Canvas = Canvas
    return _Canvas


def _font_heights(prop: Any, dpi: float) -> tuple[Any, Any, Any]:
    """(ascent, descent, line gap) in pixels of the font of ``prop`` at ``dpi``, as matplotlib 3.11's
    ``Text._get_layout`` reads them when the renderer does not give them: the first of the font's OS/2
    (``sTypoAscender``, ``sTypoDescender``, ``sTypoLineGap``) and hhea (``ascent``, ``descent``, ``lineGap``)
    tables it has, in font units scaled by size in points × dpi / 72 / ``unitsPerEm``, in the same operations;
    (None, None, None) when it has neither (``_get_layout`` then measures the text "lp")."""
    from matplotlib.font_manager import fontManager, get_font

    font: Any = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, linegap_key, ascent_key, descent_key in (
            ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"), ("hhea", "lineGap", "ascent", "descent")):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        fontsize = prop.get_size_in_points()
        units_per_em = font.get_sfnt_table("head")["unitsPerEm"]
        scale = 1 / units_per_em * fontsize * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[linegap_key] * scale
    return None, None, None


def write_figure(fig: Any, path: str | Path, fmt: str = "png", again: bool = False) -> Path:
    """Save a Figure atomically; returns the path. The same figure gives the same bytes: SVG and PDF get no save
    date and SVG fixed element ids (matplotlib draws them at random unless ``svg.hashsalt`` is set). A PNG is drawn
    by :func:`_agg_canvas` where the figure has matplotlib's base canvas (a ``Figure()``), set for the save only, as
    ``savefig`` sets matplotlib's own Agg canvas: its renderer's pixels are not kept with the figure (a figure is a
    reference cycle, and ``predict`` pauses the cyclic GC); nor are its box rasters' images (:func:`_box_raster`)
    unless ``again`` (the figure is saved again, in another format)."""
    import matplotlib
    from matplotlib.backend_bases import FigureCanvasBase

    base = fig.canvas if fmt == "png" and type(fig.canvas) is FigureCanvasBase else None
    if base is not None:
        _agg_canvas()(fig)
    # the axes' own artists (:func:`_box_raster` adds its raster there), not ``fig.findobj``: that walks each axis'
    # children, which makes every tick the axis has no Tick object for yet (the lane axes' ticks, :func:`_lane_ticks`)
    rasters = [a for ax in fig.axes for a in ax.get_children() if hasattr(a, "painted")]
    for a in rasters:
        a.keep = again
    buf = io.BytesIO()
    try:
        with matplotlib.rc_context({"svg.hashsalt": "schedsim"}):
            fig.savefig(buf, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else
                                            {"metadata": {"CreationDate": None}} if fmt == "pdf" else {}))
    finally:
        if base is not None:
            fig.set_canvas(base)
        if not again:
            for a in rasters:
                a.painted = None
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


#: Output formats written as vector paths (the others are rasterized by Agg).
_VECTOR = ("svg", "pdf", "ps", "eps")
