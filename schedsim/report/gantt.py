"""Charts of a timeline with matplotlib (Agg; pyplot is never imported).

* :func:`draw_gantt` — one lane per rank × stream, time in ms. A colour per op
  kind (:data:`KIND_COLORS`, the same in every chart), op names where they fit,
  the makespan as a dashed line, and exposed communication (comm time with no
  compute on that rank) as a red band under the comm lane it belongs to.
  Past ``max_lanes`` lanes, the ranks on the critical path, then the first and
  last ranks keep their lanes and all other ranks fold into two "others" bands: the share of those ranks busy on
  compute and on comm over time (a heat strip, 0 = white, 1 = black); a note under the axes names the ranks
  shown and folded (``gid`` :data:`LANES_GID`). Drawn from the timeline's columns: one PolyCollection per
  (lane, colour), a lane's boxes merged into pixel runs when it holds more boxes than the axes has pixels, and
  the boxes rasterized in SVG past :data:`RASTER_BOXES`, so a chart's cost and size follow its lanes, not its
  op count. On a cluster profile whose transfers crossed nodes, a thin last lane shows the use of the shared
  link that moved the most bytes (``timeline.meta["links"]``, its capacity the lane's height; ``gid``
  :data:`LINK_LANE_GID`).
* :func:`draw_pipeline` — the ZB / DualPipe papers' figure: one lane per
  pipeline rank, one box per F / B / I / W action with its microbatch number,
  in unit steps (F, I and W one step each, a full backward B two: the ZB
  paper's T_B = T_I + T_W with T_F = T_I = T_W, arXiv 2401.10241 §2) or in time.
* :func:`draw_memory` — bytes allocated per rank over time.

Every chart's makespan comes from the timeline it draws (``Timeline.makespan_s``)
and is written in a text artist whose ``gid`` is ``"makespan"``, so tests can
read it back. Labels above the axes stack in rows of their own, so they never
overlap each other or the legend (which sits right of the axes).
"""

from __future__ import annotations

import functools
import io
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.io import atomic_write_bytes
from schedsim.sim.metrics import merge_per_group
from schedsim.sim.timeline import Span, SpanColumns, Timeline

__all__ = ["KIND_COLORS", "color_key", "draw_gantt", "draw_pipeline", "draw_memory", "write_gantt",
           "write_pipeline", "write_memory_plot", "write_figure", "pipeline_view", "unit_steps", "MAKESPAN_GID",
           "LANES_GID", "LINK_LANE_GID", "rank_ranges", "PipelineLanes", "pipeline_lanes"]

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
#: ``gid`` prefix of a rank's exposed-communication bands (``boxes_exposed_comm_r<rank>_<n>``, an SVG group id: an
#: XML name, unique): their union per rank is its ``RankMetrics.exposed_comm_s`` (docs/metrics.md;
#: ``tests/core/test_metrics_agree.py`` checks it).
EXPOSED_GID = "boxes_exposed_comm_r"
#: gid of the Gantt's note naming the ranks shown and folded (only when ranks are folded)
LANES_GID = "lanes-note"
#: gid of the Gantt's thin lane of the busiest shared link's use (cluster profiles, ``timeline.meta["links"]``)
LINK_LANE_GID = "link-use"
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
    return KIND_COLORS.get(key, _OTHER)


@functools.lru_cache(maxsize=256)
def _lighten(c: str, f: float = 0.45) -> str:
    r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
    return "#%02X%02X%02X" % tuple(int(x + (255 - x) * f) for x in (r, g, b))


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


def busy_share(spans: Any, n: int, edges: Any) -> Any:
    """Mean busy share of ``n`` ranks per bin: Σ overlap(span, bin) / (n · bin width).

    ``spans`` is a list of (start, end) pairs or a pair of numpy arrays (starts, ends), in seconds. Exact for
    intervals that do not overlap within a rank (each rank's merged intervals). ``edges`` is a sorted numpy
    array of bin edges (seconds); returns len(edges) − 1 values.
    """
    import numpy as np

    if isinstance(spans, tuple) and len(spans) == 2 and hasattr(spans[0], "dtype"):
        st, en = np.sort(spans[0]), np.sort(spans[1])
    else:
        st = np.sort(np.array([a for a, _ in spans], dtype=float))
        en = np.sort(np.array([b for _, b in spans], dtype=float))
    if len(st) == 0 or n <= 0:
        return np.zeros(len(edges) - 1)
    cs, ce = np.concatenate([[0.0], np.cumsum(st)]), np.concatenate([[0.0], np.cumsum(en)])
    ks = np.searchsorted(st, edges, side="right")
    ke = np.searchsorted(en, edges, side="right")
    integral = (edges * ks - cs[ks]) - (edges * ke - ce[ke])  # busy time before each edge
    return np.diff(integral) / (n * np.diff(edges))


def rank_ranges(ranks: list[int], limit: int = 120) -> str:
    """Sorted ranks as ranges ("0–1, 1016–1023"), cut with an ellipsis past ``limit`` characters.

    >>> rank_ranges([0, 1, 2, 5, 7, 8])
    '0–2, 5, 7–8'
    """
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}–{ranks[j]}")
        i = j + 1
    return _cut(", ".join(parts), limit)


