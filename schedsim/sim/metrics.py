"""Metrics of a timeline (predicted, executed or imported alike).

Definitions (per rank, then summed or averaged over ranks):

* **makespan**: latest end − earliest start.
* **busy compute / busy communication / busy copy**: length of the union of
  that resource's intervals (so concurrent kernels are not double counted).
* **idle**: makespan − length of the union of all intervals.
* **exposed communication**: time when communication runs and no compute does
  (union(comm) minus union(compute)).
* **overlap ratio**: |union(comm) ∩ union(compute)| / |union(comm)|, the share of
  communication time hidden under compute. This is HTA's definition
  (facebookresearch/HolisticTraceAnalysis ``communication_analysis.py``); as in HTA
  (``hta/utils/utils.py``, ``get_kernel_type``: NCCL kernels are COMMUNICATION, Memcpy/Memset MEMORY), copies
  are not communication: 0 where a rank has no communication (tables print "–").
* **copy overlap**: |union(copy) ∩ union(compute)| / |union(copy)|, the same for copies (offload: h2d/d2h
  hidden under GEMMs); None where a rank has no copies.
* **critical path**: :func:`critical_path_segments`, the path's ops and what it waited for between them
  (host issue, an event wait, SMs, a peer, a copy engine), contiguous from the timeline's start to its end,
  so its segments sum to the makespan; ``critical_path_s`` sums them by kind, and :func:`critical_path_host`
  names the host calls before the path's first op.

``docs/metrics.md`` gives every definition with its formula; the summary table, ``timeline.json``'s
``metrics``, ``analyze`` and the charts all read them from here.

:func:`compute_metrics` works on the timeline's columns with numpy: the rows grouped by (rank, resource) with
a radix sort and each group sorted by start unless it already is (one stream's ops are), then each union is a
running maximum of the ends (:func:`merged`: an interval opens a new piece when it starts after every earlier one
has ended; the union of all resources is that of their pieces) and each intersection a binary search of one piece
list in the other (:func:`pieces_intersection`). The list functions :func:`merge`, :func:`length` and
:func:`intersect_length` are the reference they are tested against.

The result is a :class:`Metrics` (one :class:`RankMetrics` per rank); ``Metrics.to_dict()`` is the
``metrics`` object of ``timeline.json`` and :func:`compute_metrics` returns that JSON form directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from schedsim.results import OMIT_NONE, from_dict, to_dict
from schedsim.sim.pipeline_metrics import PipelineMetrics
from schedsim.sim.timeline import Timeline

if TYPE_CHECKING:
    import numpy as np

__all__ = ["merge", "merge_per_group", "length", "intersect_length", "merged", "union_length", "pieces_intersection",
           "compute_metrics", "Metrics", "RankMetrics", "MemoryPeak", "PathSegment", "critical_path_segments",
           "critical_path_host", "SEGMENT_KINDS", "SEGMENT_LABELS", "union_by_group"]

Interval = tuple[float, float]


def merge(iv: list[Interval]) -> list[Interval]:
    """Union of intervals as a sorted list of disjoint intervals.

    Examples
    --------
    >>> merge([(0, 2), (1, 3), (5, 6)])
    [(0, 3), (5, 6)]
    """
    out: list[Interval] = []
    for a, b in sorted(iv):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def merge_per_group(group: Any, start: Any, end: Any) -> tuple[Any, Any, Any]:
    """Per group, the union of the intervals [start_i, end_i) as :func:`merge` gives it (touching ones joined,
    empty ones dropped; the same floats): ``(group, start, end)`` arrays (shape (k,)) of the merged pieces,
    sorted by group, then start. One sort, and one running maximum per group.

    >>> import numpy as np
    >>> g, s, e = merge_per_group(np.array([1, 0, 0, 0]), np.array([0.0, 1.0, 0.0, 5.0]),
    ...                           np.array([9.0, 3.0, 2.0, 6.0]))
    >>> g.tolist(), s.tolist(), e.tolist()
    ([0, 0, 1], [0.0, 5.0, 0.0], [3.0, 6.0, 9.0])
    """
    import numpy as np

    keep = end > start
    group, start, end = group[keep], start[keep], end[keep]
    o = np.lexsort((end, start, group))
    group, start, end = group[o], start[o], end[o]
    if not len(group):
        return group, start, end
    heads = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    reach = np.empty_like(end)
    for a, b in zip(heads.tolist(), [*heads[1:].tolist(), len(end)], strict=True):
        np.maximum.accumulate(end[a:b], out=reach[a:b])
    opens = np.r_[True, (group[1:] != group[:-1]) | (start[1:] > reach[:-1])]
    first = np.flatnonzero(opens)
    return group[first], start[first], reach[np.r_[first[1:] - 1, len(end) - 1]]


def length(iv: list[Interval]) -> float:
    """Total length of disjoint intervals."""
    return sum(b - a for a, b in iv)


def intersect_length(x: list[Interval], y: list[Interval]) -> float:
    """Length of the intersection of two merged interval lists.

    Examples
    --------
    >>> intersect_length([(0, 3)], [(2, 5)])
    1.0
    """
    i = j = 0
    tot = 0.0
    while i < len(x) and j < len(y):
        a = max(x[i][0], y[j][0])
        b = min(x[i][1], y[j][1])
        if b > a:
            tot += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return tot


Pieces = tuple["np.ndarray", "np.ndarray"]


def merged(start: np.ndarray, end: np.ndarray, *, presorted: bool = False) -> Pieces:
    """Union of the intervals [start_i, end_i) as disjoint pieces (starts, ends), both ascending; numpy's
    :func:`merge`.

    Parameters
    ----------
    start, end : numpy.ndarray
        float64 seconds, shape (n,). Intervals with end <= start are ignored, as in :func:`merge`;
        touching intervals join.
    presorted : bool
        ``start`` is already ascending (saves the sort).
    """
    import numpy as np

    keep = end > start
    if not keep.all():
        start, end = start[keep], end[keep]
    n = len(start)
    if n == 0:
        return start, end
    if not presorted:
        o = np.argsort(start, kind="stable")
        start, end = start[o], end[o]
    reach = np.maximum.accumulate(end)  # a piece closes where the next start is past every end so far
    opens = np.empty(n, dtype=bool)
    opens[0] = True
    np.greater(start[1:], reach[:-1], out=opens[1:])
    first = np.flatnonzero(opens)
    return start[first], reach[np.append(first[1:] - 1, n - 1)]


def union_length(start: np.ndarray, end: np.ndarray, *, presorted: bool = False) -> float:
    """Length of the union of the intervals [start_i, end_i) (see :func:`merged`), in their units.

    Examples
    --------
    >>> import numpy as np
    >>> union_length(np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0]))
    4.0
    """
    a, b = merged(start, end, presorted=presorted)
    return float((b - a).sum())


def union_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """Length of the union of the intervals [start_i, end_i) of each group (``group``: ints in 0 .. n-1, e.g.
    ranks), as a float64 array of shape (n,): :func:`union_length` per group, the rows sorted once.

    >>> import numpy as np
    >>> union_by_group(np.array([1, 0, 1]), np.array([0.0, 1.0, 1.0]), np.array([2.0, 2.0, 3.0]), 2).tolist()
    [1.0, 3.0]
    """
    import numpy as np

    out = np.zeros(n, np.float64)
    if not len(group):
        return out
    o = np.lexsort((start, group))
    g, s, e = group[o], start[o], end[o]
    bounds = np.searchsorted(g, np.arange(n + 1))
    for k in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
        a, b = int(bounds[k]), int(bounds[k + 1])
        out[k] = union_length(s[a:b], e[a:b], presorted=True)
    return out


def pieces_intersection(x: Pieces, y: Pieces) -> float:
    """Length of the intersection of two :func:`merged` piece lists; numpy's :func:`intersect_length`.

    Each piece of ``x`` meets a contiguous run of ``y``'s pieces (found by binary search); the
    overlapping pairs, at most len(x) + len(y) of them, are summed.
    """
    import numpy as np

    (x0, x1), (y0, y1) = x, y
    if len(x0) == 0 or len(y0) == 0:
        return 0.0
    lo = np.searchsorted(y1, x0, side="right")  # first y piece ending after the x piece starts
    hi = np.searchsorted(y0, x1, side="left")  # first y piece starting at or after the x piece ends
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if total == 0:
        return 0.0
    xi = np.repeat(np.arange(len(x0)), counts)
    yi = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    over = np.minimum(x1[xi], y1[yi]) - np.maximum(x0[xi], y0[yi])
    return float(over[over > 0].sum())


#: The kinds of :class:`PathSegment`, in the order ``critical_path_s`` lists them: the three resources an op on the
#: path runs on, then what the path waited for (``docs/metrics.md``).
SEGMENT_KINDS = ("compute", "comm", "copy", "host_issue", "wait_dependency", "wait_sms", "wait_peer",
                 "wait_copy_engine", "gap")
#: How tables name each segment kind.
SEGMENT_LABELS = {"compute": "compute", "comm": "comm", "copy": "copy", "host_issue": "host issue",
                  "wait_dependency": "waiting for a dependency", "wait_sms": "waiting for SMs",
                  "wait_peer": "waiting for a peer", "wait_copy_engine": "waiting for a copy engine",
                  "gap": "unattributed gap"}


@dataclass(frozen=True)
class PathSegment:
    """One piece of the critical path: ``kind`` (one of :data:`SEGMENT_KINDS`), from ``start_s`` to ``end_s``
    (seconds), and the op it runs or waits for (``op``, its id)."""

    kind: str
    start_s: float
    end_s: float
    op: str


def _path_rows(tl: Timeline) -> np.ndarray:
    """Rows of :attr:`Timeline.critical_path`'s ops in path order (int64)."""
    import numpy as np

    order = tl.critical_path_order()
    if order is not None:
        return order
    rows = tl.critical_rows()
    pos = {op: k for k, op in enumerate(tl.critical_path)}
    ids = tl.columns.id
    return rows[np.argsort([pos[ids[i]] for i in rows.tolist()], kind="stable")]


