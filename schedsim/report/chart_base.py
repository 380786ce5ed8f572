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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schedsim.io import atomic_write_bytes
from schedsim.kinds import KINDS
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


def _title_pad(n_labels: int) -> float:
    """Points between the axes and the title, leaving one row per makespan label."""
    return 6 + 11 * n_labels


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
    before an edge e is Σ_{s < e} (e − s) − Σ_{t < e} (e − t) over the sorted starts s and ends t: two searchsorted
    and two cumulative sums, no loop over intervals (exact for intervals that do not overlap each other; overlaps
    count twice)."""
    import numpy as np

    st, en = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(st)]), np.concatenate([[0.0], np.cumsum(en)])
    ks = np.searchsorted(st, edges, side="right")
    ke = np.searchsorted(en, edges, side="right")
    return np.diff((edges * ks - cs[ks]) - (edges * ke - ce[ke]))


def _boxes_in(x0: Any, x1: Any, edges: Any) -> Any:
    """How many of the boxes [x0, x1] (of positive width) overlap each column [edges[j], edges[j + 1]] (``edges``
    ascending; len(edges) − 1 counts, int): those starting before its end less those ending at or before its
    start, by two searchsorted over the sorted starts and ends (exact: no sums of floats)."""
    import numpy as np

    keep = x1 > x0
    x0, x1 = np.sort(x0[keep]), np.sort(x1[keep])
    return np.searchsorted(x0, edges[1:], side="left") - np.searchsorted(x1, edges[:-1], side="right")


def _paint(strips: list[_Strip], x_edges: Any, y_edges: Any) -> Any:
    """The RGBA image (uint8, rows × columns × 4) of ``strips`` on a grid of pixels whose column edges are
    ``x_edges`` (data units, len columns + 1, ascending) and row edges ``y_edges`` (data units, len rows + 1: row i
    between ``y_edges[i]`` and ``y_edges[i + 1]``, in either direction).

    A pixel column that boxes of a strip overlap (:func:`_boxes_in`) is painted opaque, in the colour whose boxes
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
    for s in strips:
        if s.y0 + s.h <= ys[0] or s.y0 >= ys[-1] or not s.colours:
            continue
        pa, pb = sorted(np.interp([s.y0, s.y0 + s.h], ys, pos).tolist())
        r0 = min(max(int(np.floor(pa + 0.5)), 0), h - 1)
        r1 = min(max(int(np.floor(pb + 0.5)), r0 + 1), h)
        spans = [(np.concatenate(a), np.concatenate(b)) for a, b in s.colours.values()]
        hit: Any = np.stack([_boxes_in(a, b, x_edges) > 0 for a, b in spans]).any(axis=0)
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

            def add(self, x0: Any, w: Any, y0: float, h: float, colour: str, gid: str | None = None) -> None:
                import numpy as np

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
                if xe[0] > xe[-1]:  # an inverted x axis: paint left to right in data order, then flip
                    return _paint(list(self.strips.values()), xe[::-1], ye)[:, ::-1], x0, y0
                return _paint(list(self.strips.values()), xe, ye), x0, y0

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


def write_figure(fig: Any, path: str | Path, fmt: str = "png") -> Path:
    """Save a Figure atomically; returns the path. The same figure gives the same bytes: SVG and PDF get no save
    date and SVG fixed element ids (matplotlib draws them at random unless ``svg.hashsalt`` is set)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "schedsim"}):
        fig.savefig(buf, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else
                                        {"metadata": {"CreationDate": None}} if fmt == "pdf" else {}))
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


#: Output formats written as vector paths (the others are rasterized by Agg).
_VECTOR = ("svg", "pdf", "ps", "eps")