def draw_gantt(timelines: list[tuple[str, Timeline]], title: str = "", max_labels: int = 400,
               min_label_frac: float = 0.035, max_lanes: int = 48, makespans: dict[str, float] | None = None):
    """Return a matplotlib Figure; several labelled timelines are stacked lane by lane.

    Parameters
    ----------
    timelines : list of (label, Timeline)
    title : str
    max_labels : int
        Op names are written inside boxes only when the timelines hold at most this many spans.
    min_label_frac : float
        ... and only in boxes at least this share of the makespan wide.
    max_lanes : int
        Lanes (rank × stream × timeline) kept; past it ranks fold into "others" bands (see module doc).
    makespans : dict label -> seconds, optional
        Makespan to label instead of ``Timeline.makespan_s`` (for derived views of a timeline).
    """
    from matplotlib.patches import Patch

    multi = len(timelines) > 1
    lay = _GanttLayout.of(timelines, max_lanes)
    lanes, folded, k = lay.lanes, lay.folded, len(timelines)
    busiest = _busiest_link(timelines[0][1])
    n = len(lanes) + (2 * k if folded else 0) + (busiest is not None)
    lane_in = 0.42 if n <= 24 else max(0.22, 0.42 * 24 / n)
    mk = [(lbl, (makespans or {}).get(lbl, tl.makespan_s)) for lbl, tl in timelines]
    xmax_s = max([m for _l, m in mk] + [1e-9])
    top_in = 0.35 + (_title_pad(len(mk)) + 12) / 72
    fig = _fig(12, lane_in * n + top_in + 0.6)
    ax = fig.add_subplot(111)
    ax_w_px = fig.get_figwidth() * _DPI * 0.7
    pen = _GanttPen(ax, lay, px_per_ms=ax_w_px / (xmax_s * 1e3 * 1.02), lane_px=ax_w_px,
                    label_ok=sum(len(tl) for _l, tl in timelines) <= max_labels, min_label_frac=min_label_frac)
    for lbl, tl in timelines:
        hidden = pen.draw(lbl, tl, (makespans or {}).get(lbl, tl.makespan_s) * 1e3)
        if folded:
            base = len(lanes) + 2 * [lb for lb, _ in timelines].index(lbl)
            _draw_folded(ax, hidden, len(folded), base, max(tl.makespan_s, 1e-12), int(max(50, min(1200, ax_w_px))))
    if busiest is not None:
        _draw_link_lane(ax, busiest, n - 1)
    if pen.boxes_drawn > RASTER_BOXES:
        for col in pen.collections:
            col.set_rasterized(True)
    yt = [f"r{r} {_cut(st)}" + (f" [{_cut(lbl)}]" if multi else "") for r, st, lbl in lanes]
    if folded:
        span_txt = f"{len(folded)} other ranks"
        for lbl, _tl in timelines:
            for resname in ("compute", "comm"):
                yt.append(f"{span_txt}: {resname} busy share" + (f" [{lbl}]" if multi else ""))
    if busiest is not None:
        yt.append(f"{_cut(busiest['name'])} use" + (f" [{_cut(timelines[0][0])}]" if multi else ""))
    ax.set_yticks(range(n))
    ax.set_yticklabels(yt, fontsize=7 if n <= 60 else 6)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, xmax_s * 1e3 * 1.02)
    ax.set_ylim(n - 0.5, -0.6)
    _makespan_labels(ax, [(f"{lbl + ' ' if multi else ''}makespan {m * 1e3:.3f} ms", m * 1e3) for lbl, m in mk],
                     xmax_s * 1e3 * 1.02)
    rank_of = {key: i for i, key in enumerate(KIND_COLORS)}
    handles = [Patch(facecolor=c, label=key) for key, c in
               sorted(pen.kinds_used.items(), key=lambda kv: (rank_of.get(kv[0].split(" ")[0], 99), kv[0]))]
    if pen.exposed_drawn:
        handles.append(Patch(facecolor=EXPOSED, label="exposed comm"))
    if pen.wait_drawn:
        handles.append(Patch(facecolor=WAIT, label="wait (stream reached, no SMs yet)"))
    if folded:
        handles.append(Patch(facecolor="#777777", label="others: busy share"))
    _legend(ax, handles)
    ax.set_title(_cut(title, 200), fontsize=9, pad=_title_pad(len(mk)))
    longest = max(len(t) for t in yt) if yt else 4
    h = fig.get_figheight()
    bottom_in = 0.5
    if folded:  # say which ranks the lanes are, and what the bands hold
        bottom_in += 0.3
        fig.text(0.01, 0.08 / h, _cut(f"ranks shown: {rank_ranges(lay.shown, 60)} of {lay.n_ranks:,} (critical-path "
                                      f"ranks first, then the first and last); the other {len(folded):,} ranks in the "
                                      "two bands: the share of them busy (white 0, black 1)", 200),
                 fontsize=7, va="bottom", ha="left", gid=LANES_GID)
    fig.subplots_adjust(left=min(0.4, (0.3 + 0.06 * longest) / 12), right=0.84, top=1 - top_in / h,
                        bottom=bottom_in / h)
    return fig


def _lane_table(c: SpanColumns) -> list[tuple[int, str, int, str]]:
    """(rank, stream, row of the lane's first span, that span's resource) per lane of the columns ``c``, in rank
    order, each rank's streams in order of first use (:meth:`Timeline.lanes`, without building the rows)."""
    import numpy as np

    if len(c) == 0:
        return []
    sv, sc = c.stream
    rv, rc = c.resource
    rmin = int(c.rank.min())
    key = (c.rank - rmin) * max(1, len(sv)) + sc
    uniq, first = np.unique(key, return_index=True)
    ranks = uniq // max(1, len(sv)) + rmin
    order = np.lexsort((first, ranks))
    return [(r, sv[sc[i]], i, rv[rc[i]]) for r, i in zip(ranks[order].tolist(), first[order].tolist(), strict=True)]


def _busiest_link(tl: Timeline) -> dict[str, Any] | None:
    """The shared link that moved the most bytes in ``tl.meta["links"]`` (:mod:`schedsim.network.share`), or
    None."""
    links = ((tl.meta or {}).get("links") or {}).get("links") or []
    return max(links, key=lambda ln: ln["bytes"]) if links else None


def _draw_link_lane(ax: Any, link: dict[str, Any], row: int) -> None:
    """A thin lane at ``row``: the link's use over time, a step curve filled up from the lane's foot (foot 0, top
    its capacity)."""
    steps = link["steps"]
    cap = float(link["capacity_Bps"]) or 1.0
    x = [t * 1e3 for t, _v in steps]
    u = [min(1.0, v / cap) for _t, v in steps]
    foot, height = row + 0.3, 0.6
    ax.fill_between(x, [foot - height * v for v in u], foot, step="post", color="#4c72b0", linewidth=0,
                    alpha=0.8, gid=LINK_LANE_GID)
    ax.axhline(foot - height, color="#bbbbbb", linewidth=0.4, linestyle=":")