def _segment_arrays(tl: Timeline, host_calls: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The critical path as segments, in arrays: ``(kind, start, end, row)``, kind an index into
    :data:`SEGMENT_KINDS` (int64), start/end in seconds, row the op's row (int64), in time order, zero-length
    segments included. See :func:`critical_path_segments` for the rules; ``host_calls=False`` keeps each wait for
    the host as one segment."""
    import numpy as np

    from schedsim.sim.engine import HOST_WAITS_META

    c = tl.columns
    rows = _path_rows(tl)
    t0 = min(0.0, float(c.start_s.min())) if len(c) else 0.0
    t_end = t0 + tl.makespan_s
    n = len(rows)
    k_res = {"compute": 0, "comm": 1, "copy": 2}
    res_vals, res_codes = c.resource
    res = np.array([k_res.get(v, 0) for v in res_vals] + [0], np.int64)[res_codes[rows]] if n else \
        np.zeros(0, np.int64)
    s, e = c.start_s[rows], c.end_s[rows]
    # covered: the time the path has reached before each op (the timeline's start, then the ends so far)
    cov = np.maximum.accumulate(np.concatenate(([t0], e)))
    a = cov[:-1]
    s = np.maximum(s, a)
    e = np.maximum(e, s)
    rd = c.ready_s[rows]
    known = ~np.isnan(rd)
    r = np.where(known, np.clip(np.where(known, rd, 0.0), a, s), a)
    host = np.zeros(n, bool)  # released by its host: the path's first op, and those after a host synchronisation
    host[:1] = True
    waits = tl.meta.get(HOST_WAITS_META) if isinstance(tl.meta, dict) else None
    if waits and n:
        ids, wset = c.id, set(waits)
        host |= np.fromiter((ids[i] in wset for i in rows.tolist()), bool, count=n)
    wait_in = np.where(host, 3, 4)  # up to ready: the host, else the dependency's event
    wait_ready = np.where(known, np.array([5, 6, 7], np.int64)[res], 8)  # ready to start: by resource; unknown: gap
    kind = np.stack([wait_in, wait_ready, res], axis=1).ravel()
    lo = np.stack([a, r, s], axis=1).ravel()
    hi = np.stack([r, s, e], axis=1).ravel()
    row = np.repeat(rows, 3)
    cut = np.flatnonzero(host & (r > a)) if host_calls and n else np.zeros(0, np.int64)
    calls = _HostCalls(tl) if len(cut) else None
    if calls is not None and calls.known:  # each wait for the host: the host's calls in it, one segment each
        parts: list[tuple[np.ndarray, ...]] = []
        at = 0
        for k in cut.tolist():
            h_row, h_lo, h_hi = calls.between(int(rows[k]), float(a[k]), float(r[k]))
            parts.append((kind[at:3 * k], lo[at:3 * k], hi[at:3 * k], row[at:3 * k]))
            parts.append((np.full(len(h_row), 3, np.int64), h_lo, h_hi, h_row))
            at = 3 * k + 1
        parts.append((kind[at:], lo[at:], hi[at:], row[at:]))
        kind, lo, hi, row = (np.concatenate(x) for x in zip(*parts, strict=True))
    tail = cov[-1]
    if tail < t_end:  # the path ends before the timeline does (an imported chain): the rest is a gap
        kind, lo, hi = np.append(kind, 8), np.append(lo, tail), np.append(hi, t_end)
        row = np.append(row, rows[-1] if n else -1)
    return kind, lo, hi, row


class _HostCalls:
    """Each rank's host calls in issue order, from :attr:`Timeline.host_call_end_s` (when each op's call
    returned: rule 1 of :mod:`schedsim.sim.gpu_model`, or a replay's issue times); ``known`` is False where
    they are unknown, and for a CUDA graph replay (one launch call for every op: a wait stays one segment)."""

    def __init__(self, tl: Timeline) -> None:
        import numpy as np

        h = tl.host_call_end_s
        self.known = h is not None and len(h) == len(tl) and tl.launch != "cuda_graph"
        self.h = np.zeros(0) if h is None else np.asarray(h, np.float64)
        self.rank = tl.columns.rank
        self.per: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def between(self, x: int, lo: float, ready: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The host calls that row ``x`` (released by its host at ``ready``) waited for since ``lo``, as ``(rows,
        start, end)`` (int64, seconds, seconds): its rank's calls that returned after ``lo`` and before ``ready``,
        in issue order, each from the return of the call before it (``lo`` for the first) to its own (its
        ``host_s``, event waits, stream switch and the call), then ``x`` itself up to ``ready`` (its kernel's
        launch, part-way through its call). Contiguous from ``lo`` to ``ready``: the host issues its calls back
        to back between waits (rule 1: no host-blocking op; a replay's host synchronisation ends a wait, and
        the path then comes from the op it waited for, :func:`schedsim.sim.engine.critical_walk`)."""
        import numpy as np

        q = int(self.rank[x])
        got = self.per.get(q)
        if got is None:
            mine = np.flatnonzero(self.rank == q)
            mine = mine[np.argsort(self.h[mine], kind="stable")]  # the host's issue order (ties: program order)
            got = self.per[q] = (mine, self.h[mine])
        mine, hs = got
        i0, i1 = np.searchsorted(hs, lo, "right"), np.searchsorted(hs, ready, "left")
        sel, ends = mine[i0:i1], hs[i0:i1]
        keep = sel != x
        sel, ends = sel[keep], ends[keep]
        return (np.append(sel, x).astype(np.int64), np.concatenate(([lo], ends)), np.append(ends, ready))


def critical_path_segments(tl: Timeline) -> list[PathSegment]:
    """The critical path of ``tl`` as contiguous segments from the timeline's start to its end: their lengths
    sum to ``tl.makespan_s`` (to float rounding), zero-length segments left out.

    Each op of :attr:`Timeline.critical_path` (its ops in path order, each released by the one before it:
    the simulator's binding walk, :mod:`schedsim.sim.engine`) contributes, from where the path had reached:

    * ``host_issue`` (the path's first op, and an op its host launched after a host synchronisation that waited
      for the path's op before it: ``meta["critical_path_host_waits"]``, :func:`schedsim.sim.engine.critical_walk`)
      or ``wait_dependency`` (the others): until the op was ready (``ready_s``): its host call had not yet
      launched it (the walk leaves the GPU at an op its host released), or the cross-stream event wait of its
      dependency resolved later (rule 3, :mod:`schedsim.sim.gpu_model`). A wait for the host is cut into its
      rank's host calls in it, one ``host_issue`` segment each, named by the call's op
      (:attr:`Timeline.host_call_end_s`; one segment where it is unknown);
    * ``wait_sms`` (compute), ``wait_peer`` (communication: its group's other ranks and its NCCL kernel's
      SMs) or ``wait_copy_engine`` (copy): ready until it started;
    * its run, named by its resource (``compute``, ``comm``, ``copy``), until it ended.

    Where ``ready_s`` is unknown (imported timelines) the wait before an op is a ``gap``, as is any time after
    the path's last op (a chain that does not end at the makespan). Times in seconds; definitions in
    ``docs/metrics.md``.

    >>> from schedsim.sim.timeline import Span, Timeline
    >>> a = Span("a@r0", "a", 0, "s", "matmul", "compute", 1.0, 3.0, ready_s=0.5)
    >>> b = Span("b@r0", "b", 0, "c", "all_reduce", "comm", 4.0, 6.0, ready_s=3.5)
    >>> tl = Timeline("x", "predict", 1, spans=[a, b], critical_path=["a@r0", "b@r0"])
    >>> [(p.kind, p.start_s, p.end_s) for p in critical_path_segments(tl)]  # doctest: +NORMALIZE_WHITESPACE
    [('host_issue', 0.0, 0.5), ('wait_sms', 0.5, 1.0), ('compute', 1.0, 3.0), ('wait_dependency', 3.0, 3.5),
     ('wait_peer', 3.5, 4.0), ('comm', 4.0, 6.0)]
    """
    if not tl.critical_path or len(tl) == 0:
        return []
    kind, lo, hi, row = _segment_arrays(tl)
    keep = (hi > lo).nonzero()[0].tolist()
    ids = tl.columns.id
    kl, ll, hl, rl = kind.tolist(), lo.tolist(), hi.tolist(), row.tolist()
    return [PathSegment(SEGMENT_KINDS[kl[i]], ll[i], hl[i], ids[rl[i]]) for i in keep]


def critical_path_host(tl: Timeline) -> list[str]:
    """Ids of the host calls the critical path's first op waited for (its rank's ops issued before it, in issue
    order: the ``host_issue`` segments of :func:`critical_path_segments` before the first op's own); empty where
    the path starts on the GPU or the timeline does not know its host calls."""
    if not tl.critical_path or len(tl) == 0:
        return []
    kind, lo, hi, row = _segment_arrays(tl)
    k0 = int((kind != 3).argmax())  # the first segment past the first op's wait for its host
    first = int(row[k0])  # the path's first op: its own call is on the path already
    ids = tl.columns.id
    kind, lo, hi, row = kind[:k0], lo[:k0], hi[:k0], row[:k0]
    return [ids[i] for i in row[(kind == 3) & (hi > lo) & (row != first)].tolist()]


@dataclass(frozen=True)
class RankMetrics:
    """One rank's share of :class:`Metrics` (seconds, or fractions where named so).

    ``busy_*_s``: length of the union of that resource's intervals; ``idle_s``: makespan − union of all
    (nothing runs: not the pipeline bubble, which is makespan − busy compute); ``exposed_comm_s``:
    communication under no compute; ``overlap_ratio``: hidden share of communication (0 without any);
    ``copy_overlap_ratio``: hidden share of copies (None without any, and in files written before it);
    ``comm_share``: busy_comm / makespan; ``comm_share_kernel_view``: the same with each communication op
    counted from when its stream reached it (``ready_s``), as nsys shows an NCCL kernel spinning while its
    peer is late.
    """

    busy_compute_s: float
    busy_comm_s: float
    busy_copy_s: float
    idle_s: float
    exposed_comm_s: float
    overlap_ratio: float
    comm_share: float
    comm_share_kernel_view: float
    copy_overlap_ratio: float | None = None

    def compute_idle_s(self, makespan_s: float) -> float:
        """Seconds of ``makespan_s`` in which no compute runs on the rank (makespan − busy compute): the
        pipeline bubble's numerator (:mod:`schedsim.sim.pipeline_metrics`, ``bubble_of_makespan``)."""
        return makespan_s - self.busy_compute_s


@dataclass(frozen=True)
class MemoryPeak:
    """Where the memory curve peaks: ``rank``, ``bytes``, time ``t_s`` (seconds), and the op that starts
    there (``op``; None when the peak is at the start)."""

    rank: int
    bytes: float
    t_s: float
    op: str | None


@dataclass(frozen=True)
class Metrics:
    """Metrics of one timeline (module docstring for the definitions).

    ``ranks`` maps rank → :class:`RankMetrics`; ``busy_comm_s`` and ``exposed_comm_s`` are summed over
    ranks, ``overlap_ratio`` (and ``copy_overlap_ratio``, None without copies) is taken over all ranks;
    ``critical_path`` lists op ids and ``critical_path_s`` the time on it by segment kind (seconds; the
    resources its ops ran on and the waits, :func:`critical_path_segments`), which sums to the makespan (the
    host's calls before the path's first op: :func:`critical_path_host`).
    :func:`schedsim.api.simulate_spec` adds ``pipeline`` (pipeline schedules, without the memory steps) and
    ``memory_peak`` (when the memory curve applies); they are absent from the JSON form while None.

    >>> from schedsim.sim.timeline import Span, Timeline
    >>> tl = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 2.0)])
    >>> m = Metrics.of(tl)
    >>> m.makespan_s, m.ranks[0].busy_compute_s, list(m.to_dict())[:3]
    (2.0, 2.0, ['makespan_s', 'ops', 'busy_comm_s'])
    >>> Metrics.from_dict(m.to_dict()) == m
    True
    """

    makespan_s: float
    ops: int
    busy_comm_s: float
    exposed_comm_s: float
    overlap_ratio: float
    ranks: dict[int, RankMetrics]
    critical_path: list[str]
    critical_path_s: dict[str, float]
    pipeline: PipelineMetrics | None = field(default=None, metadata=OMIT_NONE)
    memory_peak: MemoryPeak | None = field(default=None, metadata=OMIT_NONE)
    copy_overlap_ratio: float | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, tl: Timeline) -> Metrics:
        """Compute the metrics of ``tl`` (``pipeline`` and ``memory_peak`` left None)."""
        return _compute(tl)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``timeline.json``'s ``metrics``): rank keys stay ints until JSON writes them."""
        d: dict[str, Any] = to_dict(replace(self, critical_path=[]))  # its op ids are strings: copied, not walked
        d["critical_path"] = list(self.critical_path)
        if self.pipeline is not None:
            d["pipeline"] = self.pipeline.to_dict(memory_timeline=False)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metrics:
        """Read :meth:`to_dict`'s form back (rank keys may be JSON strings).

        Raises
        ------
        KeyError
            A required key is missing.
        """
        return from_dict(cls, d)


