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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from schedsim.arrays import (  # re-exported
    intersect_length,
    length,
    merge,
    merge_per_group,
    merged,
    pieces_intersection,
    union_by_group,
    union_length,
    unique,
)
from schedsim.results import OMIT_NONE, from_dict, to_dict
from schedsim.sim.path_ids import PathIds
from schedsim.sim.pipeline_metrics import PipelineMetrics
from schedsim.sim.timeline import Timeline

if TYPE_CHECKING:
    import numpy as np

    from schedsim.sim.symmetry import Represented

__all__ = ["merge", "merge_per_group", "length", "intersect_length", "merged", "union_length", "pieces_intersection",
           "compute_metrics", "Metrics", "RankMetrics", "RankColumns", "MemoryPeak", "PathSegment",
           "critical_path_segments", "critical_path_host", "SEGMENT_KINDS", "SEGMENT_LABELS", "union_by_group",
           "represented", "represented_classes"]

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
    returned: rule host-issue of :mod:`schedsim.gpu.rules`, or a replay's issue times); ``known`` is False where
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
        to back between waits (rule host-issue: no host-blocking op; a replay's host synchronisation ends a wait, and
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
      dependency resolved later (rule wave-dispatch, :mod:`schedsim.gpu.rules`). A wait for the host is cut into its
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
    kl, ll, hl, rl = kind.tolist(), lo.tolist(), hi.tolist(), row.tolist()
    ids = tl.columns.ids_at([rl[i] for i in keep])  # the path's ids only, not the column of every op's
    return [PathSegment(SEGMENT_KINDS[kl[i]], ll[i], hl[i], op) for i, op in zip(keep, ids, strict=True)]


def critical_path_host(tl: Timeline) -> list[str]:
    """Ids of the host calls the critical path's first op waited for (its rank's ops issued before it, in issue
    order: the ``host_issue`` segments of :func:`critical_path_segments` before the first op's own); empty where
    the path starts on the GPU or the timeline does not know its host calls."""
    if not tl.critical_path or len(tl) == 0:
        return []
    kind, lo, hi, row = _segment_arrays(tl)
    k0 = int((kind != 3).argmax())  # the first segment past the first op's wait for its host
    first = int(row[k0])  # the path's first op: its own call is on the path already
    kind, lo, hi, row = kind[:k0], lo[:k0], hi[:k0], row[:k0]
    return tl.columns.ids_at(row[(kind == 3) & (hi > lo) & (row != first)].tolist())


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

    def to_dict(self) -> dict[str, Any]:
        """:func:`~schedsim.results.to_dict` of this rank's metrics: its fields are floats (or None), so it is one
        copy of them, in field order; a hundred thousand ranks are not walked field by field."""
        return dict(self.__dict__)

    def compute_idle_s(self, makespan_s: float) -> float:
        """Seconds of ``makespan_s`` in which no compute runs on the rank (makespan − busy compute): the
        pipeline bubble's numerator (:mod:`schedsim.sim.pipeline_metrics`, ``bubble_of_makespan``)."""
        return makespan_s - self.busy_compute_s


#: The fields of :class:`RankMetrics`, in order.
_RANK_FIELDS = ("busy_compute_s", "busy_comm_s", "busy_copy_s", "idle_s", "exposed_comm_s", "overlap_ratio",
                "comm_share", "comm_share_kernel_view", "copy_overlap_ratio")


class RankColumns(Mapping[int, RankMetrics]):
    """rank → :class:`RankMetrics` held as columns (what :meth:`Metrics.of` gives): a :class:`RankMetrics` is made
    only for a rank that is looked up, so a hundred thousand ranks cost a few arrays.

    ``ranks``: the ranks (int64, shape (R,), distinct; iterated in this order); ``cols``: per field of
    :class:`RankMetrics`, float64 values of shape (R,) (``copy_overlap_ratio``: NaN where the rank has none, None
    in its :class:`RankMetrics`). Equal to any mapping of the same items (a dict of :class:`RankMetrics`, as
    :meth:`Metrics.from_dict` reads).
    """

    __slots__ = ("ranks", "cols", "_pos")

    def __init__(self, ranks: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        self.ranks, self.cols = ranks, cols
        self._pos: dict[int, int] | None = None  # rank → row where not ascending ({}: ascending), on first look-up

    @classmethod
    def of(cls, ranks: Mapping[int, RankMetrics]) -> RankColumns:
        """The columns of any rank → :class:`RankMetrics` mapping (itself when it is one), ranks in its order."""
        import numpy as np

        if isinstance(ranks, RankColumns):
            return ranks
        keys = list(ranks)
        cols = {f: np.array([getattr(ranks[r], f) for r in keys], np.float64) for f in _RANK_FIELDS}
        return cls(np.asarray(keys, np.int64), cols)

    def _index(self, r: object) -> int:
        """Row of rank ``r``; KeyError when it has none."""
        import numpy as np

        if isinstance(r, (int, np.integer)) and not isinstance(r, bool):
            rk = self.ranks
            if self._pos is None:  # ascending (as computed): a binary search; else a dict made once
                self._pos = {} if len(rk) < 2 or bool((rk[1:] > rk[:-1]).all()) else {
                    int(x): i for i, x in enumerate(rk.tolist())}
            if not self._pos:
                i = int(np.searchsorted(rk, r))
                if i < len(rk) and rk[i] == r:
                    return i
            elif int(r) in self._pos:
                return self._pos[int(r)]
        raise KeyError(r)

    def __getitem__(self, r: int) -> RankMetrics:
        i = self._index(r)
        v = {f: float(self.cols[f][i]) for f in _RANK_FIELDS}
        cor = v.pop("copy_overlap_ratio")
        return RankMetrics(**v, copy_overlap_ratio=None if cor != cor else cor)

    def __contains__(self, r: object) -> bool:
        try:
            self._index(r)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks.tolist())

    def __len__(self) -> int:
        return len(self.ranks)

    def __repr__(self) -> str:
        """The repr of the dict of the same items (what ``Metrics.ranks`` printed when it was one)."""
        return repr(dict(self.items()))

    def to_dict(self) -> dict[int, dict[str, float | None]]:
        """rank → :meth:`RankMetrics.to_dict` of each, in the ranks' order."""
        return self._dicts(self.ranks.tolist(), self._lists())

    def _lists(self, rows: slice = slice(None)) -> list[list[float | None]]:
        """Each field's values of ``rows`` as Python floats (None for a NaN ``copy_overlap_ratio``)."""
        lists = [self.cols[f][rows].tolist() for f in _RANK_FIELDS]
        lists[-1] = [None if x != x else x for x in lists[-1]]
        return lists

    @staticmethod
    def _dicts(ranks: list[int], lists: list[list[float | None]]) -> dict[int, dict[str, float | None]]:
        # a dict display per rank (the fields of _RANK_FIELDS spelled out): twice as fast as dict(zip(...))
        return {r: {"busy_compute_s": a, "busy_comm_s": b, "busy_copy_s": c, "idle_s": i, "exposed_comm_s": e,
                    "overlap_ratio": o, "comm_share": s, "comm_share_kernel_view": k, "copy_overlap_ratio": co}
                for r, a, b, c, i, e, o, s, k, co in zip(ranks, *lists, strict=True)}

    def json_bytes(self) -> bytes:
        """``dumps_json(self.to_dict())``, the JSON object timeline.json holds: :meth:`json_pieces` joined."""
        return b"".join(self.json_pieces())

    def json_pieces(self) -> Iterator[bytes]:
        """:meth:`json_bytes` in pieces of at most :data:`_KEYS_PIECE` ranks each (100,000 ranks' text is 31 MB:
        written piece by piece, never held whole), made from the runs of consecutive ranks whose fields are the
        same floats (bit for bit; any NaN alike): each run's object written once and its ranks' keys joined around
        it, where 100,000 ranks in step are a few runs (a dict per rank, and orjson over them, took ~0.1 s).
        Where the runs are many (over a quarter of the ranks), the dicts as :meth:`to_dict`, in one piece."""
        import numpy as np

        from schedsim.io import dumps_json

        n = len(self.ranks)
        if n == 0:
            yield b"{}"
            return
        m = np.stack([self.cols[f] for f in _RANK_FIELDS], axis=1)
        bits = np.where(np.isnan(m), np.nan, m).view(np.uint64)  # NaNs as one pattern; -0.0 apart from 0.0
        heads = np.flatnonzero(np.r_[True, (bits[1:] != bits[:-1]).any(axis=1)]).tolist()
        del m, bits
        if len(heads) > n // 4 + 1:
            yield dumps_json(self.to_dict())
            return
        keys = dumps_json(self.ranks)[1:-1].split(b",")  # each rank's digits, as the dict's keys are written
        yield b"{"
        for k, (a, b) in enumerate(zip(heads, [*heads[1:], n], strict=True)):
            row = dumps_json(self._dicts([0], self._lists(slice(a, a + 1)))[0])
            sep = b'":' + row + b',"'
            yield b',"' if k else b'"'
            for s in range(a, b, _KEYS_PIECE):  # sep.join(keys[a:b]), a slice of keys at a time
                if s > a:
                    yield sep
                yield sep.join(keys[s:min(s + _KEYS_PIECE, b)])
            yield b'":' + row
        yield b"}"


#: Ranks per piece of :meth:`RankColumns.json_pieces` (~320 bytes each: ~5 MB a piece).
_KEYS_PIECE = 1 << 14


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
    ranks: Mapping[int, RankMetrics]
    critical_path: Sequence[str]
    critical_path_s: dict[str, float]
    pipeline: PipelineMetrics | None = field(default=None, metadata=OMIT_NONE)
    memory_peak: MemoryPeak | None = field(default=None, metadata=OMIT_NONE)
    copy_overlap_ratio: float | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, tl: Timeline, classes: Sequence[int] | np.ndarray | None = None) -> Metrics:
        """Compute the metrics of ``tl`` (``pipeline`` and ``memory_peak`` left None). ``classes``: per rank of
        the world, the rank of ``tl`` that stands for it (a symmetric lowering's timeline,
        :func:`schedsim.lower.training.rank_classes`): every rank then gets its representative's metrics, and the
        totals are those of the whole world, summed as its full timeline would sum them; default: the classes a
        symmetric prediction recorded in ``tl.meta["represented"]["classes"]`` (:func:`represented_classes`)."""
        return _compute(tl, represented_classes(tl) if classes is None else classes)

    def to_dict(self, *, ranks_as_columns: bool = False) -> dict[str, Any]:
        """The JSON form (``timeline.json``'s ``metrics``): rank keys stay ints until JSON writes them. With
        ``ranks_as_columns``, ``ranks`` is the :class:`RankColumns` itself where the metrics hold one (a mapping
        whose ``json_bytes`` :func:`schedsim.io.dumps_json` writes as the dicts' JSON: for writing, not reading),
        and ``critical_path`` the :class:`~schedsim.sim.path_ids.PathIds` itself where the metrics hold one
        (its ``json_pieces`` the list's text, which timeline.json's writer takes; ``dumps_json`` would not)."""
        d: dict[str, Any] = to_dict(replace(self, critical_path=[], ranks={}))  # copied below, not walked
        r = self.ranks
        if isinstance(r, RankColumns):
            d["ranks"] = r if ranks_as_columns else r.to_dict()
        else:
            d["ranks"] = {k: m.to_dict() for k, m in r.items()}
        cp = self.critical_path  # op ids: strings; the simulator's rows (PathIds) written from the coded names
        d["critical_path"] = cp if ranks_as_columns and isinstance(cp, PathIds) else list(cp)
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