class _GanttLayout:
    """The lanes of a Gantt chart: per rank its streams (past ``max_lanes`` the extra ones folded into one
    "+N more streams" lane; compute streams first, then comm, then copy), the ranks shown (those on the
    critical path preferred, :func:`choose_ranks`) and the ranks folded into busy-share bands, and one
    lane per (rank, stream, timeline) where that timeline has the stream. Built from the timelines' columns
    (one numpy pass per timeline; no per-op Python)."""

    def __init__(self) -> None:
        self.fold_st: dict[tuple[int, str], str] = {}
        self.lanes: list[tuple[int, str, str]] = []
        self.ypos: dict[tuple[int, str, str], int] = {}
        self.shown: list[int] = []
        self.folded: list[int] = []
        self.n_ranks = 0

    def lane_st(self, r: int, st: str) -> str:
        """The lane a stream is drawn in (its own, or its rank's folded lane)."""
        return self.fold_st.get((r, st), st) if self.fold_st else st

    @classmethod
    def of(cls, timelines: list[tuple[str, Timeline]], max_lanes: int) -> _GanttLayout:
        lay = cls()
        tables = [_lane_table(tl.columns) for _lbl, tl in timelines]
        streams_of: dict[int, list[str]] = {}
        for table in tables:
            for r, st, _i, _res in table:
                lst = streams_of.setdefault(r, [])
                if st not in lst:
                    lst.append(st)
        ranks = sorted(streams_of)
        lay.n_ranks = len(ranks)
        # a rank with more streams than fit keeps its first max_lanes - 3 and folds the rest into one lane
        for r in ranks:
            sts = streams_of[r]
            if len(sts) > max_lanes - 2:
                keep = max(1, max_lanes - 3)
                other = f"+{len(sts) - keep:,} more streams"
                for st in sts[keep:]:
                    lay.fold_st[(r, st)] = other
                streams_of[r] = sts[:keep] + [other]
        # each lane's resource is that of its first span (the first timeline's first); the folded lane last
        res_of: dict[tuple[int, str], str] = {}
        for table in tables:
            for r, st, _i, res in sorted(table, key=lambda x: x[2]):
                res_of.setdefault((r, lay.lane_st(r, st)), res)
        order = {"compute": 0, "comm": 1, "copy": 2}
        folded_lanes = set(lay.fold_st.values())
        for r in ranks:
            streams_of[r].sort(key=lambda st, r=r: (st in folded_lanes, order.get(res_of.get((r, st), ""), 3), st))
        # a lane only where that timeline has the stream
        has = {lbl: {(r, lay.lane_st(r, st)) for r, st, _i, _res in table}
               for (lbl, _tl), table in zip(timelines, tables, strict=True)}
        n_lanes = {r: sum((r, st) in has[lbl] for st in streams_of[r] for lbl, _ in timelines) for r in ranks}
        cp_ranks = [int(op.rsplit("@r", 1)[1]) for op in timelines[0][1].critical_path
                    if op.rsplit("@r", 1)[-1].isdigit()]
        lay.shown, lay.folded = choose_ranks(ranks, n_lanes, max_lanes, prefer=list(dict.fromkeys(cp_ranks)))
        lay.lanes = [(r, st, lbl) for r in lay.shown for st in streams_of[r] for lbl, _ in timelines
                     if (r, st) in has[lbl]]
        lay.ypos = {ln: i for i, ln in enumerate(lay.lanes)}
        return lay


def _bars(ax: Any, x0: Any, w: Any, y0: Any, h: float, **kw: Any) -> Any:
    """One PolyCollection of the boxes [x0, x0 + w] × [y0, y0 + h] (arrays of one length, or ``y0`` a number):
    what ``Axes.broken_barh`` draws, with the vertices built by numpy rather than a Python loop per box."""
    import numpy as np

    x0 = np.asarray(x0, dtype=float)
    x1 = x0 + np.asarray(w, dtype=float)
    ya = np.broadcast_to(np.asarray(y0, dtype=float), x0.shape)
    yb = ya + h
    verts: Any = np.stack([np.stack([x0, ya], 1), np.stack([x0, yb], 1), np.stack([x1, yb], 1),
                           np.stack([x1, ya], 1)], 1)
    col = _boxes_class()(verts, **kw)
    ax.add_collection(col)
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
                                  edgecolor=edge[0] if len(edge) else "none", linewidth=self.get_linewidths()[0],
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


def _pixel_runs(x0: Any, w: Any, px: float) -> tuple[Any, Any]:
    """Boxes of one lane and colour, ascending in ``x0``, with every gap narrower than ``px`` (one pixel, in
    data units) closed: the same pixels drawn solid instead of thousands of sub-pixel boxes. Returns (x0, w)."""
    import numpy as np

    x1 = np.maximum.accumulate(x0 + w)
    cut = np.flatnonzero(x0[1:] - x1[:-1] >= px) + 1
    first = np.concatenate([[0], cut])
    last = np.concatenate([cut - 1, [len(x0) - 1]])
    return x0[first], x1[last] - x0[first]


#: A Gantt chart of more boxes than this has them rasterized in vector outputs (SVG/PDF): one embedded image
#: instead of one <path> per box (~120 bytes each in SVG; 20,000 boxes ≈ 2.5 MB).
RASTER_BOXES = 20_000


