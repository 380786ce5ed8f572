"""The Gantt chart of a timeline with matplotlib (Agg; pyplot is never imported).

* :func:`draw_gantt` — one lane per rank × stream, time in ms. A colour per op
  kind (:data:`KIND_COLORS`, the same in every chart), op names where they fit,
  the makespan as a dashed line, and exposed communication (comm time with no
  compute on that rank) as a red band under the comm lane it belongs to.
  Past ``max_lanes`` lanes, the ranks on the critical path, then the first and
  last ranks keep their lanes and all other ranks fold into two "others" bands: the share of those ranks busy on
  compute and on comm over time (a heat strip, 0 = white, 1 = black); a note under the axes names the ranks
  shown and folded (``gid`` :data:`LANES_GID`). Drawn from the timeline's columns: one PolyCollection per
  (lane, colour), a lane's boxes merged into pixel runs when it holds more boxes than the axes has pixels, and
  the boxes rasterized in SVG past :data:`RASTER_BOXES`; past ``chart_base.RASTER_MIN_BOXES`` ops the boxes
  under 4 px, the waits and the exposed bands are painted into one raster instead (``chart_base._box_raster``),
  so a chart's cost and size follow its lanes and pixels, not its op count. On a cluster profile whose transfers
  crossed nodes, a thin last lane shows the use of the shared link that moved the most bytes
  (``timeline.meta["links"]``, its capacity the lane's height; ``gid`` :data:`LINK_LANE_GID`).
* :func:`write_gantt` — draws it and writes ``<stem>.png`` / ``<stem>.svg`` atomically.

The pipeline chart is in :mod:`schedsim.report.pipeline_chart`, the memory chart in
:mod:`schedsim.report.memory_chart`, and what the charts share (colours, labels, boxes, writing) in
:mod:`schedsim.report.chart_base`. Every chart's makespan comes from the timeline it draws (``Timeline.makespan_s``)
and is written in a text artist whose ``gid`` is ``"makespan"``, so tests can
read it back. Labels above the axes stack in rows of their own, so they never
overlap each other or the legend (which sits right of the axes).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from schedsim.arrays import unique
from schedsim.report.chart_base import (
    _DPI,
    _PHASES,
    _VECTOR,
    EXPOSED,
    KIND_COLORS,
    RASTER_MIN_BOXES,
    WAIT,
    _bars,
    _box_raster,
    _color,
    _compound_boxes,
    _coverage,
    _cut,
    _fig,
    _lane_ticks,
    _legend,
    _lighten,
    _makespan_labels,
    _pixel_runs,
    _title,
    _title_pad,
    choose_ranks,
    write_figure,
)
from schedsim.sim.metrics import merge_per_group
from schedsim.sim.path_ids import PathIds
from schedsim.sim.timeline import SpanColumns, Timeline

__all__ = ["draw_gantt", "write_gantt", "LANES_GID", "LINK_LANE_GID", "rank_ranges"]

#: ``gid`` prefix of a rank's exposed-communication bands (``boxes_exposed_comm_r<rank>_<n>``, an SVG group id: an
#: XML name, unique): their union per rank is its ``RankMetrics.exposed_comm_s`` (docs/metrics.md;
#: ``tests/sim/test_metrics_agree.py`` checks it).
EXPOSED_GID = "boxes_exposed_comm_r"
#: gid of the Gantt's note naming the ranks shown and folded (only when ranks are folded)
LANES_GID = "lanes-note"
#: gid of the Gantt's thin lane of the busiest shared link's use (cluster profiles, ``timeline.meta["links"]``)
LINK_LANE_GID = "link-use"


def busy_share(spans: Any, n: int, edges: Any) -> Any:
    """Mean busy share of ``n`` ranks per bin: Σ overlap(span, bin) / (n · bin width).

    ``spans`` is a list of (start, end) pairs or a pair of numpy arrays (starts, ends), in seconds. Exact for
    intervals that do not overlap within a rank (each rank's merged intervals). ``edges`` is a sorted numpy
    array of bin edges (seconds); returns len(edges) − 1 values.
    """
    import numpy as np

    if isinstance(spans, tuple) and len(spans) == 2 and hasattr(spans[0], "dtype"):
        st, en = np.asarray(spans[0], dtype=float), np.asarray(spans[1], dtype=float)
    else:
        st = np.array([a for a, _ in spans], dtype=float)
        en = np.array([b for _, b in spans], dtype=float)
    if len(st) == 0 or n <= 0:
        return np.zeros(len(edges) - 1)
    return _coverage(st, en, edges) / (n * np.diff(edges))


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
    n_spans = sum(len(tl) for _l, tl in timelines)
    pen = _GanttPen(ax, lay, px_per_ms=ax_w_px / (xmax_s * 1e3 * 1.02), lane_px=ax_w_px,
                    label_ok=n_spans <= max_labels, min_label_frac=min_label_frac,
                    raster=_box_raster(ax) if n_spans > RASTER_MIN_BOXES else None)
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
    _lane_ticks(ax, yt, 7 if n <= 60 else 6)
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
    _title(ax, _cut(title, 200), len(mk))
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
    uniq, first, _inv = unique(key)
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
    steps = link["steps"]  # an (n, 2) array in the process, pairs when read from timeline.json
    steps = steps.tolist() if hasattr(steps, "tolist") else steps
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
        cp = timelines[0][1].critical_path
        cp_ranks = cp.rank_list() if isinstance(cp, PathIds) else [  # the ranks of its ids, none made
            int(op.rsplit("@r", 1)[1]) for op in cp if op.rsplit("@r", 1)[-1].isdigit()]
        lay.shown, lay.folded = choose_ranks(ranks, n_lanes, max_lanes, prefer=list(dict.fromkeys(cp_ranks)))
        lay.lanes = [(r, st, lbl) for r in lay.shown for st in streams_of[r] for lbl, _ in timelines
                     if (r, st) in has[lbl]]
        lay.ypos = {ln: i for i, ln in enumerate(lay.lanes)}
        return lay


#: A Gantt chart of more boxes than this has them rasterized in vector outputs (SVG/PDF): one embedded image
#: instead of one <path> per box (~120 bytes each in SVG; 20,000 boxes ≈ 2.5 MB).
RASTER_BOXES = 20_000


class _GanttPen:
    """Draws the spans of each timeline into its lanes from the timeline's columns: boxes grouped by (lane,
    colour, edge) into one PolyCollection each (a lane with more boxes of one colour than the axes has
    pixels drawn as its pixel runs, :func:`_pixel_runs`), op labels in wide boxes, and exposed communication
    under comm lanes. The ranks folded into bands are returned as arrays, never as rows."""

    def __init__(self, ax: Any, lay: _GanttLayout, *, px_per_ms: float, lane_px: float, label_ok: bool,
                 min_label_frac: float, raster: Any = None) -> None:
        self.ax, self.lay, self.raster = ax, lay, raster
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
        lk, _first, inv = unique(rank * max(1, len(sv)) + sc[idx])
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
        _u, first, inv = unique(combo)
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
        _u, first, ginv = unique(gk)
        counts = np.bincount(ginv, minlength=len(first))
        perm = np.argsort(ginv.reshape(-1), kind="stable")
        ends = np.cumsum(counts)
        names = list(colours)
        px = 1.0 / max(self.px_per_ms, 1e-300)
        for g in np.argsort(first, kind="stable").tolist():
            rows = perm[ends[g] - counts[g]:ends[g]]
            j0 = int(rows[0])
            gx, gw = x0[rows], w[rows]
            is_wide = bool(wide[j0])
            if self.raster is not None and not is_wide:
                self.raster.add(gx, gw, int(y[j0]) - 0.38, 0.76, names[int(cid[j0])])
                continue
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
        if self.raster is not None:
            for lane in np.unique(y[m]).tolist():
                k = m & (y == lane)
                self.raster.add(st[k] * 1e3, wait[k] * 1e3, lane - 0.08, 0.16, WAIT)
            return
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
        _u, first, inv = unique(pair)
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
            if len(xs) and self.raster is not None:
                self.exposed_drawn = True
                self.raster.add(xs * 1e3, (xe - xs) * 1e3, self.lay.ypos[(r, st, lbl)] + 0.38, 0.1, EXPOSED,
                                gid=f"{EXPOSED_GID}{r}_{i}")
            elif len(xs):
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


def write_gantt(path_stem: str | Path, timelines: list[tuple[str, Timeline]], title: str = "",
                formats: tuple[str, ...] = ("png", "svg"), **kw: Any) -> list[Path]:
    """Draw :func:`draw_gantt` and write ``<stem>.png`` / ``<stem>.svg`` atomically; returns the paths.

    The SVG's size is bounded whatever the run's size: past ``max_lanes`` lanes ranks fold into two image
    bands, a lane's sub-pixel boxes are drawn as pixel runs, and past :data:`RASTER_BOXES` boxes the boxes
    are one embedded image (the PP8×DP128 run of 214,016 ops: 2,794 boxes in 108 collections, a 0.64 MB SVG).
    """
    fig = draw_gantt(timelines, title, **kw)
    paths = []
    for k, fmt in enumerate(formats):
        with _compound_boxes(fig) if fmt in _VECTOR else nullcontext():
            paths.append(write_figure(fig, Path(f"{path_stem}.{fmt}"), fmt, again=k + 1 < len(formats)))
    return paths