def compute_metrics(tl: Timeline) -> dict[str, Any]:
    """``Metrics.of(tl).to_dict()``: the JSON form of :class:`Metrics`, as ``timeline.json`` stores it.

    Returns
    -------
    dict
        ``makespan_s``, ``ops``, ``busy_comm_s``, ``exposed_comm_s``, ``overlap_ratio``, ``ranks``
        ({rank: :class:`RankMetrics` fields}), ``critical_path``, ``critical_path_s``.
    """
    return Metrics.of(tl).to_dict()


def _compute(tl: Timeline) -> Metrics:
    """Makespan, per-rank busy/idle, exposed communication, overlap ratio, critical path (:class:`Metrics`)."""
    import numpy as np

    from schedsim.sim.gpu_model import stable_order

    makespan = tl.makespan_s
    c = tl.columns
    res_vals, res_codes = c.resource
    code = {name: (res_vals.index(name) if name in res_vals else -2) for name in ("compute", "comm", "copy")}
    # rows grouped by (rank, resource) in program order (a radix sort of small keys), then each group by start
    # (stable: ties stay in program order), where it is not in start order already (one stream's ops are): each
    # (rank, resource) is a contiguous, start-ordered slice, so the unions below take slices, not masks
    cls = np.full(len(res_vals) + 1, 3, np.int64)  # 0 compute, 1 comm, 2 copy, 3 anything else
    for k, name in enumerate(("compute", "comm", "copy")):
        if code[name] >= 0:
            cls[code[name]] = k
    gkey = c.rank.astype(np.int64) * 4 + cls[res_codes]
    order = stable_order(gkey)
    gkey, start = gkey[order], c.start_s[order]
    cuts = np.flatnonzero(gkey[1:] != gkey[:-1]) + 1
    gb = np.concatenate(([0], cuts, [len(gkey)])).tolist() if len(gkey) else [0]
    for a, b in zip(gb[:-1], gb[1:], strict=True):
        s = start[a:b]
        if b - a > 1 and not bool((s[1:] >= s[:-1]).all()):
            o = np.argsort(s, kind="stable")
            order[a:b] = order[a:b][o]
            start[a:b] = s[o]
    end, ready = c.end_s[order], c.ready_s[order]
    per: dict[int, dict[int, tuple[int, int]]] = {}  # rank -> resource -> its slice, ranks ascending
    for g, k in enumerate(gkey[gb[:-1]].tolist()):
        per.setdefault(k >> 2, {})[k & 3] = (gb[g], gb[g + 1])
    ranks: dict[int, RankMetrics] = {}
    tot_comm = tot_overlap = tot_exposed = tot_copy = tot_copy_ov = 0.0
    none = (0, 0)
    for r, groups in per.items():
        (a0, b0), (a1, b1), (a2, b2) = (groups.get(k, none) for k in range(3))
        comp = merged(start[a0:b0], end[a0:b0], presorted=True)
        comm = merged(start[a1:b1], end[a1:b1], presorted=True)
        copy = merged(start[a2:b2], end[a2:b2], presorted=True)
        lc = float((comm[1] - comm[0]).sum())
        ov = pieces_intersection(comm, comp)
        lcp = float((copy[1] - copy[0]).sum())
        ovc = pieces_intersection(copy, comp) if lcp > 0 else 0.0
        # the union of all three: of their pieces (the same pieces as of the intervals themselves)
        ps, pe = (np.concatenate(x) for x in zip(comp, comm, copy, strict=True))
        busy = union_length(ps, pe) if len(comm[0]) + len(copy[0]) else float((comp[1] - comp[0]).sum())
        # NCCL kernels occupy their stream from when it reaches them (ready) to the end of the transfer,
        # spinning while the peer is late; nsys shows that span as kernel time
        rd, sc = ready[a1:b1], start[a1:b1]
        kv = union_length(np.where(np.isnan(rd), sc, rd), end[a1:b1])
        ranks[r] = RankMetrics(
            busy_compute_s=float((comp[1] - comp[0]).sum()),
            busy_comm_s=lc,
            busy_copy_s=lcp,
            idle_s=makespan - busy,
            exposed_comm_s=lc - ov,
            overlap_ratio=ov / lc if lc > 0 else 0.0,
            comm_share=lc / makespan if makespan > 0 else 0.0,
            comm_share_kernel_view=kv / makespan if makespan > 0 else 0.0,
            copy_overlap_ratio=ovc / lcp if lcp > 0 else None,
        )
        tot_comm += lc
        tot_overlap += ov
        tot_exposed += lc - ov
        tot_copy += lcp
        tot_copy_ov += ovc
    cp_time: dict[str, float] = {}
    if tl.critical_path and len(tl):
        # the first op's wait for its host in one piece: the same sums, bit for bit, whether or not the timeline
        # knows its host calls (timeline.json does not keep them)
        kind, lo, hi, _row = _segment_arrays(tl, host_calls=False)
        sums = np.bincount(kind, weights=hi - lo, minlength=len(SEGMENT_KINDS))
        present = np.bincount(kind, minlength=len(SEGMENT_KINDS))
        # the resources the path's ops run on, and every wait that took time
        cp_time = {SEGMENT_KINDS[k]: float(sums[k]) for k in range(len(SEGMENT_KINDS))
                   if present[k] and (k < 3 or sums[k] > 0)}
    return Metrics(makespan_s=makespan, ops=len(tl), busy_comm_s=tot_comm, exposed_comm_s=tot_exposed,
                   overlap_ratio=tot_overlap / tot_comm if tot_comm > 0 else 0.0, ranks=ranks,
                   critical_path=list(tl.critical_path), critical_path_s=cp_time,
                   copy_overlap_ratio=tot_copy_ov / tot_copy if tot_copy > 0 else None)
