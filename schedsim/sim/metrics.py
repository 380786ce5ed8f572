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
  (facebookresearch/HolisticTraceAnalysis ``communication_analysis.py``).

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

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from schedsim.results import OMIT_NONE, from_dict, to_dict
from schedsim.sim.pipeline_metrics import PipelineMetrics
from schedsim.sim.timeline import Timeline

if TYPE_CHECKING:
    import numpy as np

__all__ = ["merge", "merge_per_group", "length", "intersect_length", "merged", "union_length", "pieces_intersection",
           "compute_metrics", "Metrics", "RankMetrics", "MemoryPeak"]

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


@dataclass(frozen=True)
class RankMetrics:
    """One rank's share of :class:`Metrics` (seconds, or fractions where named so).

    ``busy_*_s``: length of the union of that resource's intervals; ``idle_s``: makespan − union of all;
    ``exposed_comm_s``: communication under no compute; ``overlap_ratio``: hidden share of communication;
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
    ranks, ``overlap_ratio`` is taken over all ranks; ``critical_path`` lists op ids and
    ``critical_path_s`` the time on it by resource (seconds). :func:`schedsim.api.simulate_spec` adds
    ``pipeline`` (pipeline schedules, without the memory steps) and ``memory_peak`` (when the memory
    curve applies); they are absent from the JSON form while None.

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
    tot_comm = tot_overlap = tot_exposed = 0.0
    none = (0, 0)
    for r, groups in per.items():
        (a0, b0), (a1, b1), (a2, b2) = (groups.get(k, none) for k in range(3))
        comp = merged(start[a0:b0], end[a0:b0], presorted=True)
        comm = merged(start[a1:b1], end[a1:b1], presorted=True)
        copy = merged(start[a2:b2], end[a2:b2], presorted=True)
        lc = float((comm[1] - comm[0]).sum())
        ov = pieces_intersection(comm, comp)
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
            busy_copy_s=float((copy[1] - copy[0]).sum()),
            idle_s=makespan - busy,
            exposed_comm_s=lc - ov,
            overlap_ratio=ov / lc if lc > 0 else 0.0,
            comm_share=lc / makespan if makespan > 0 else 0.0,
            comm_share_kernel_view=kv / makespan if makespan > 0 else 0.0,
        )
        tot_comm += lc
        tot_overlap += ov
        tot_exposed += lc - ov
    cp_time: dict[str, float] = defaultdict(float)
    if tl.critical_path:
        rows = tl.critical_rows()
        if len(rows):
            dur = c.end_s[rows] - c.start_s[rows]
            sums = np.bincount(res_codes[rows], weights=dur, minlength=len(res_vals))
            present = np.bincount(res_codes[rows], minlength=len(res_vals))
            cp_time.update({res_vals[k]: float(sums[k]) for k in range(len(res_vals)) if present[k]})
    return Metrics(makespan_s=makespan, ops=len(tl), busy_comm_s=tot_comm, exposed_comm_s=tot_exposed,
                   overlap_ratio=tot_overlap / tot_comm if tot_comm > 0 else 0.0, ranks=ranks,
                   critical_path=list(tl.critical_path), critical_path_s=dict(cp_time))