def represented(tl: Timeline) -> Represented:
    """``tl.meta["represented"]`` of a symmetric prediction's timeline (``ranks``: the representatives, ``of``: the
    world size, ``classes``: each rank's representative; :func:`schedsim.sim.symmetry.mark_represented`), ``{}``
    for a timeline of every rank."""
    rep = tl.meta.get("represented") if isinstance(tl.meta, dict) else None
    return cast("Represented", rep) if isinstance(rep, dict) else {}


def represented_classes(tl: Timeline) -> list[int] | None:
    """Per rank of the world, the rank that stands for it in a timeline of a symmetric prediction
    (:func:`represented`); None for a timeline of every rank."""
    got = represented(tl).get("classes")
    return [int(x) for x in got] if isinstance(got, list) else None


def compute_metrics(tl: Timeline) -> dict[str, Any]:
    """``Metrics.of(tl).to_dict()``: the JSON form of :class:`Metrics`, as ``timeline.json`` stores it.

    Returns
    -------
    dict
        ``makespan_s``, ``ops``, ``busy_comm_s``, ``exposed_comm_s``, ``overlap_ratio``, ``ranks``
        ({rank: :class:`RankMetrics` fields}), ``critical_path``, ``critical_path_s``.
    """
    return Metrics.of(tl).to_dict()


