"""The pipeline chart: the ZB / DualPipe papers' figure of a timeline with pipeline tags.

:func:`draw_pipeline` draws one lane per pipeline rank, one box per F / B / I / W action with its
microbatch number, in unit steps (F, I and W one step each, a full backward B two: the ZB paper's
T_B = T_I + T_W with T_F = T_I = T_W, arXiv 2401.10241 §2) or in time. :func:`pipeline_view` keeps the
pipeline actions of a timeline, :func:`pipeline_lanes` picks the ranks drawn, :func:`unit_steps` places
the actions in unit steps (array sweeps over the ranks, :func:`_steps_by_arrays`), the labels inside boxes are
drawn as one artist past :data:`LABEL_SET_MIN` labels, and past ``chart_base.RASTER_MIN_BOXES`` actions the boxes
under 4 px are painted into one raster (``chart_base._box_raster``). The chart reads the actions as columns, never
as one Span each.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.arrays import unique
from schedsim.report.chart_base import (
    _DPI,
    _PHASES,
    MAKESPAN_GID,
    RASTER_MIN_BOXES,
    _AggGlyphs,
    _bars,
    _box_raster,
    _color,
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
from schedsim.sim.timeline import Span, Timeline

__all__ = ["draw_pipeline", "write_pipeline", "pipeline_view", "unit_steps", "PipelineLanes", "pipeline_lanes"]


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


class _Actions(NamedTuple):
    """The boxes of :func:`pipeline_view` as columns (numpy arrays of one length, in the view's order: by rank, then
    start, ties in the order of their first rows): ``op`` codes into ``ops`` (F/B/I/W), ``stage`` and ``mb`` the
    tags as ints, ``chunk`` codes into ``chunks`` (the first row's ``chunk`` tag; −1 when it has none), and each
    box's earliest start and latest end (s)."""

    rank: Any
    ops: list[str]
    op: Any
    stage: Any
    mb: Any
    chunks: list[Any]
    chunk: Any
    start_s: Any
    end_s: Any

    def chunk_numbers(self) -> Any:
        """Per box its chunk as an int (0 when untagged or falsy), numpy int64."""
        import numpy as np

        table = np.zeros(len(self.chunks) + 1, np.int64)
        for k in unique(self.chunk)[0].tolist():
            table[k] = int(self.chunks[k] or 0) if k >= 0 else 0
        return table[self.chunk]

    def spans(self) -> list[Span]:
        """The boxes as Spans (id ``{op}{stage}.{mb}@r{rank}``, name the microbatch, kind the action)."""
        spans = []
        chunks = self.chunks + [0]
        for r, o, st, mb, ch, a, b in zip(self.rank.tolist(), self.op.tolist(), self.stage.tolist(), self.mb.tolist(),
                                          self.chunk.tolist(), self.start_s.tolist(), self.end_s.tolist(),
                                          strict=True):
            op = self.ops[o]
            spans.append(Span(f"{op}{st}.{mb}@r{r}", str(mb), r, "pipeline", op, "compute", a, b,
                              tags={"pp_op": op, "stage": st, "mb": mb, "chunk": chunks[ch]}))
        return spans


def _pipeline_actions(tl: Timeline, ranks: Any = None) -> _Actions:
    """:func:`pipeline_view`'s boxes as columns (:class:`_Actions`), all numpy: the tags are read as categorical
    columns."""
    import numpy as np

    rows = _pipeline_rows(tl, ranks)
    c = tl.columns

    def column(key: str, conv: Any) -> tuple[list[Any], np.ndarray]:
        """Tag ``key`` of the rows as codes into its values converted by ``conv`` (equal ones, such as 1 and 1.0
        for an int, share a code), and the values: only those the rows hold are converted."""
        values, codes = c.tag_column(key)
        codes = codes[rows]
        if len(codes) and int(codes.min()) < 0:
            raise KeyError(key)  # an action without it (pp_op and stage are there: _pipeline_rows)
        used = unique(codes)[0]
        conv_of: dict[Any, int] = {}
        out: list[Any] = []
        table = np.zeros(len(values) + 1, np.int64)
        for k in used.tolist():
            v = conv(values[k])
            table[k] = conv_of.setdefault(v, len(out))
            if table[k] == len(out):
                out.append(v)
        return out, table[codes]

    # one box per (rank, pp_op, stage, microbatch): the earliest start and latest end of its rows, the tags of
    # its first row; boxes by rank and start, ties in the order of their first rows
    ops, opc = column("pp_op", str)
    stages, stc = column("stage", int)
    mbs, mbc = column("mb", int)
    rank, start, end = c.rank[rows], c.start_s[rows], c.end_s[rows]
    order, key = _lex_order((rank, opc, stc, mbc))  # stable: a box's rows in timeline order
    head = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(order) else order
    first = order[head]  # each box's first row (of rows)
    a_s = np.minimum.reduceat(start[order], head) if len(head) else start[:0]
    b_s = np.maximum.reduceat(end[order], head) if len(head) else end[:0]
    chv, chc = c.tag_column("chunk")
    o = np.lexsort((first, a_s, rank[first]))
    f = first[o]
    return _Actions(rank[f].astype(np.int64), ops, opc[f], np.array(stages + [0], np.int64)[stc[f]],
                    np.array(mbs + [0], np.int64)[mbc[f]], list(chv), chc[rows[f]].astype(np.int64), a_s[o], b_s[o])


def _lex_order(cols: tuple[Any, ...]) -> tuple[Any, Any]:
    """``(order, key)``: ``order`` the stable order of the rows by the non-negative integer columns ``cols``, first
    column first (``np.lexsort(cols[::-1])``), and ``key`` one int64 per row in that order, equal where the rows
    hold equal values in every column. The columns packed into one int64 key (each a digit of base its maximum +
    1) and one stable argsort where the product of those bases stays below 2**62: pp=32's 196,608 action rows
    in 18 ms against lexsort's 64 (2-vCPU VM); else ``np.lexsort`` and the rows' running count of changes."""
    import numpy as np

    n = len(cols[0])
    bases = [int(c.max()) + 1 if n else 1 for c in cols]
    if n and min(int(c.min()) for c in cols) >= 0 and float(np.prod(np.array(bases, float))) < 2.0**62:
        key = cols[0].astype(np.int64)
        for c, b in zip(cols[1:], bases[1:], strict=True):
            key = key * b + c
        order = np.argsort(key, kind="stable")
        return order, key[order]
    order = np.lexsort(cols[::-1])
    new = np.zeros(n, bool)
    if n:
        new[1:] = np.any([c[order][1:] != c[order][:-1] for c in cols], axis=0)
    return order, np.cumsum(new)


def pipeline_view(tl: Timeline, ranks: Any = None) -> Timeline:
    """One box per pipeline action: the compute spans of one (rank, F/B/I/W, stage, microbatch) merged.

    A full 1F1B backward (``pp_op`` B, whose ops carry phase I and W) stays one box. Spans without
    pipeline tags (all_reduce, optimizer) are dropped; keep the source timeline's makespan for labels.
    ``ranks`` (an iterable of ints) keeps only those ranks' actions (read from the columns, so a chart of 8
    of 1,024 ranks reads 8 ranks' tags).
    """
    return _view_of(tl, _pipeline_actions(tl, ranks))


def _view_of(tl: Timeline, acts: _Actions) -> Timeline:
    return Timeline(schedule=tl.schedule, source=tl.source, world_size=tl.world_size, launch=tl.launch,
                    profile=tl.profile, spans=acts.spans(), meta={"pipeline": tl.meta.get("pipeline")})


class PipelineLanes(NamedTuple):
    """What a pipeline chart draws (:func:`pipeline_lanes`): the ranks shown, the actions of those ranks (as
    columns; :attr:`view` makes them a :func:`pipeline_view`) and the note on the ranks left out ("" when none)."""

    shown: list[int]
    actions: _Actions
    note: str
    source: Timeline

    @property
    def view(self) -> Timeline:
        """The shown ranks' actions as a :func:`pipeline_view` (built on each call)."""
        return _view_of(self.source, self.actions)


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
    return PipelineLanes(shown, _pipeline_actions(tl, shown), note, tl)


#: Unit-step widths of the paper figure (ZB paper: T_F = T_I = T_W, T_B = T_I + T_W).
UNIT = {"F": 1, "I": 1, "W": 1, "B": 2}


def unit_steps(view: Timeline) -> dict[str, tuple[int, int]]:
    """Replay the per-rank action order of a :func:`pipeline_view` in unit steps.

    Each rank runs its actions in their timeline order; an action starts when its rank is free and
    its pipeline dependencies are done: F(s, mb) after F(s−1, mb); I or B(s, mb) after F(s, mb) and
    after I/B(s+1, mb); W(s, mb) after I(s, mb). Returns span id -> (start step, end step).
    """
    import numpy as np

    spans = view.spans
    ops = ["F", "B", "I", "W"]
    code = {o: i for i, o in enumerate(ops)}
    if all(s.kind in code for s in spans):
        got = _steps_by_arrays(np.array([s.rank for s in spans], np.int64), ops,
                               np.array([code[s.kind] for s in spans], np.int64),
                               np.array([int(s.tags["stage"]) for s in spans], np.int64),
                               np.array([int(s.tags["mb"]) for s in spans], np.int64),
                               np.array([s.start_s for s in spans], float))
        if got is not None:
            return {s.id: (a, b) for s, a, b in zip(spans, got[0].tolist(), got[1].tolist(), strict=True)}
    return _steps_by_loop(spans)


def _step_graph(rank: Any, ops: list[str], op: Any, stage: Any, mb: Any, start_s: Any) -> tuple[Any, ...] | None:
    """What :func:`_steps_by_arrays` solves, from its columns (``n`` ≥ 1 actions): ``(o, rank, unit, d1, d2)`` with
    ``o`` the actions in each rank's timeline order (the others in that order), each action's rank and unit, and
    the positions (in that order) of its one or two dependencies (n: none); None when an action is not F/B/I/W,
    two actions share a key, or a dependency is not among the actions."""
    import numpy as np

    n = len(rank)
    o = np.lexsort((start_s, rank))  # each rank's actions in timeline order (stable: ties keep the view's order)
    rank, op, stage, mb = rank[o], op[o], stage[o], mb[o]
    code = {v: ops.index(v) if v in ops else -1 for v in _PHASES}
    is_f = op == code["F"]
    is_ib = (op == code["I"]) | (op == code["B"])
    is_w = op == code["W"]
    if not bool((is_f | is_ib | is_w).all()):
        return None
    unit = np.where(op == code["B"], 2, 1)
    last = int(stage.max())
    smin, mmin = int(stage.min()), int(mb.min())
    width = int(mb.max()) - mmin + 1
    key = (stage - smin) * width + (mb - mmin)

    def table(mask: Any) -> tuple[Any, Any] | None:
        """The sorted keys of the actions of ``mask`` and their positions; None when a key repeats."""
        idx = np.flatnonzero(mask)
        k = key[idx]
        srt = np.argsort(k, kind="stable")
        k = k[srt]
        return None if len(k) > 1 and bool((k[1:] == k[:-1]).any()) else (k, idx[srt])

    fk, ibk = table(is_f), table(is_ib)
    if fk is None or ibk is None:
        return None
    missing = False

    def look(tab: tuple[Any, Any], want: Any, q: Any) -> Any:
        """Position of the action of key ``q`` in ``tab`` where ``want``, else n (no dependency)."""
        nonlocal missing
        tk, ti = tab
        out = np.full(n, n, np.int64)
        (w,) = np.nonzero(want)
        if len(w):
            if not len(tk):
                missing = True
                return out
            pos = np.minimum(np.searchsorted(tk, q[w]), len(tk) - 1)
            hit = tk[pos] == q[w]
            missing = missing or not bool(hit.all())
            out[w] = ti[pos]
        return out

    # F(s − 1) of an F past stage 0 (a key below the first stage's matches nothing), F(s) and I/B(s + 1) of an I or
    # B, I/B(s) of a W
    d1 = np.minimum(np.minimum(look(fk, is_f & (stage > 0), key - width), look(fk, is_ib, key)), look(ibk, is_w, key))
    d2 = look(ibk, is_ib & (stage < last), key + width)
    if missing:
        return None
    return o, rank, unit, d1, d2


def _steps_by_arrays(rank: Any, ops: list[str], op: Any, stage: Any, mb: Any, start_s: Any) -> tuple[Any, Any] | None:
    """:func:`unit_steps` of actions given as columns (numpy, one entry per action; ``op`` codes into ``ops``):
    (start step, end step) int64 arrays, or None where the rules do not explain the order (an action whose
    dependency is not among the actions, two actions of one key, or a cycle), which the loop
    (:func:`_steps_by_loop`) places instead.

    With each rank's actions in timeline order, the start step of a rank's i-th action is
    t_i = max(t_{i−1} + u_{i−1}, D_i) (u its unit, D_i the latest end of its dependencies, 0 for none), so
    t_i = S_i + max(0, max_{j ≤ i} (D_j − S_j)) with S_i the units of the rank's actions before it: a running
    maximum per rank, given D. The dependency graph (each rank's order and the dependencies) is tested acyclic
    first (Kahn's sweep, ``schedsim.lower.checks._acyclic``); then, from t = S, each rank's steps are set from the
    latest ends of all ranks, rank after rank, in sweeps up the ranks and back down (Gauss–Seidel: F flows up the
    ranks, I/B down), until a sweep moves nothing. From below, every update stays at or under the longest path,
    so this ends at the longest path: the same steps as the Jacobi rounds of ``tests/oracle/unit_steps_rounds.py``
    (every rank from the last round's ends; as many rounds as the longest path crosses ranks, ~2p, each a pass
    over all actions), in a sweep per chunk or so (pp=32 m=512 v=4, 131,072 actions: 0.13 → ~0.04 CPU s)."""
    import numpy as np

    n = len(rank)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    got = _step_graph(rank, ops, op, stage, mb, start_s)
    if got is None:
        return None
    o, rank, unit, d1, d2 = got
    head = np.r_[True, rank[1:] != rank[:-1]]
    heads = np.flatnonzero(head)
    before = np.cumsum(unit) - unit
    s = before - before[heads][np.cumsum(head) - 1]  # units of the rank's actions before each
    at = np.arange(n)
    chain, h1, h2 = ~head, d1 < n, d2 < n
    from schedsim.lower.checks import _acyclic

    if not _acyclic(n, np.concatenate([at[chain] - 1, d1[h1], d2[h2]]),
                    np.concatenate([at[chain], at[h1], at[h2]])):
        return None
    t = s.copy()
    end = np.zeros(n + 1, np.int64)  # end[n] = 0: "no dependency"
    np.add(t, unit, out=end[:n])
    bounds = np.append(heads, n).tolist()
    segs = list(zip(bounds[:-1], bounds[1:], strict=True))
    sweep = segs + segs[::-1]
    moved = True
    while moved:
        moved = False
        for a, b in sweep:
            ready = np.maximum(end[d1[a:b]], end[d2[a:b]])
            ready -= s[a:b]
            np.maximum.accumulate(ready, out=ready)
            np.maximum(ready, 0, out=ready)
            ready += s[a:b]
            if not np.array_equal(ready, t[a:b]):
                t[a:b] = ready
                np.add(ready, unit[a:b], out=end[a:b])
                moved = True
    a_, b_ = np.empty(n, np.int64), np.empty(n, np.int64)
    a_[o], b_[o] = t, end[:n]
    return a_, b_


def _steps_by_loop(spans: list[Span]) -> dict[str, tuple[int, int]]:
    """:func:`unit_steps` by replaying each rank's queue in Python (any order: where no rank can go on, the next
    action of the first blocked rank is placed anyway)."""
    stages = [int(s.tags["stage"]) for s in spans]
    last = max(stages) if stages else 0
    queues: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        queues[s.rank].append(s)
    for q in queues.values():
        q.sort(key=lambda s: s.start_s)

    def deps(op: str, st: int, mb: int) -> tuple[tuple[str, int, int], ...]:
        if op == "F":
            return (("F", st - 1, mb),) if st > 0 else ()
        if op in ("I", "B"):
            return (("F", st, mb), ("IB", st + 1, mb)) if st < last else (("F", st, mb),)
        return (("IB", st, mb),)

    # per rank, its actions in order as (id, key, dependencies, steps, I or B): made once, read at every visit
    acts = {r: [(s.id, (s.kind, int(s.tags["stage"]), int(s.tags["mb"])),
                 deps(s.kind, int(s.tags["stage"]), int(s.tags["mb"])), UNIT.get(s.kind, 1), s.kind in ("I", "B"))
                for s in q] for r, q in queues.items()}
    done: dict[tuple[str, int, int], int] = {}
    out: dict[str, tuple[int, int]] = {}
    free = dict.fromkeys(queues, 0)
    pos = dict.fromkeys(queues, 0)
    remaining = len(spans)
    force = False
    while remaining:
        progress = False
        for r, todo in acts.items():
            p, t = pos[r], free[r]
            while p < len(todo):
                sid, key, dk, unit, ib = todo[p]
                t0 = t
                blocked = False
                for d in dk:
                    x = done.get(d)
                    if x is None:
                        blocked = True
                    elif x > t0:
                        t0 = x
                if blocked and not force:
                    break
                t = t0 + unit
                out[sid] = (t0, t)
                done[key] = t
                if ib:
                    done[("IB", key[1], key[2])] = t
                p += 1
                remaining -= 1
                progress = True
                force = False
            pos[r], free[r] = p, t
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
    import numpy as np

    info = tl.pipeline
    lanes = lanes if lanes is not None else pipeline_lanes(tl, max_lanes)
    shown, acts, note = lanes.shown, lanes.actions, lanes.note
    n_act = len(acts.rank)
    yv = np.searchsorted(np.asarray(shown, np.int64), acts.rank)  # each box's lane
    xmax: float
    if mode == "steps":
        got = _steps_by_arrays(acts.rank, acts.ops, acts.op, acts.stage, acts.mb, acts.start_s)
        if got is None:  # an order the rules do not explain: the loop places it
            spans = acts.spans()
            steps = _steps_by_loop(spans)
            got = (np.array([steps[x.id][0] for x in spans], np.int64),
                   np.array([steps[x.id][1] for x in spans], np.int64))
        xa, xb = got[0].astype(float), got[1].astype(float)
        xmax = max(int(got[1].max()) if n_act else 0, 1)
    else:
        xa, xb = acts.start_s * 1e3, acts.end_s * 1e3
        xmax = tl.makespan_s * 1e3
    n = len(shown)
    width_px_per_unit = 15.0
    width_in = 12.0 if mode == "time" else max(8.0, min(36.0, xmax * width_px_per_unit / _DPI / 0.78 + 2.0))
    unit_px = width_in * _DPI * 0.78 / max(xmax * 1.02, 1e-9)
    s2r = info.stage_to_rank if info is not None else {}
    stride = info.rank_stride if info is not None else 1
    lane_labels = [f"rank {r}" + (f" (stage {_stages_of(s2r, r // stride)})" if s2r else "") for r in shown]
    # the lane labels' margin: 1.4 in, or the longest label at 7 pt (at most 0.062 in a character: DejaVu Sans'
    # widest digit, 0.636 em) and the tick's 0.2 in; the figure widens by as much, the plot area stays as it was
    left_in = max(1.4, 0.2 + 0.062 * max((len(t) for t in lane_labels), default=0))
    width_in += left_in - 1.4
    top_in = 0.35 + (_title_pad(1) + 12) / 72
    fig = _fig(width_in, 0.42 * n + top_in + 0.7)
    ax = fig.add_subplot(111)
    # one style per (action, chunk), in order of first use (the legend's entries and the draw order)
    chunk = acts.chunk_numbers()
    # (action, chunk) pairs as one int64 key in the same (action, chunk) order: a 1-D unique, not one over axis 1
    ch0 = chunk - (int(chunk.min()) if n_act else 0)
    _u, first, combo = unique(acts.op * (int(ch0.max()) + 1 if n_act else 1) + ch0)
    combo = combo.reshape(-1)
    used: dict[str, str] = {}
    colour_id: dict[str, int] = {}
    cid = np.zeros(len(first), np.int64)
    white = np.zeros(len(first), bool)  # the label colour: white on a first chunk's box, else black
    for g in np.argsort(first, kind="stable").tolist():
        op, ch = acts.ops[int(acts.op[first[g]])], int(chunk[first[g]])
        c = _color(op) if ch == 0 else _lighten(_color(op), min(0.66, 0.22 * ch))
        used.setdefault(op if not ch else f"{op} (chunk {ch})", c)
        cid[g] = colour_id.setdefault(c, len(colour_id))
        white[g] = ch == 0
    colours = list(colour_id)
    box_c = cid[combo]
    # one collection (or raster strip) per (lane, colour), in order of first use
    raster = _box_raster(ax) if n_act > RASTER_MIN_BOXES else None
    gkey = yv * max(1, len(colours)) + box_c
    _u, gfirst, ginv = unique(gkey)
    counts = np.bincount(ginv, minlength=len(gfirst))
    perm = np.argsort(ginv.reshape(-1), kind="stable")
    ends = np.cumsum(counts)
    for g in np.argsort(gfirst, kind="stable").tolist():
        rows = perm[ends[g] - counts[g]:ends[g]]
        x0, w = xa[rows], xb[rows] - xa[rows]
        o = np.lexsort((w, x0))
        x0, w = x0[o], w[o]
        y, c = int(yv[rows[0]]), colours[int(box_c[rows[0]])]
        wide = float(w.min()) * unit_px >= 4
        if not wide and raster is not None:
            raster.add(x0, w, y - 0.4, 0.8, c)
            continue
        if not wide:  # narrow boxes without edges: sub-pixel gaps closed, one box per solid run of pixels
            x0, w = _pixel_runs(x0, w, 1.0 / unit_px)
        _bars(ax, x0, w, y - 0.4, 0.8, facecolors=c, edgecolors="white" if wide else "none",
              linewidths=0.6 if wide else 0.0)
    # a label's font size: its box's pixels over the text's width at 1 pt, at most 8 pt; none under 4.5 pt
    items: list[tuple[float, float, str, float, str]] = []
    if n_act:
        mvals, _first, minv = unique(acts.mb)
        texts = [str(v) for v in mvals.tolist()]
        chars = np.array([len(t) for t in texts])[minv.reshape(-1)]
        fs = np.minimum(8.0, (xb - xa) * unit_px * 0.85 * 72 / (0.62 * chars * _DPI))
        for k in np.flatnonzero(fs >= 4.5).tolist():
            items.append(((xa[k] + xb[k]) / 2, int(yv[k]), texts[int(minv[k])], float(fs[k]),
                          "white" if white[combo[k]] else "black"))
    _centred_labels(ax, items)
    _lane_ticks(ax, lane_labels, 7)
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
    handles = [Patch(facecolor=c, label=k)
               for k, c in sorted(used.items(), key=lambda kv: ("FBIW".find(kv[0][0]), kv[0]))]
    _legend(ax, handles)
    _title(ax, _cut(title, 200) + note, 1)
    h = fig.get_figheight()
    fig.subplots_adjust(left=left_in / width_in, right=1 - 1.25 / width_in, top=1 - top_in / h, bottom=0.55 / h)
    return fig


#: From this many labels on, a chart's box labels are drawn by one :class:`_LabelSet` instead of a Text each.
LABEL_SET_MIN = 64

_LabelSet: Any = None


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


def _stages_of(s2r: dict[int, int], r: int) -> str:
    return ",".join(str(s) for s, rr in sorted(s2r.items()) if rr == r)


def _above(ax: Any, row: int) -> Any:
    from matplotlib.transforms import offset_copy

    return offset_copy(ax.transAxes, fig=ax.figure, x=0, y=3 + 11 * row, units="points")


def write_pipeline(path: str | Path, tl: Timeline, title: str = "", mode: str = "steps",
                   lanes: PipelineLanes | None = None) -> Path:
    """Draw :func:`draw_pipeline` and write it as PNG atomically."""
    return write_figure(draw_pipeline(tl, title, mode=mode, lanes=lanes), path)
