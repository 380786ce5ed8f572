"""Pipeline metrics of a timeline whose ops carry pipeline tags (``pp_op``, ``stage``, ``mb``, ``phase``).

* **Bubble ratio**, both conventions, per rank and overall:

  Here busy is the rank's busy compute (the union of its compute ops' intervals, ``RankMetrics.busy_compute_s``
  of :mod:`schedsim.sim.metrics`) and idle = makespan − busy its compute idle (``RankMetrics.compute_idle_s``),
  not ``RankMetrics.idle_s``, in which communication counts as busy (``docs/metrics.md``).

  - ``bubble_of_ideal`` = idle / ideal compute = (makespan − busy) / busy. With equal
    stage times this is the Megatron paper's (p−1)/m, or (p−1)/(v·m) interleaved
    (Narayanan et al., SC'21, arXiv 2104.04473, §2.2);
  - ``bubble_of_makespan`` = idle fraction of the makespan = 1 − busy / makespan,
    i.e. (p−1)/(m+p−1) for 1F1B (the sail-sg zero-bubble README convention).
    Overall = 1 − Σbusy / (p·makespan), the reference table's definition.

* **Peak activation memory** per rank: a forward of a chunk stores one unit from
  its start; the unit is freed when that chunk's backward finishes (B, or W when
  split), as in the ZB paper's accounting (arXiv 2401.10241). Reported in bytes
  (unit = ``activation_memory_bytes`` of the pipeline block; where the stages hold
  unequal layer counts each chunk weighs its own stage's
  ``stage_activation_memory_bytes`` and the peak is that of the bytes) and in
  microbatch units (chunks in flight / v, whatever their bytes), with the
  memory-over-time steps. Under full recomputation (``PipelineInfo.recompute_group_layers``) the bytes also
  hold each checkpointed group's re-run forward, from its first recompute op until the group's backward ends
  (:func:`recompute_events`); the microbatch units do not count it.
* **p2p volume** per rank: bytes sent and received.

The result is a :class:`PipelineMetrics`; :func:`pipeline_metrics` returns its JSON form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schedsim.graph.info import PipelineInfo
from schedsim.results import from_dict, to_dict
from schedsim.sim.timeline import Categorical, SpanColumns, Timeline

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["pipeline_metrics", "PipelineMetrics", "Bubble", "P2PBytes"]


@dataclass(frozen=True)
class Bubble:
    """A bubble ratio (fraction) per rank and ``overall``, in one of the two conventions above."""

    per_rank: dict[int, float]
    overall: float


@dataclass(frozen=True)
class P2PBytes:
    """Bytes one rank sent and received by pipeline send/recv."""

    sent: float
    recv: float


@dataclass(frozen=True)
class PipelineMetrics:
    """Pipeline metrics of a timeline (module docstring for the definitions).

    ``info`` is the pipeline block the timeline ran (:attr:`Timeline.pipeline
    <schedsim.sim.timeline.Timeline.pipeline>`: schedule, p, v, m, ``activation_memory_bytes``, ...);
    ``peak_memory_units`` in microbatch units and
    ``peak_memory_bytes`` per rank; ``memory_timeline`` per rank as [(t_s, units)] steps;
    ``p2p_bytes`` per rank.
    """

    info: PipelineInfo
    bubble_of_ideal: Bubble
    bubble_of_makespan: Bubble
    peak_memory_units: dict[int, float]
    peak_memory_bytes: dict[int, float]
    memory_timeline: dict[int, list[tuple[float, float]]] = field(default_factory=dict, kw_only=True)
    p2p_bytes: dict[int, P2PBytes]

    @classmethod
    def of(cls, tl: Timeline, classes: Sequence[int] | np.ndarray | None = None, *,
           memory_timeline: bool = True) -> PipelineMetrics | None:
        """Compute the pipeline metrics of ``tl``, or None when it has no pipeline (``meta["pipeline"]``).
        ``classes``: as :meth:`schedsim.sim.metrics.Metrics.of` (every rank gets its representative's figures).
        Without ``memory_timeline`` its per-rank steps are not made (left empty; the peaks are the same): what
        ``predict`` keeps, as ``timeline.meta["memory"]`` holds the curve."""
        return _compute(tl, classes, memory_timeline)

    def to_dict(self, *, memory_timeline: bool = True) -> dict[str, Any]:
        """The JSON form; without ``memory_timeline`` the per-rank steps are left out (as ``timeline.json``'s
        ``metrics.pipeline`` has it: ``meta.memory`` holds the curve)."""
        d: dict[str, Any] = to_dict(self)
        if not memory_timeline:
            del d["memory_timeline"]
        if not self.info.stage_activation_memory_bytes:  # even stages: the info as before the field
            d["info"].pop("stage_activation_memory_bytes", None)
        for k in ("recompute_group_layers", "recompute_layer_bytes"):  # no full recompute: as before the fields
            if not d["info"].get(k):
                d["info"].pop(k, None)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PipelineMetrics:
        """Read :meth:`to_dict`'s form back (rank keys may be JSON strings; a missing ``memory_timeline``
        reads as empty).

        Raises
        ------
        KeyError
            A required key is missing.
        """
        return from_dict(cls, d)


def pipeline_metrics(tl: Timeline) -> dict[str, Any] | None:
    """``PipelineMetrics.of(tl).to_dict()``, or None when the timeline has no pipeline ops.

    Returns
    -------
    dict
        ``bubble_of_ideal`` and ``bubble_of_makespan`` (per rank dicts and
        ``overall``), ``peak_memory_units`` / ``peak_memory_bytes`` per rank,
        ``memory_timeline`` per rank as [(t_s, units)], ``p2p_bytes`` per rank
        {"sent", "recv"}, and the pipeline ``info`` (schedule, p, v, m, ...).
    """
    pm = PipelineMetrics.of(tl)
    return None if pm is None else pm.to_dict()


def tag_ints(c: SpanColumns, key: str, missing: int = -1) -> NDArray[np.int64]:
    """Per row of the span columns ``c``, its tag ``key`` as an int (``int(value)``), or ``missing`` where the
    row has no such tag or its value is None (int64 array of shape (N,))."""
    import numpy as np

    values, codes = c.tag_column(key)
    table = np.array([missing if v is None else int(v) for v in values] + [missing], np.int64)
    return table[codes]  # code -1 takes the last entry: missing


def tag_is(c: SpanColumns, key: str, value: str) -> NDArray[np.bool_]:
    """Per row of the span columns ``c``, whether its tag ``key`` equals ``value`` (bool array)."""
    import numpy as np

    values, codes = c.tag_column(key)
    hit = np.array([v == value for v in values] + [False], bool)
    return hit[codes]


def code_is(cat: Categorical, *names: str) -> NDArray[np.bool_]:
    """Per row of the categorical column ``cat`` (``(values, codes)``), whether its value is one of ``names``."""
    import numpy as np

    values, codes = cat
    hit = np.array([v in names for v in values] + [False], bool)
    return hit[codes]


#: A lowered training op's layer and whether it is a recomputed forward op: ``...l<k>.re_<op>`` / ``...l<k>.<op>``
#: (:func:`schedsim.lower.training.stage_lists`' names).
_LAYER_OP = r"(?:^|\.)l(\d+)\.(re_)?"


def recompute_events(tl: Timeline) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
                                            NDArray[np.float64], NDArray[np.int64]] | None:
    """The re-run forwards of full recomputation, one per (rank, stage, mb, chunk, checkpointed group): ``(rank,
    start s, end s, bytes, row)``, arrays of one length; None when the timeline's pipeline info has no
    ``recompute_group_layers`` or no op re-runs a forward.

    A group is layers ``[g·k, g·k + k)`` of its chunk (k = ``recompute_group_layers``; Megatron-LM
    ``transformer_block.py`` ``_checkpointed_forward``: ``uniform`` checkpoints groups of ``recompute_num_layers``
    layers, ``block`` each of the first ``recompute_num_layers`` layers alone). Of the compute rows of phase I
    tagged with a stage, those named ``l<k>.re_<op>`` re-run layer k's forward: the group's activations,
    ``recompute_layer_bytes`` for each of its layers that re-runs, are allocated at the earliest start of its
    re-run rows (``row``: the first of them at that start) and freed at the latest end of the group's phase-I
    rows, its backward (Megatron-LM ``tensor_parallel/random.py`` ``CheckpointFunction.backward``: the forward
    again under ``enable_grad``, then ``torch.autograd.backward`` through it, which frees them)."""
    info = tl.pipeline
    if info is None or info.recompute_group_layers <= 0 or not info.recompute_layer_bytes:
        return None
    import re

    import numpy as np

    c = tl.columns
    rows = np.flatnonzero(code_is(c.resource, "compute") & (c.tag_column("stage")[1] >= 0)
                          & tag_is(c, "phase", "I"))
    if not len(rows):
        return None
    pat = re.compile(_LAYER_OP)
    hits = [pat.search(n) for n in (c.name[i] for i in rows.tolist())]
    found = np.array([h is not None for h in hits], bool)
    layer = np.array([int(h.group(1)) if h is not None else -1 for h in hits], np.int64)
    is_re = np.array([h is not None and h.group(2) is not None for h in hits], bool)
    rows, layer, is_re = rows[found], layer[found], is_re[found]
    if not is_re.any():
        return None
    rank = c.rank.astype(np.int64)[rows]
    key = (rank, tag_ints(c, "stage")[rows], tag_ints(c, "mb")[rows], tag_ints(c, "chunk", 0)[rows],
           layer // info.recompute_group_layers)
    order, starts = group_of(*key)
    rows, layer, is_re = rows[order], layer[order], is_re[order]
    t0 = np.minimum.reduceat(np.where(is_re, c.start_s[rows], np.inf), starts)
    t1 = np.maximum.reduceat(c.end_s[rows], starts)
    # the layers of each group that re-run: distinct (group, layer) pairs among its re-run rows
    lo, ls = group_of(np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(rows)])), layer,
                      (~is_re).astype(np.int64))
    g_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(rows)]))[lo][ls]
    n_re = np.bincount(g_of[is_re[lo][ls]], minlength=len(starts))
    # the row charged: the first re-run row at the earliest start (rows are in row order within a group)
    at = np.where(is_re & (c.start_s[rows] == np.repeat(t0, np.diff(np.r_[starts, len(rows)]))),
                  np.arange(len(rows)), len(rows))
    first = np.minimum.reduceat(at, starts)
    keep = n_re > 0
    return (key[0][order][starts][keep], t0[keep], t1[keep],
            n_re[keep].astype(np.float64) * float(info.recompute_layer_bytes), rows[first[keep]])


def group_of(*cols: np.ndarray) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Rows grouped by equal tuples of the int arrays ``cols`` (all of one length): ``(order, starts)``, the
    rows sorted by the tuple (ties in row order) and the position in ``order`` where each group starts."""
    import numpy as np

    order = np.lexsort(cols[::-1])
    same = np.ones(len(order), bool)  # the row's tuple equals the one before it
    same[:1] = False
    for col in cols:
        s = col[order]
        same[1:] &= s[1:] == s[:-1]
    return order, np.flatnonzero(~same)