def _low2(g: np.ndarray) -> np.ndarray:
    """``g & 3`` of int64 keys as int8 (the resource class of a ``rank * 4 + class`` key): 1 byte per row, cast in
    numpy's buffered chunks, not an 8-byte temporary (the low two bits survive the wrapping cast to int8)."""
    import numpy as np

    return np.bitwise_and(g, 3, dtype=np.int8, casting="unsafe")


def _compute(tl: Timeline, classes: Sequence[int] | np.ndarray | None = None) -> Metrics:
    """Makespan, per-rank busy/idle, exposed communication, overlap ratio, critical path (:class:`Metrics`).

    Every rank at once (:func:`_merged_by`, :func:`_sums_by`, :func:`_overlap_by`): the same floats as
    :func:`merged`, :func:`pieces_intersection` and :func:`union_length` rank by rank, which the tests compare."""
    import numpy as np

    from schedsim.gpu.rules import stable_order

    makespan = tl.makespan_s
    c = tl.columns
    res_vals, res_codes = c.resource
    code = {name: (res_vals.index(name) if name in res_vals else -2) for name in ("compute", "comm", "copy")}
    # rows grouped by (rank, resource) in program order (a radix sort of small keys), then each group by start
    # (stable: ties stay in program order), where it is not in start order already (one stream's ops are)
    cls = np.full(len(res_vals) + 1, 3, np.int64)  # 0 compute, 1 comm, 2 copy, 3 anything else
    for k, name in enumerate(("compute", "comm", "copy")):
        if code[name] >= 0:
            cls[code[name]] = k
    gkey = np.left_shift(c.rank, 2, dtype=np.int64)  # rank * 4, then the class added in place: one fresh array
    gkey += cls.astype(np.int8)[res_codes]  # the classes 0-3 as int8: a gather of 1 byte per row, not 8
    order = stable_order(gkey)
    gkey = gkey[order]  # then the starts: the unsorted keys freed first
    start = c.start_s[order]
    if len(gkey) > 1 and bool(((start[1:] < start[:-1]) & (gkey[1:] == gkey[:-1])).any()):
        o = np.lexsort((start, gkey))  # stable: a group's ties stay in program order
        order, gkey, start = order[o], gkey[o], start[o]
    end = c.end_s[order]
    rlo, rhi = (int(c.rank.min()), int(c.rank.max())) if len(gkey) else (0, -1)
    if 0 <= rlo and rhi < 4 * len(gkey) + 64:  # the ranks with rows, ascending: a count per rank, no per-row array
        present = np.flatnonzero(np.bincount(c.rank, minlength=rhi + 1))
    else:
        rank = gkey >> 2
        present = rank[np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])] if len(rank) else rank  # ascending
        del rank  # the per-row temporaries go as soon as they are used: the peak of a 1M-op predict
    nr = int(present[-1]) + 1 if len(present) else 0
    # NCCL kernels occupy their stream from when it reaches them (ready) to the end of the transfer,
    # spinning while the peer is late; nsys shows that span as kernel time
    m = _low2(gkey) == 1
    om = order[m]  # the order is read no more: freed before the comm rows' columns are gathered
    del order
    rd = c.ready_s[om]
    del om
    sc, ec, gc = start[m], end[m], gkey[m]
    gc >>= 2  # in place: no temporary
    del m
    kvs = rd  # np.where(np.isnan(rd), sc, rd), in place
    np.copyto(kvs, sc, where=np.isnan(rd))
    del rd, sc
    if len(gc) > 1 and not bool(((kvs[1:] >= kvs[:-1]) | (gc[1:] != gc[:-1])).all()):  # else sorted already
        o = np.argsort(_pairs(gc, kvs), kind="stable")
        gc, kvs, ec = gc[o], kvs[o], ec[o]
    kg, ks, ke = _merged_by(gc, kvs, ec, into=True)  # these rows' arrays are this function's own: in place
    del gc, kvs, ec
    kv = _sums_by(kg, ke - ks, nr)
    pg, ps, pe = _merged_by(gkey, start, end, into=True)  # each (rank, resource)'s pieces, in one pass, in place
    del gkey, start, end
    # split by resource one column at a time, each freed once split (the metrics' high-water mark at 1M ops)
    pc = _low2(pg)
    masks = [pc == k for k in range(3)]
    del pc
    gs = [pg[m] >> 2 for m in masks]
    del pg
    ss = [ps[m] for m in masks]
    del ps
    es = [pe[m] for m in masks]
    del pe, masks
    comp, comm, copy = zip(gs, ss, es, strict=True)
    del gs, ss, es
    busy_comp = _sums_by(comp[0], comp[2] - comp[1], nr)
    lc = _sums_by(comm[0], comm[2] - comm[1], nr)
    lcp = _sums_by(copy[0], copy[2] - copy[1], nr)
    ov = _overlap_by(comm, comp, nr)
    ovc = _overlap_by(copy, comp, nr)
    # the union of all three: of their pieces (the same pieces as of the intervals themselves), each rank's
    # comp, comm and copy pieces in that order sorted by start (stable)
    ag, as_, ae = (np.concatenate(x) for x in zip(comp, comm, copy, strict=True))
    runs = np.cumsum([0, len(comp[0]), len(comm[0]), len(copy[0])])  # each sorted by (rank, start): merged
    del comp, comm, copy
    ug, us, ue = _merged_by(ag, as_, ae, runs.tolist())
    del ag, as_, ae
    busy = _sums_by(ug, ue - us, nr)
    p = present if classes is None else np.asarray(classes, np.int64)  # a symmetric run: each rank's representative
    lc_p, ov_p, lcp_p, ovc_p = lc[p], ov[p], lcp[p], np.where(lcp[p] > 0, ovc[p], 0.0)
    pos_c, pos_cp = lc_p > 0, lcp_p > 0
    share = makespan > 0
    mk = makespan if share else 1.0
    cols = (busy_comp[p], lc_p, lcp_p, makespan - busy[p], lc_p - ov_p,
            np.where(pos_c, ov_p / np.where(pos_c, lc_p, 1.0), 0.0),
            lc_p / mk if share else np.zeros(len(p)), kv[p] / mk if share else np.zeros(len(p)),
            np.where(pos_cp, ovc_p / np.where(pos_cp, lcp_p, 1.0), 0.0))
    ranks = RankColumns(p if classes is None else np.arange(len(p), dtype=np.int64),
                        dict(zip(_RANK_FIELDS, (*cols[:-1], np.where(pos_cp, cols[-1], np.nan)), strict=True)))
    tot_comm, tot_overlap, tot_exposed, tot_copy, tot_copy_ov = (
        float(np.cumsum(x)[-1]) if len(x) else 0.0 for x in (lc_p, ov_p, lc_p - ov_p, lcp_p, ovc_p))
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
    ops = len(tl) if classes is None else int(np.bincount(c.rank, minlength=nr)[p].sum())
    return Metrics(makespan_s=makespan, ops=ops, busy_comm_s=tot_comm, exposed_comm_s=tot_exposed,
                   overlap_ratio=tot_overlap / tot_comm if tot_comm > 0 else 0.0, ranks=ranks,
                   critical_path=_path_of(tl), critical_path_s=cp_time,
                   copy_overlap_ratio=tot_copy_ov / tot_copy if tot_copy > 0 else None)


