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

:func:`compute_metrics` works on the timeline's columns with numpy: one sort by (rank, start), then
each union is a running maximum of the ends (:func:`merged`: an interval opens a new piece when it
starts after every earlier one has ended) and each intersection a binary search of one piece list
in the other (:func:`pieces_intersection`). The list functions :func:`merge`, :func:`length` and
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

__all__ = ["merge", "length", "intersect_length", "merged", "union_length", "pieces_intersection", "compute_metrics",
           "Metrics", "RankMetrics", "MemoryPeak"]

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

    makespan = tl.makespan_s
    c = tl.columns
    res_vals, res_codes = c.resource
    code = {name: (res_vals.index(name) if name in res_vals else -2) for name in ("compute", "comm", "copy")}
    # one sort: by rank, then start; each rank's rows are then a contiguous, start-ordered slice
    rank = c.rank
    if len(rank) > 1 and bool((rank[1:] >= rank[:-1]).all()):  # ranks in order (a lowered program's are): the
        cuts = np.flatnonzero(np.diff(rank)) + 1  # same order by one stable sort of start per rank
        bd = [0, *cuts.tolist(), len(rank)]
        order = np.concatenate([a + np.argsort(c.start_s[a:b], kind="stable")
                                for a, b in zip(bd, bd[1:], strict=False)])
    else:
        order = np.lexsort((c.start_s, rank))
    rank, start, end, res = rank[order], c.start_s[order], c.end_s[order], res_codes[order]
    ready = c.ready_s[order]
    cuts = np.flatnonzero(np.diff(rank)) + 1
    bounds = zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(rank)])).tolist(), strict=False)
    ranks: dict[int, RankMetrics] = {}
    tot_comm = tot_overlap = tot_exposed = 0.0
    for a, b in bounds:
        if a == b:
            continue
        s, e, r = start[a:b], end[a:b], res[a:b]
        is_comp, is_comm, is_copy = r == code["compute"], r == code["comm"], r == code["copy"]
        comp = merged(s[is_comp], e[is_comp], presorted=True)
        comm = merged(s[is_comm], e[is_comm], presorted=True)
        lc = float((comm[1] - comm[0]).sum())
        ov = pieces_intersection(comm, comp)
        allm = is_comp | is_comm | is_copy
        # NCCL kernels occupy their stream from when it reaches them (ready) to the end of the transfer,
        # spinning while the peer is late; nsys shows that span as kernel time
        rd = ready[a:b][is_comm]
        kv = union_length(np.where(np.isnan(rd), s[is_comm], rd), e[is_comm])
        ranks[int(rank[a])] = RankMetrics(
            busy_compute_s=float((comp[1] - comp[0]).sum()),
            busy_comm_s=lc,
            busy_copy_s=union_length(s[is_copy], e[is_copy], presorted=True),
            idle_s=makespan - union_length(s[allm], e[allm], presorted=True),
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