def _compute(tl: Timeline, classes: Sequence[int] | np.ndarray | None = None,
             memory_timeline: bool = True) -> PipelineMetrics | None:
    """The metrics as columns: busy compute per rank as a union (:func:`schedsim.arrays.union_by_group`),
    p2p bytes by ``np.bincount`` (which adds the rows in row order, as the per-row definition in
    ``tests/sim/test_pipeline_metrics_columns.py`` does, so the floats are the same), the
    forward starts and W ends per (rank, stage, mb) by grouping, and each rank's memory steps as a cumulative
    sum in the definition's event order (time, frees before allocations)."""
    import numpy as np

    info = tl.pipeline
    if info is None:
        return None
    v = info.v
    unit_bytes = float(info.activation_memory_bytes)
    makespan = tl.makespan_s
    c = tl.columns
    rank = c.rank.astype(np.int64)
    start, end = c.start_s, c.end_s
    nr = int(rank.max()) + 1 if len(rank) else 0
    pp = c.tag_column("pp_op")[1] >= 0
    send = pp & code_is(c.kind, "send")
    recv = pp & code_is(c.kind, "recv") & ~send
    comp = code_is(c.resource, "compute") & ~send & ~recv
    from schedsim.arrays import union_by_group

    busy = union_by_group(rank[comp], start[comp], end[comp], nr)  # busy compute, as Metrics has it
    sent = np.bincount(rank[send], weights=c.bytes[send], minlength=nr)
    got = np.bincount(rank[recv], weights=c.bytes[recv], minlength=nr)
    stage, mb = tag_ints(c, "stage"), tag_ints(c, "mb")
    staged = pp & ~send & ~recv & (c.tag_column("stage")[1] >= 0) & (mb != -1)
    fwd = np.flatnonzero(staged & tag_is(c, "phase", "F"))
    wgt = np.flatnonzero(staged & tag_is(c, "phase", "W"))
    # one row per (rank, stage, mb) seen in a forward or a W: its first forward start and its last W end
    rows = np.concatenate([fwd, wgt])
    is_f = np.concatenate([np.ones(len(fwd), bool), np.zeros(len(wgt), bool)])
    order, starts = group_of(rank[rows], stage[rows], mb[rows])
    rows, is_f = rows[order], is_f[order]
    t_f = np.where(is_f, start[rows], np.inf)
    t_w = np.where(is_f, -np.inf, end[rows])
    first_f = np.minimum.reduceat(t_f, starts) if len(rows) else t_f
    last_w = np.maximum.reduceat(t_w, starts) if len(rows) else t_w
    has_f = np.isfinite(first_f)
    has_w = has_f & np.isfinite(last_w)
    key_rank = rank[rows[starts]]
    ev_rank = np.concatenate([key_rank[has_f], key_rank[has_w]])
    ev_t = np.concatenate([first_f[has_f], last_w[has_w]])
    ev_d = np.concatenate([np.ones(int(has_f.sum()), np.int64), -np.ones(int(has_w.sum()), np.int64)])
    o = np.lexsort((ev_d, ev_t, ev_rank))  # per rank by (time, delta): frees before allocations at a tie
    cur_b = None
    rc = recompute_events(tl)
    if info.stage_activation_memory_bytes or rc is not None:  # each key weighs its own stage's bytes
        w = info.activation_memory_of(stage[rows[starts]])
        ev_w = np.concatenate([w[has_f], -w[has_w]])
        if rc is None:
            cur_b = np.cumsum(ev_w[o])
            b_bounds = np.searchsorted(ev_rank[o], np.arange(nr + 1))
        else:  # and each re-run group its bytes from its recompute to its backward's end (recompute_events)
            b_rank = np.concatenate([ev_rank, rc[0], rc[0]])
            b_w = np.concatenate([ev_w, rc[3], -rc[3]])
            ob = np.lexsort((b_w > 0, np.concatenate([ev_t, rc[1], rc[2]]), b_rank))  # frees first at a tie
            cur_b = np.cumsum(b_w[ob])
            b_bounds = np.searchsorted(b_rank[ob], np.arange(nr + 1))
    ev_rank, ev_t, cur = ev_rank[o], ev_t[o], np.cumsum(ev_d[o])
    bounds = np.searchsorted(ev_rank, np.arange(nr + 1))
    if len(rank) < 2 or bool((rank[1:] >= rank[:-1]).all()):  # rows by rank (a simulated timeline's): no list of
        # every row's rank; the distinct ranks ascending, their order of first row, make the set that one makes
        ranks = set(np.flatnonzero(np.bincount(rank, minlength=nr)).tolist())
    else:
        ranks = set(rank.tolist())
    peak_units: dict[int, float] = {}
    peak_bytes: dict[int, float] = {}
    mem_tl: dict[int, list[tuple[float, float]]] = {}
    for r in sorted(ranks):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        level = cur[lo:hi] - (cur[lo - 1] if lo else 0)
        peak_units[r] = max(0, int(level.max()) if hi > lo else 0) / v
        if cur_b is None:  # every stage's chunk stores unit_bytes
            peak_bytes[r] = peak_units[r] * v * unit_bytes
        else:
            lo_b, hi_b = int(b_bounds[r]), int(b_bounds[r + 1])
            level_b = cur_b[lo_b:hi_b] - (cur_b[lo_b - 1] if lo_b else 0.0)
            peak_bytes[r] = max(0.0, float(level_b.max()) if hi_b > lo_b else 0.0)
        if memory_timeline:
            mem_tl[r] = [(0.0, 0.0), *zip(ev_t[lo:hi].tolist(), (level / v).tolist(), strict=True)]
    b, s_l, g_l = busy.tolist(), sent.tolist(), got.tolist()
    if classes is not None:  # a symmetric run: each rank of the world with its representative's figures
        rep = np.asarray(classes, np.int64).tolist()
        ranks = set(range(len(rep)))
        b, s_l, g_l = ([x[k] for k in rep] for x in (b, s_l, g_l))
        peak_units = {r: peak_units[k] for r, k in enumerate(rep)}
        peak_bytes = {r: peak_bytes[k] for r, k in enumerate(rep)}
        mem_tl = {r: mem_tl[k] for r, k in enumerate(rep)} if memory_timeline else {}
    per_ideal = {r: ((makespan - b[r]) / b[r] if b[r] > 0 else 0.0) for r in sorted(ranks)}
    per_mk = {r: (1 - b[r] / makespan if makespan > 0 else 0.0) for r in sorted(ranks)}
    tot_busy = sum(b[r] for r in ranks)  # in the set's order, as the per-row definition adds them
    n = len(ranks)
    return PipelineMetrics(
        info=info,
        bubble_of_ideal=Bubble(per_ideal, (n * makespan - tot_busy) / tot_busy if tot_busy > 0 else 0.0),
        bubble_of_makespan=Bubble(per_mk, 1 - tot_busy / (n * makespan) if makespan > 0 else 0.0),
        peak_memory_units=peak_units,
        peak_memory_bytes=peak_bytes,
        memory_timeline=mem_tl,
        p2p_bytes={r: P2PBytes(s_l[r], g_l[r]) for r in sorted(ranks)},
    )