class _GanttPen:
    """Draws the spans of each timeline into its lanes from the timeline's columns: boxes grouped by (lane,
    colour, edge) into one PolyCollection each (a lane with more boxes of one colour than the axes has
    pixels drawn as its pixel runs, :func:`_pixel_runs`), op labels in wide boxes, and exposed communication
    under comm lanes. The ranks folded into bands are returned as arrays, never as rows."""

    def __init__(self, ax: Any, lay: _GanttLayout, *, px_per_ms: float, lane_px: float, label_ok: bool,
                 min_label_frac: float) -> None:
        self.ax, self.lay = ax, lay
        self.px_per_ms, self.lane_px, self.label_ok, self.min_label_frac = px_per_ms, lane_px, label_ok, min_label_frac
        self.kinds_used: dict[str, str] = {}
        self.exposed_drawn = False
        self.wait_drawn = False
        self.boxes_drawn = 0
        self.collections: list[Any] = []

    def draw(self, lbl: str, tl: Timeline, ms: float) -> dict[str, tuple[Any, Any, Any]]:
        """Draw ``tl`` (makespan ``ms`` milliseconds, for the label rule); return the folded ranks' compute and
        comm spans as ``{"compute" | "comm": (rank, start_s, end_s)}`` arrays."""
        import numpy as np

        c = tl.columns
        rv, rc = c.resource
        on = np.isin(c.rank, np.asarray(self.lay.shown, dtype=c.rank.dtype))
        code = {name: i for i, name in enumerate(rv)}
        hidden = {}
        for resname in ("compute", "comm"):
            m = ~on & (rc == code.get(resname, -1))
            hidden[resname] = (c.rank[m], c.start_s[m], c.end_s[m])
        idx = np.flatnonzero(on)
        if len(idx):
            self._boxes(lbl, c, idx, ms)
            self._exposed(lbl, c, idx, code)
        return hidden

    def _boxes(self, lbl: str, c: SpanColumns, idx: Any, ms: float) -> None:
        import numpy as np

        sv, sc = c.stream
        kv, kc = c.kind
        rank = c.rank[idx]
        # lane (y) of each row: one dict look-up per distinct (rank, stream)
        lk, inv = np.unique(rank * max(1, len(sv)) + sc[idx], return_inverse=True)
        ns = max(1, len(sv))
        y_of = np.array([self.lay.ypos[(r, self.lay.lane_st(r, sv[k % ns]), lbl)]
                         for r, k in zip((lk // ns).tolist(), lk.tolist(), strict=True)])
        y = y_of[inv.reshape(-1)]
        # colour key: the pipeline action (F/B/I/W, optimizer) of tagged rows, else the kind
        # (the tags as categorical columns: a lane set of a 214k-op run never builds per-row tag dicts)
        ov, oc = c.tag_column("pp_op")
        op_key = [str(v) if v in _PHASES else "optimizer" if v == "optimizer" else None for v in ov] + [None]
        chv, chc = c.tag_column("chunk")
        op_code = oc[idx]
        phase = np.array([v in _PHASES for v in ov] + [False], bool)[op_code]
        chunk = phase & np.array([bool(v) for v in chv] + [False], bool)[chc[idx]]
        # one colour decision per distinct (action, kind, later chunk), taken in the order of the rows' first use
        # (the colours' and the legend's order); each row then takes its combination's colour
        combo = (op_code.astype(np.int64) % (len(ov) + 1) * max(1, len(kv)) + kc[idx]) * 2 + chunk
        _u, first, inv = np.unique(combo, return_index=True, return_inverse=True)
        colours: dict[str, int] = {}
        cid_of = np.empty(len(first), dtype=np.int64)
        for g in np.argsort(first, kind="stable").tolist():
            j = int(first[g])
            k = op_key[int(op_code[j])] or kv[int(kc[idx[j]])]
            col = _color(k)
            if chunk[j]:
                col = _lighten(col)
                k = f"{k} (later chunk)"
            self.kinds_used.setdefault(k, col)
            cid_of[g] = colours.setdefault(col, len(colours))
        cid = cid_of[inv.reshape(-1)]
        x0 = c.start_s[idx] * 1e3
        w = (c.end_s[idx] - c.start_s[idx]) * 1e3
        wide = w * self.px_per_ms >= 4
        self._waits(c, idx, y)
        # one collection per (lane, colour, chunk, edge), in order of first use (the draw order of before)
        gk = ((y * max(1, len(colours)) + cid) * 2 + chunk) * 2 + wide
        _u, first, ginv, counts = np.unique(gk, return_index=True, return_inverse=True, return_counts=True)
        perm = np.argsort(ginv.reshape(-1), kind="stable")
        ends = np.cumsum(counts)
        names = list(colours)
        px = 1.0 / max(self.px_per_ms, 1e-300)
        for g in np.argsort(first, kind="stable").tolist():
            rows = perm[ends[g] - counts[g]:ends[g]]
            j0 = int(rows[0])
            gx, gw = x0[rows], w[rows]
            is_wide = bool(wide[j0])
            if len(rows) > self.lane_px and not is_wide:  # more boxes than the lane has pixels
                o = np.argsort(gx, kind="stable")
                gx, gw = _pixel_runs(gx[o], gw[o], px)
            # tiny boxes get no edge line: a black edge would hide their colour
            col = _bars(self.ax, gx, gw, int(y[j0]) - 0.38, 0.76, facecolors=names[int(cid[j0])],
                        edgecolor="white" if is_wide else "none", linewidth=0.4 if is_wide else 0.0)
            self.boxes_drawn += len(gx)
            self.collections.append(col)
        if self.label_ok and ms > 0:
            mv, mc = c.tag_column("mb")
            for j in np.flatnonzero(w / ms > self.min_label_frac).tolist():
                i = int(idx[j])
                text = str(mv[mc[i]]) if mc[i] >= 0 else _cut(c.name[i])
                self.ax.text(x0[j] + w[j] / 2, int(y[j]), text, ha="center", va="center", fontsize=6, clip_on=True)

    def _waits(self, c: SpanColumns, idx: Any, y: Any) -> None:
        """Each op's wait, from its stream reaching it (``stream_s``) to its start on the GPU, as a thin grey band
        in the middle of its lane; drawn only for timelines that know both (predictions, Kineto kernel spans)."""
        import numpy as np

        if c.stream_s is None:
            return
        st = c.stream_s[idx]
        wait = c.start_s[idx] - st
        m = np.isfinite(st) & (wait * self.px_per_ms * 1e3 >= 1.0)  # at least a pixel wide
        if not m.any():
            return
        self.wait_drawn = True
        self.boxes_drawn += int(m.sum())
        self.collections.append(_bars(self.ax, st[m] * 1e3, wait[m] * 1e3, y[m] - 0.08, 0.16, facecolors=WAIT,
                                      edgecolor="none", linewidth=0.0))

    def _exposed(self, lbl: str, c: SpanColumns, idx: Any, code: dict[str, int]) -> None:
        """Each shown comm lane's busy time not covered by any compute of its rank, as a red band under it."""
        import numpy as np

        rc = c.resource[1][idx]
        sv, sc = c.stream
        sel = idx[rc == code.get("compute", -1)]
        comp = merge_per_group(c.rank[sel], c.start_s[sel], c.end_s[sel])
        sel = idx[rc == code.get("comm", -1)]
        # the comm lanes, numbered in order of first use (a lane may gather several streams)
        pair = c.rank[sel] * max(1, len(sv)) + sc[sel]
        _u, first, inv = np.unique(pair, return_index=True, return_inverse=True)
        lane_of: dict[tuple[int, str], int] = {}
        lane_ids = np.empty(len(first), np.int64)
        for g in np.argsort(first, kind="stable").tolist():
            j = int(sel[first[g]])
            r = int(c.rank[j])
            lane_ids[g] = lane_of.setdefault((r, self.lay.lane_st(r, sv[int(sc[j])])), len(lane_of))
        lanes = list(lane_of)
        lg, ls, le = merge_per_group(lane_ids[inv.reshape(-1)], c.start_s[sel], c.end_s[sel])
        cuts = np.searchsorted(lg, np.arange(len(lanes) + 1))
        ccuts = np.searchsorted(comp[0], np.asarray([r for r, _ in lanes] + [0], comp[0].dtype))
        ccuts_end = np.searchsorted(comp[0], np.asarray([r for r, _ in lanes] + [0], comp[0].dtype), side="right")
        for i, (r, st) in enumerate(lanes):
            a, b = ccuts[i], ccuts_end[i]
            xs, xe = _minus(ls[cuts[i]:cuts[i + 1]], le[cuts[i]:cuts[i + 1]], comp[1][a:b], comp[2][a:b])
            if len(xs):
                self.exposed_drawn = True
                e = np.stack([xs, xe], axis=1) * 1e3
                self.boxes_drawn += len(e)
                self.collections.append(_bars(self.ax, e[:, 0], e[:, 1] - e[:, 0], self.lay.ypos[(r, st, lbl)] + 0.38,
                                              0.1, facecolors=EXPOSED, edgecolor="none", linewidth=0.0,
                                              gid=f"{EXPOSED_GID}{r}_{len(self.collections)}"))


def _minus(a_start: Any, a_end: Any, b_start: Any, b_end: Any) -> tuple[Any, Any]:
    """The parts of the merged intervals ``a`` not covered by the merged intervals ``b`` (sorted, disjoint), as
    ``a`` intersected with the gaps of ``b``, positive lengths only, sorted; all by array passes.

    >>> import numpy as np
    >>> s, e = _minus(np.array([0.0, 5.0]), np.array([4.0, 6.0]), np.array([1.0, 3.0]), np.array([2.0, 5.5]))
    >>> s.tolist(), e.tolist()
    ([0.0, 2.0, 5.5], [1.0, 3.0, 6.0])
    """
    import numpy as np

    gap_s = np.r_[-np.inf, b_end]
    gap_e = np.r_[b_start, np.inf]
    k0 = np.searchsorted(gap_e, a_start, side="right")
    n = np.maximum(np.searchsorted(gap_s, a_end, side="left") - k0, 0)
    row = np.repeat(np.arange(len(a_start)), n)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(k0, n)
    lo, hi = np.maximum(a_start[row], gap_s[k]), np.minimum(a_end[row], gap_e[k])
    keep = lo < hi
    return lo[keep], hi[keep]


def _draw_folded(ax: Any, hidden: dict[str, tuple[Any, Any, Any]], n_folded: int, base: int,
                 end_s: float, bins: int) -> None:
    """The folded ranks' compute and comm busy share over time, as two grey bands from lane ``base``."""
    import numpy as np

    edges = np.linspace(0.0, end_s, bins + 1)
    for j, resname in enumerate(("compute", "comm")):
        _g, a, b = merge_per_group(*hidden[resname])
        share = np.clip(busy_share((a, b), n_folded, edges), 0.0, 1.0)
        ax.imshow(share[None, :], aspect="auto", cmap="Greys", vmin=0.0, vmax=1.0, interpolation="nearest",
                  extent=(0.0, edges[-1] * 1e3, base + j + 0.38, base + j - 0.38))


# ---------------------------------------------------------------------------------------------- pipeline


def _pipeline_rows(tl: Timeline, ranks: Any = None) -> Any:
    """Row indices (numpy int64, ascending) of ``tl.columns`` that are pipeline actions: compute spans tagged
    with a ``stage`` and a ``pp_op`` in F/B/I/W; only on ``ranks`` (an iterable of ints) when given. All
    numpy: the tags are read as categorical columns."""
    idx = _compute_rows(tl, ranks)
    return idx[_actions(tl.columns)[idx]]


def _actions(c: Any) -> Any:
    """Per row of the span columns ``c``, whether its tags make it a pipeline action: a ``stage`` and a
    ``pp_op`` in F/B/I/W (bool array), from the tags' categorical columns."""
    import numpy as np

    ov, oc = c.tag_column("pp_op")
    _sv, sc = c.tag_column("stage")
    return np.array([v in _PHASES for v in ov] + [False], bool)[oc] & (sc >= 0)


def _compute_rows(tl: Timeline, ranks: Any = None) -> Any:
    """Row indices (ascending) of ``tl.columns`` on the compute resource, only on ``ranks`` when given."""
    import numpy as np

    c = tl.columns
    rv, rc = c.resource
    if "compute" not in rv:
        return np.zeros(0, dtype=np.int64)
    m = rc == rv.index("compute")
    if ranks is not None:
        m &= np.isin(c.rank, np.fromiter(ranks, dtype=c.rank.dtype))
    return np.flatnonzero(m)


def _action_ranks(tl: Timeline) -> list[int]:
    """The ranks with at least one pipeline action, ascending (from the tags' categorical columns)."""
    import numpy as np

    idx = _compute_rows(tl)
    if len(idx) == 0:
        return []
    r = tl.columns.rank[idx]
    o = np.argsort(r, kind="stable")
    r, idx = r[o], idx[o]
    starts = np.flatnonzero(np.concatenate([[True], r[1:] != r[:-1]]))
    ends = np.append(starts[1:], len(r))
    act = _actions(tl.columns)[idx]
    return [int(r[a]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True) if act[a:b].any()]


def pipeline_view(tl: Timeline, ranks: Any = None) -> Timeline:
    """One box per pipeline action: the compute spans of one (rank, F/B/I/W, stage, microbatch) merged.

    A full 1F1B backward (``pp_op`` B, whose ops carry phase I and W) stays one box. Spans without
    pipeline tags (all_reduce, optimizer) are dropped; keep the source timeline's makespan for labels.
    ``ranks`` (an iterable of ints) keeps only those ranks' actions (read from the columns, so a chart of 8
    of 1,024 ranks reads 8 ranks' tags).
    """
    rows = _pipeline_rows(tl, ranks)
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
    return Timeline(schedule=tl.schedule, source=tl.source, world_size=tl.world_size, launch=tl.launch,
                    profile=tl.profile, spans=spans, meta={"pipeline": tl.meta.get("pipeline")})


class PipelineLanes(NamedTuple):
    """What a pipeline chart draws (:func:`pipeline_lanes`): the ranks shown, the actions of those ranks (a
    :func:`pipeline_view`) and the note on the ranks left out ("" when none)."""

    shown: list[int]
    view: Timeline
    note: str


def pipeline_lanes(tl: Timeline, max_lanes: int = 32) -> PipelineLanes:
    """The ranks of :func:`draw_pipeline`: with data parallelism only the first replica's ranks (``rank < p``;
    the others repeat them, said in the note), past ``max_lanes`` ranks the first and last
    (:func:`choose_ranks`). Only the shown ranks' actions are merged into boxes."""
    info = tl.pipeline
    p = info.p if info is not None else 0
    ranks = _action_ranks(tl)
    note = ""
    if info is not None and p and len(ranks) > p:
        ranks = [r for r in ranks if info.first_replica(r)]
        note = f" (data-parallel replica 0 of {info.dp})"
    shown, _folded = choose_ranks(ranks, {r: 1 for r in ranks}, max_lanes)
    return PipelineLanes(shown, pipeline_view(tl, shown), note)


#: Unit-step widths of the paper figure (ZB paper: T_F = T_I = T_W, T_B = T_I + T_W).
UNIT = {"F": 1, "I": 1, "W": 1, "B": 2}


def unit_steps(view: Timeline) -> dict[str, tuple[int, int]]:
    """Replay the per-rank action order of a :func:`pipeline_view` in unit steps.

    Each rank runs its actions in their timeline order; an action starts when its rank is free and
    its pipeline dependencies are done: F(s, mb) after F(s−1, mb); I or B(s, mb) after F(s, mb) and
    after I/B(s+1, mb); W(s, mb) after I(s, mb). Returns span id -> (start step, end step).
    """
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
            d = [("F", st, mb)]
            if st < last:
                d.append(("IB", st + 1, mb))
            return d
        return [("IB", st, mb)]

    remaining = len(view.spans)
    force = False
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
                t1 = t0 + UNIT.get(op, 1)
                out[s.id] = (t0, t1)
                done[(op, st, mb)] = t1
                if op in ("I", "B"):
                    done[("IB", st, mb)] = t1
                free[r] = t1
                pos[r] += 1
                remaining -= 1
                progress = True
                force = False
        if not progress:
            force = True  # an order the dependency rules do not explain: place the next action anyway
    return out


def draw_pipeline(tl: Timeline, title: str = "", mode: str = "steps", max_lanes: int = 32,
                  lanes: PipelineLanes | None = None):
    """The pipeline figure of a timeline with pipeline tags; returns a matplotlib Figure.

    Parameters
    ----------
    tl : Timeline
        The full timeline (predicted, executed or imported with pipeline tags).
    mode : "steps" | "time"
        "steps": the papers' unit-step figure (see :func:`unit_steps`); "time": the actions at
        their timeline times, with the makespan line.
    max_lanes : int
        With data parallelism only the first replica's ranks are drawn (the others repeat them);
        past ``max_lanes`` ranks, the first and last ranks.
    lanes : PipelineLanes, optional
        :func:`pipeline_lanes` of ``tl`` computed once for several charts (steps and time).

    Raises
    ------
    ValueError
        ``mode`` not "steps" or "time".
    """
    from matplotlib.patches import Patch

    if mode not in ("steps", "time"):
        raise ValueError(f"mode must be 'steps' or 'time', not {mode!r}")
    info = tl.pipeline
    shown, view, note = lanes if lanes is not None else pipeline_lanes(tl, max_lanes)
    ypos = {r: i for i, r in enumerate(shown)}
    spans = view.spans
    xr: dict[str, tuple[float, float]]
    xmax: float
    if mode == "steps":
        steps = unit_steps(Timeline(view.schedule, view.source, view.world_size, spans=spans))
        xr = {s.id: steps[s.id] for s in spans}
        xmax = max([b for _a, b in xr.values()] + [1])
    else:
        xr = {s.id: (s.start_s * 1e3, s.end_s * 1e3) for s in spans}
        xmax = tl.makespan_s * 1e3
    n = len(shown)
    width_px_per_unit = 15.0
    width_in = 12.0 if mode == "time" else max(8.0, min(36.0, xmax * width_px_per_unit / _DPI / 0.78 + 2.0))
    top_in = 0.35 + (_title_pad(1) + 12) / 72
    fig = _fig(width_in, 0.42 * n + top_in + 0.7)
    ax = fig.add_subplot(111)
    unit_px = width_in * _DPI * 0.78 / max(xmax * 1.02, 1e-9)
    used: dict[str, str] = {}
    groups: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    labels: list[tuple[float, float, int, str, str]] = []
    for s in spans:
        op = s.kind
        chunk = int(s.tags.get("chunk", 0) or 0)
        c = _color(op) if chunk == 0 else _lighten(_color(op), min(0.66, 0.22 * chunk))
        used.setdefault(op if not chunk else f"{op} (chunk {chunk})", c)
        a, b = xr[s.id]
        y = ypos[s.rank]
        groups[(y, c)].append((a, b - a))
        labels.append((a, b, y, str(s.tags["mb"]), "white" if chunk == 0 else "black"))
    import numpy as np

    for (y, c), bars in groups.items():
        xw = np.array(sorted(bars), dtype=float).reshape(-1, 2)
        x0, w = xw[:, 0], xw[:, 1]
        wide = float(w.min()) * unit_px >= 4
        if not wide:  # narrow boxes without edges: sub-pixel gaps closed, one box per solid run of pixels
            x0, w = _pixel_runs(x0, w, 1.0 / unit_px)
        _bars(ax, x0, w, y - 0.4, 0.8, facecolors=c, edgecolors="white" if wide else "none",
              linewidths=0.6 if wide else 0.0)
    items: list[tuple[float, float, str, float, str]] = []
    for a, b, y, text, tc in labels:
        box_px = (b - a) * unit_px
        fs = min(8.0, box_px * 0.85 * 72 / (0.62 * len(text) * _DPI))
        if fs >= 4.5:
            items.append(((a + b) / 2, y, text, fs, tc))
    _centred_labels(ax, items)
    ax.set_yticks(range(n))
    s2r = info.stage_to_rank if info is not None else {}
    stride = info.rank_stride if info is not None else 1
    ax.set_yticklabels([f"rank {r}" + (f" (stage {_stages_of(s2r, r // stride)})" if s2r else "") for r in shown],
                       fontsize=7)
    ax.set_ylim(n - 0.5, -0.6)
    ax.set_xlim(0, xmax * 1.02)
    ms = tl.makespan_s * 1e3
    if mode == "time":
        ax.set_xlabel("time (ms)")
        _makespan_labels(ax, [(f"makespan {ms:.3f} ms", ms)], xmax * 1.02)
    else:
        ax.set_xlabel(f"step (F, I, W = 1 step; full backward B = 2); {xmax} steps")
        ax.text(0.0, 1.0, f"timeline makespan {ms:.3f} ms", transform=_above(ax, 0), fontsize=7, va="bottom",
                ha="left", gid=MAKESPAN_GID)
    handles = [Patch(facecolor=c, label=k) for k, c in sorted(used.items(), key=lambda kv: ("FBIW".find(kv[0][0]), kv[0]))]
    _legend(ax, handles)
    ax.set_title(_cut(title, 200) + note, fontsize=9, pad=_title_pad(1))
    h = fig.get_figheight()
    fig.subplots_adjust(left=1.4 / width_in, right=1 - 1.25 / width_in, top=1 - top_in / h, bottom=0.55 / h)
    return fig


#: From this many labels on, a chart's box labels are drawn by one :class:`_LabelSet` instead of a Text each.
LABEL_SET_MIN = 64


def _centred_labels(ax: Any, items: list[tuple[float, float, str, float, str]]) -> None:
    """Labels centred on (x, y) in data coordinates, each ``(x, y, text, fontsize, colour)``, clipped to the axes:
    a ``Text`` each when few, one :class:`_LabelSet` (the same pixels, a third of the time) past
    :data:`LABEL_SET_MIN`."""
    if len(items) < LABEL_SET_MIN:
        for x, y, text, fs, tc in items:
            ax.text(x, y, text, ha="center", va="center", fontsize=fs, color=tc, clip_on=True)
    elif items:
        ax.add_artist(_label_set(items))


def _label_set(items: list[tuple[float, float, str, float, str]]) -> Any:
    """A :class:`_LabelSet` of ``items`` (the class is made on first use: matplotlib is imported lazily)."""
    global _LabelSet
    if _LabelSet is None:
        from matplotlib.artist import Artist
        from matplotlib.text import Text

        class LabelSet(Artist):
            """One-line labels centred on their data points, drawn as a ``Text`` per label draws them (the same
            ``renderer.draw_text`` call at the same device position, the same colour, antialiasing and clip), but
            each distinct (text, size, colour) is laid out once by a template Text, and the positions are
            transformed in one call. A ``Text`` costs ~0.5 ms to create, lay out and draw (Agg, 2-core VM);
            1,024 of them were a third of a PP8×DP128 run's chart time."""

            zorder = 3  # Text's

            def __init__(self, items: list[tuple[float, float, str, float, str]]) -> None:
                super().__init__()
                self.items = items

            def draw(self, renderer: Any) -> None:
                import numpy as np

                if not self.get_visible() or not self.items:
                    return
                me: Any = self  # matplotlib's private helpers (_set_gc_clip, Text._get_layout) are not in its stubs
                xy = me.axes.transData.transform(np.array([(x, y) for x, y, *_ in self.items], dtype=float))
                _w, canvas_h = renderer.get_canvas_width_height()
                flip = renderer.flipy()
                done: dict[tuple[str, float, str], tuple[Any, float, float, Any]] = {}
                glyphs = _AggGlyphs.of(renderer)
                for (_x, _y, text, fs, tc), (px, py) in zip(self.items, xy.tolist(), strict=True):
                    tpl = done.get((text, fs, tc))
                    if tpl is None:
                        t: Any = Text(0.0, 0.0, text, ha="center", va="center", fontsize=fs, color=tc)
                        t.set_figure(self.figure)
                        ((_line, _wad, (dx, dy)),) = t._get_layout(renderer)[1]
                        gc = renderer.new_gc()
                        gc.set_foreground(t.get_color(), isRGBA=False)
                        gc.set_alpha(None)
                        gc.set_antialiased(t._antialiased)
                        me._set_gc_clip(gc)
                        tpl = done[(text, fs, tc)] = (t, dx, dy, gc)
                    t, dx, dy, gc = tpl
                    y = py + dy
                    if glyphs is not None:
                        glyphs.draw(gc, px + dx, canvas_h - y if flip else y, text, t._fontproperties)
                        continue
                    # no mtext: SVG with svg.fonttype "none" would place the text at the template's (0, 0)
                    renderer.draw_text(gc, px + dx, canvas_h - y if flip else y, text, t._fontproperties, 0.0,
                                       ismath=False, mtext=None)
                for _t, _dx, _dy, gc in done.values():
                    gc.restore()
                self.stale = False

        _LabelSet = LabelSet
    return _LabelSet(items)


_LabelSet: Any = None


class _AggGlyphs:
    """Agg's ``draw_text`` for many short labels, each string laid out once and each glyph rasterised once per
    sub-pixel phase: the same calls as matplotlib 3.11's ``RendererAgg.draw_text`` at angle 0 (its
    ``_draw_text_glyphs_and_boxes``: FreeType places a glyph at a 26.6 fixed-point origin, so a glyph at the
    same fraction of a pixel is the same bitmap moved by whole pixels), hence the same pixels. Text layout
    with libraqm and per-glyph rendering cost ~1 ms per label on matplotlib 3.11 (2-vCPU VM): the
    ~500 microbatch numbers of a pipeline chart were most of its time. Used only where matplotlib has those
    internals; otherwise :meth:`of` returns None and the labels go through ``renderer.draw_text``."""

    def __init__(self, renderer: Any) -> None:
        from matplotlib.backends.backend_agg import get_hinting_flag
        from matplotlib.ft2font import RenderMode

        self.r = renderer
        self.flags = get_hinting_flag()
        self.modes = (RenderMode.MONO, RenderMode.NORMAL)
        self.layouts: dict[tuple[str, Any], tuple[float, list[tuple[Any, int, float, float]]]] = {}
        self.bitmaps: dict[tuple[int, float, int, int, int, bool], tuple[Any, int, int]] = {}

    @classmethod
    def of(cls, renderer: Any) -> _AggGlyphs | None:
        """The fast path for ``renderer``, or None when it is not matplotlib's own Agg renderer of a version
        with per-glyph rendering (``FT2Font._layout``, ``_render_glyph``, ``_set_transform``)."""
        try:
            from matplotlib.backends.backend_agg import RendererAgg
            from matplotlib.ft2font import FT2Font, RenderMode  # noqa: F401
        except ImportError:
            return None
        if type(renderer) is not RendererAgg or not all(
                hasattr(FT2Font, a) for a in ("_layout", "_render_glyph", "_set_transform")) or not hasattr(
                RendererAgg, "_draw_text_glyphs_and_boxes"):
            return None
        return cls(renderer)

    def draw(self, gc: Any, x: float, y: float, text: str, prop: Any) -> None:
        """``renderer.draw_text(gc, x, y, text, prop, 0.0)`` (``y`` downwards, as Agg takes it)."""
        import numpy as np

        r = self.r
        key = (text, prop)
        lay = self.layouts.get(key)
        if lay is None:
            font = r._prepare_font(prop)
            items = font._layout(text, flags=self.flags, features=None, language=None)
            lay = self.layouts[key] = (prop.get_size_in_points(),
                                       [(it.ft_object, it.glyph_index, it.x, it.y) for it in items])
        size, items = lay
        aa = bool(gc.get_antialiased())
        height = int(r.height)
        for font, gi, gx, gy in items:
            x26, y26 = round(0x40 * (x + gx)), round(0x40 * (r.height - y + gy))
            bkey = (id(font), size, gi, x26 & 63, y26 & 63, aa)
            hit = self.bitmaps.get(bkey)
            if hit is None:
                font.set_size(size, r.dpi)
                font._set_transform(np.array([[0x10000, 0], [0, 0x10000]]), [x26, y26])
                bm = font._render_glyph(gi, self.flags, self.modes[aa])
                buf = np.array(bm.buffer)  # a copy: the font may reuse its buffer
                if not aa:
                    buf *= 0xff
                hit = self.bitmaps[bkey] = (buf, bm.left - (x26 >> 6), bm.top - (y26 >> 6))
            buf, left, top = hit
            r._renderer.draw_text_image(buf, (x26 >> 6) + left, height - ((y26 >> 6) + top) + buf.shape[0], 0, gc)


def _stages_of(s2r: dict[int, int], r: int) -> str:
    return ",".join(str(s) for s, rr in sorted(s2r.items()) if rr == r)


def _above(ax: Any, row: int) -> Any:
    from matplotlib.transforms import offset_copy

    return offset_copy(ax.transAxes, fig=ax.figure, x=0, y=3 + 11 * row, units="points")


# ---------------------------------------------------------------------------------------------- memory


def draw_memory(curves: dict[int, list[tuple[float, float]]], makespan_s: float, title: str = "",
                peaks: dict[int, tuple[float, str]] | None = None, max_ranks: int = 8,
                static: dict[int, float] | None = None):
    """Bytes allocated per rank over time: a step curve per rank, in GiB/MiB.

    ``curves``: rank -> [(t_s, bytes)] steps (value holds until the next step). Curves are drawn as
    the per-pixel maximum (the envelope), so a free and an allocation a few ns apart do not draw a
    one-pixel spike or dip. Past ``max_ranks`` ranks, the first and last ranks (by peak) are drawn.
    ``peaks``: rank -> (bytes, op id) for the legend. ``static``: rank -> bytes held all step
    (parameters, gradients, optimizer state); the curves then show what lies above it, so the
    activations stay visible next to tens of GiB of weights.
    """
    import numpy as np

    static = static or {}
    if any(static.values()):
        curves = {r: [(t, b - static.get(r, 0.0)) for t, b in pts] for r, pts in curves.items()}
    ranks = sorted(curves)
    if len(ranks) > max_ranks:
        by_peak = sorted(ranks, key=lambda r: -max((b for _t, b in curves[r]), default=0.0))
        ranks = sorted(set(by_peak[: max_ranks // 2] + by_peak[-(max_ranks - max_ranks // 2):]))
    top = max([b for r in ranks for _t, b in curves[r]] + [1.0])
    unit, uname = (2**30, "GiB") if top >= 2**30 else (2**20, "MiB")
    fig = _fig(12, 3.6)
    ax = fig.add_subplot(111)
    bins = 1000
    end = max(makespan_s, 1e-12)
    edges = np.linspace(0.0, end, bins + 1)
    for r in ranks:
        pts = sorted(curves[r])
        if not pts:
            continue
        ts = np.array([t for t, _ in pts])
        vs = np.array([v for _, v in pts]) / unit
        # envelope: max of the values live in each bin (the value at its start and every step inside it)
        idx = np.clip(np.searchsorted(ts, edges[:-1], side="right") - 1, 0, len(vs) - 1)
        env = vs[idx].copy()
        inside = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, bins - 1)
        np.maximum.at(env, inside, vs)
        lab = f"rank {r}"
        if peaks and r in peaks:
            from schedsim.report.summary import fmt_bytes

            lab += f" (peak {fmt_bytes(peaks[r][0])} at {peaks[r][1]}"
            lab += f"; static {fmt_bytes(static[r])})" if static.get(r) else ")"
        ax.step(np.append(edges[:-1], end) * 1e3, np.append(env, env[-1]), where="post", label=lab, linewidth=1.1)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"{'above static state' if any(static.values()) else 'allocated'} ({uname})", fontsize=8)
    ax.set_xlim(0, end * 1e3 * 1.02)
    ax.set_ylim(0, top / unit * 1.12)
    _makespan_labels(ax, [(f"makespan {makespan_s * 1e3:.3f} ms", makespan_s * 1e3)], end * 1e3 * 1.02)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, frameon=False)
    ax.set_title(_cut(title, 200), fontsize=9, pad=_title_pad(1))
    longest = max((len(t.get_text()) for t in ax.get_legend().get_texts()), default=10)
    fig.subplots_adjust(left=0.08, right=max(0.45, 1 - (0.5 + 0.058 * longest) / 12), top=0.82, bottom=0.14)
    return fig


# ---------------------------------------------------------------------------------------------- writers


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


def write_gantt(path_stem: str | Path, timelines: list[tuple[str, Timeline]], title: str = "",
                formats: tuple[str, ...] = ("png", "svg"), **kw: Any) -> list[Path]:
    """Draw :func:`draw_gantt` and write ``<stem>.png`` / ``<stem>.svg`` atomically; returns the paths.

    The SVG's size is bounded whatever the run's size: past ``max_lanes`` lanes ranks fold into two image
    bands, a lane's sub-pixel boxes are drawn as pixel runs, and past :data:`RASTER_BOXES` boxes the boxes
    are one embedded image (the PP8×DP128 run of 214,016 ops: 2,794 boxes in 108 collections, a 0.64 MB SVG).
    """
    fig = draw_gantt(timelines, title, **kw)
    paths = []
    for fmt in formats:
        with _compound_boxes(fig) if fmt in _VECTOR else nullcontext():
            paths.append(write_figure(fig, Path(f"{path_stem}.{fmt}"), fmt))
    return paths


#: Output formats written as vector paths (the others are rasterized by Agg).
_VECTOR = ("svg", "pdf", "ps", "eps")


def write_pipeline(path: str | Path, tl: Timeline, title: str = "", mode: str = "steps",
                   lanes: PipelineLanes | None = None) -> Path:
    """Draw :func:`draw_pipeline` and write it as PNG atomically."""
    return write_figure(draw_pipeline(tl, title, mode=mode, lanes=lanes), path)


def write_memory_plot(path: str | Path, curves: dict[int, list[tuple[float, float]]], makespan_s: float,
                      title: str = "", peaks: dict[int, tuple[float, str]] | None = None,
                      static: dict[int, float] | None = None) -> Path:
    """Draw :func:`draw_memory` and write it as PNG atomically."""
    return write_figure(draw_memory(curves, makespan_s, title, peaks, static=static), path)