def _path_of(tl: Timeline) -> Sequence[str]:
    """``tl.critical_path`` as :class:`Metrics` keeps it: the simulator's :class:`~schedsim.sim.path_ids.PathIds`
    itself (read-only: rows, no id strings), else a copy of the list."""
    cp = tl.critical_path
    return cp if isinstance(cp, PathIds) else list(cp)


def _merged_by(group: np.ndarray, start: np.ndarray, end: np.ndarray, runs: Sequence[int] | None = None,
               into: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`merged` of every group at once: ``(group, start, end)`` of the pieces (int64, float64, float64), for
    intervals already sorted by group (ascending, contiguous) and, within one, by start; or, with ``runs`` (the
    bounds ``0, .., len(start)`` of runs each so sorted), of the runs merged in (group, start) order. The same
    floats as :func:`merged` of each group's slice (selections of its values and of their running maximum, no
    arithmetic), by one compiled pass (``_cwaves.merge_pieces``).

    ``into`` (one run only): the pieces are written over the three arrays given, which are the caller's no
    longer (three arrays of the rows fewer at the metrics' peak). One run is read in order, and piece ``k`` is
    written once rows ``0 .. i`` (``k <= i``) are read, so no row is overwritten before it is read."""
    import numpy as np

    from schedsim.sim.loop import compiled_loop

    n = len(start)
    if into and runs is None and all(a.flags.c_contiguous and a.flags.writeable for a in (group, start, end)) \
            and group.dtype == np.int64 and start.dtype == end.dtype == np.float64:
        og, os_, oe = group, start, end
    else:
        og, os_, oe = np.empty(n, np.int64), np.empty(n, np.float64), np.empty(n, np.float64)
    k = compiled_loop().merge_pieces(np.ascontiguousarray(group, np.int64), np.ascontiguousarray(start, np.float64),
                                     np.ascontiguousarray(end, np.float64),
                                     np.asarray([0, n] if runs is None else runs, np.int64), og, os_, oe)
    return og[:k], os_[:k], oe[:k]


def _sums_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group 0 .. n-1, ``values[its slice].sum()`` (float64[n], 0 where absent), ``group`` ascending and
    contiguous: the slices of one length summed as the rows of one matrix, which numpy sums pairwise row by
    row exactly as it sums one slice, so every sum is the one :func:`union_length` gives, bit for bit."""
    import numpy as np

    out = np.zeros(n, np.float64)
    m = len(group)
    if not m:
        return out
    heads = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    lens = np.diff(np.append(heads, m))
    for L in unique(lens)[0].tolist():
        sel = heads[lens == L]
        # each slice of length L a row, gathered from a view of ``values``' windows: the fresh C-contiguous matrix
        # that ``values[sel[:, None] + np.arange(L)]`` makes, without that index matrix (8 bytes per value) beside it
        out[group[sel]] = np.lib.stride_tricks.sliding_window_view(values, L)[sel].sum(axis=1)
    return out


def _pairs(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``(group, value)`` as complex128 numbers ``group + value·i``, which numpy sorts and searches by real part,
    then imaginary part: the pairs in lexicographic order, the floats compared as they are (set, not computed;
    groups below 2**53)."""
    import numpy as np

    k = np.empty(len(group), np.complex128)
    k.real = group
    k.imag = value
    return k


def _overlap_by(x: tuple[np.ndarray, np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray, np.ndarray],
                n: int) -> np.ndarray:
    """Per group 0 .. n-1, :func:`pieces_intersection` of its pieces of ``x`` and of ``y`` (each ``(group,
    start, end)`` from :func:`_merged_by`), every group at once: the same overlapping pairs in the same order
    (one sweep over both, the compiled ``_cwaves.overlaps``), summed as it sums them (:func:`_sums_by`)."""
    import numpy as np

    from schedsim.sim.loop import compiled_loop

    (xg, x0, x1), (yg, y0, y1) = x, y
    if not len(x0) or not len(y0):
        return np.zeros(n, np.float64)
    og, over = np.empty(len(x0) + len(y0), np.int64), np.empty(len(x0) + len(y0), np.float64)
    f64 = [np.ascontiguousarray(a, np.float64) for a in (x0, x1, y0, y1)]
    k = compiled_loop().overlaps(np.ascontiguousarray(xg, np.int64), f64[0], f64[1], np.ascontiguousarray(yg, np.int64),
                                 f64[2], f64[3], og, over)
    return _sums_by(og[:k], over[:k], n)
